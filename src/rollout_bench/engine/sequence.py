"""One completion being generated: its tokens, sampling parameters and where its KV lives."""
from dataclasses import dataclass, field


@dataclass(slots=True)
class Completion:
    token_ids: list[int]  # without the prompt; ends with the EOS when it stopped there
    # log_softmax(logits / T)[token] over the full vocabulary, T = temperature (1 for greedy), in
    # float32, before top-k/top-p/min-p: the policy logprob TRL recomputes, not that of the truncated
    # distribution the token was drawn from.
    logprobs: list[float]


@dataclass(slots=True, eq=False)
class Sequence:
    id: int  # prompt-major index in its request batch; keys the sampling noise
    tokens: list[int]  # prompt + completion so far
    prompt_len: int
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int  # per-sequence seed, already mixed with `id`
    eos_token_id: int | None
    logprobs: list[float] = field(default_factory=list)
    slot: int = 0  # page-table row while resident; 0 = not resident (row 0 is the padding row)
    admitted: int = -1  # admission counter: the newest resident sequence is preempted first
    finished: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.num_generated

    @property
    def last_token(self) -> int:
        return self.tokens[-1]

    def append(self, token: int, logprob: float) -> bool:
        """Add one sampled token; True when the sequence is now finished."""
        assert not self.finished and self.remaining > 0
        self.tokens.append(token)
        self.logprobs.append(logprob)
        self.finished = self.remaining == 0 or token == self.eos_token_id
        return self.finished

    def completion(self) -> Completion:
        return Completion(self.tokens[self.prompt_len:], list(self.logprobs))
