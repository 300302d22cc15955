"""The trainer's SDPA kernels in a GRPO process: cuDNN's attention off, on every backend alike.

On the H200 (torch 2.11, results/published/h200-2026-12-01-session7) a learn run's gradient went NaN from a
finite forward and loss; the replay of that step gave NaN gradients with SDPA's default kernels and finite
ones with the math, memory-efficient and no-cuDNN kernels, and autograd's anomaly mode named
`ScaledDotProductCudnnAttentionBackward0` (pytorch/pytorch#196678: cuDNN's SDPA backward returns NaN dQ
under an explicit attention mask on Hopper). The trainer's log-prob forward and backward run SDPA with
the batch's padding mask, so the process keeps SDPA free to choose among the other kernels. The flag is
process-wide, so the rollouts that run SDPA in the trainer's process (hf_generate's `model.generate`,
transformers_cb's `paged|sdpa`, Unsloth's) run without cuDNN too, unlike the generation jobs of the same
backends; flex (flex_attention) and vLLM (its own kernels) are untouched. The policy is the same for every
GRPO backend; GRPO step times from before it (2026-12-01 session 8) ran other kernels.
"""
import torch

# torch.backends.cuda's query of each SDPA backend's process-wide switch
BACKENDS = {"cudnn": "cudnn_sdp_enabled", "flash": "flash_sdp_enabled",
            "mem_efficient": "mem_efficient_sdp_enabled", "math": "math_sdp_enabled"}
REASON = "pytorch/pytorch#196678: cuDNN's SDPA backward gives NaN gradients under a mask on Hopper"


def state() -> dict:
    """Which SDPA backends this process may use (stats: `attention_kernels`)."""
    return {name: bool(getattr(torch.backends.cuda, query)()) for name, query in BACKENDS.items()}


def apply() -> dict:
    """Turn cuDNN's SDPA off for this process -> what the trainer may use, and why."""
    torch.backends.cuda.enable_cudnn_sdp(False)
    on = state()
    assert not on["cudnn"], on
    return {"sdpa": on, "cudnn_off_because": REASON}
