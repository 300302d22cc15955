"""Logits from the last hidden state: an fp32 projection, then the model's final softcap if it has one."""
import torch

from . import skinny_gemm


def float_logits(head: torch.nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """h [n, hidden] -> logits [n, V] in float32, never rounded to the weights' dtype.

    TRL's loss head computes the trainer's logprobs this way (fp32 output of a bf16 matmul). A bf16
    rounding of the logits (an error of up to 0.03 at |z| = 8) becomes ten times that logprob error
    at the GRPO sampling temperature of 0.1, which TRL's importance-sampling correction then reads as
    off-policy."""
    if h.dtype == torch.float32:
        return head(h)
    if h.is_cuda:
        # tiles only inside a decode graph's capture (skinny_gemm.active): prefill's [n, hidden] takes cuBLAS
        tiles = skinny_gemm.tiles_for(h, head.weight) if h.dim() == 2 else None
        z = (torch.mm(h, head.weight.t(), out_dtype=torch.float32) if tiles is None
             else skinny_gemm.triton_linear(h.contiguous(), head.weight, tiles, out_dtype=torch.float32))
    else:  # mm's out_dtype is CUDA-only; fp32 products of bf16 inputs are exact, only the sum order differs
        z = h.float() @ head.weight.float().t()
    return z if head.bias is None else z + head.bias.float()


def softcap(z: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(z / cap), as HF's Gemma heads bound their logits; z unchanged when cap is None."""
    return z if cap is None else torch.tanh(z / cap) * cap


def lm_logits(lm, h: torch.Tensor) -> torch.Tensor:
    """h [..., hidden] after the final norm -> the logits [..., V] float32 that sampling and logprobs
    see: the softcap (Gemma's final_logit_softcapping) is part of the policy, so it comes before both."""
    return softcap(float_logits(lm.lm_head, h), getattr(lm.config, "final_logit_softcapping", None))
