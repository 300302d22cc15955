"""The workload every backend runs: sampling presets, LoRA targets and the resolved per-job dict."""
from dataclasses import asdict, dataclass, field

# The seeds' equivalence sampling: near-greedy but stochastic, so rollouts stay comparable.
SAMPLING_PRESETS = {
    "greedy": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0},
    "equivalence": {"temperature": 0.1, "top_p": 0.97, "top_k": 5, "min_p": 0.5},
}
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "seed")
# LoRA on all projections: every linear of a decoder layer (the config's `lora.targets` default).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def spread_rows(n: int, k: int) -> list[int]:
    """k row indices of n, first and last among them and the rest evenly between (all n where n <= k)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    seed: int = 3407

    def __post_init__(self):
        assert self.temperature >= 0 and 0 < self.top_p <= 1 and self.top_k >= 0 and 0 <= self.min_p < 1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_config(cls, value, seed: int) -> "Sampling":
        """`value` is a preset name or a dict of SAMPLING_KEYS (validated by the config schema)."""
        if isinstance(value, str):
            return cls(**SAMPLING_PRESETS[value], seed=seed)
        return cls(**{"seed": seed, **value})

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GenSpec:
    """Everything a generation backend needs to build its engine for one job."""
    model_dir: str
    adapter_dir: str | None  # None = no LoRA
    variant: str
    batch_size: int  # max sequences in flight
    max_new_tokens: int
    sampling: Sampling
    ignore_eos: bool
    eos_token_id: int
    pad_token_id: int
    max_prompt_tokens: int
    num_generations: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    options: dict = field(default_factory=dict)  # backend-specific knobs from config
    # each completion has a budget of its own, passed to generate(..., max_new_tokens=[...]) (a trace case)
    per_request_lengths: bool = False
    rows: int | None = None  # sequences a round submits (n_prompts x num_generations); None: batch_size

    def fits(self, max_batch: int) -> bool:
        """Whether an engine of max_batch slots runs this spec's rounds as one of batch_size would: it has the
        slots, and a round of more rows than batch_size (queued behind it) cannot spread over more slots."""
        return self.batch_size <= max_batch and (self.rows is None or self.rows <= self.batch_size
                                                 or self.batch_size == max_batch)

    @property
    def max_seq_len(self) -> int:
        return self.max_prompt_tokens + self.max_new_tokens
