"""TRL 1.15's GRPO loss head on a host without Triton (the CPU test machine).

GRPOTrainer always patches the policy with TRL's fused LM head, whose chunked log-prob kernel is
Triton; `trl.trainer.utils` sets `_ChunkedLogProbFunction = None` when Triton does not import and
then crashes on the first forward (`'NoneType' object has no attribute 'apply'`). Where that
happens, this installs the same computation in plain torch (materialised logits: fine for tiny
models). GPU hosts have Triton, so TRL's own kernel runs there and this is never installed.
"""
from types import SimpleNamespace

import torch


def _logprobs(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
              logit_scale=1.0, outputs=("log_probs",)):
    # hidden: [N, H], weight: [V, H], targets: [N]; same transform order as TRL's kernel
    z = torch.nn.functional.linear(hidden, weight, bias).float() * logit_scale  # [N, V]
    if final_logit_softcapping is not None:
        z = final_logit_softcapping * torch.tanh(z / final_logit_softcapping)
    logp = torch.log_softmax(z / temperature, dim=-1)
    picked = logp.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None
    log_sum_sq = torch.logsumexp(2 * logp, dim=-1).detach() if "log_sum_sq_probs" in outputs else None
    mean_logits = (z / temperature).mean(-1).detach() if "mean_logits" in outputs else None
    is_top1 = (z.argmax(-1) == targets) if "is_top1" in outputs else None
    return picked, entropy, log_sum_sq, mean_logits, is_top1


def ensure_logprob_head() -> bool:
    """Install the torch fallback if TRL has no kernel; True when it did."""
    import trl.trainer.utils as trl_utils

    if trl_utils._ChunkedLogProbFunction is not None:
        return False
    trl_utils._ChunkedLogProbFunction = SimpleNamespace(apply=_logprobs)
    return True
