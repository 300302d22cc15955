"""What TRL's importance-sampling (IS) correction did to each GRPO step, logged as `is/*`.

Where the rollout returns its own logprobs (vllm, flex), TRL 1.15 multiplies each completion token's
policy loss by an IS weight: exp(trainer logprob - sampler logprob), per token or summed over the
completion (sequence modes), then clipped (`*_truncate`) or zeroed outside [clip_min, clip_max]
(`*_mask`). TRL logs only the weight's min/mean/max and the mean/max |logprob gap|; a sequence ratio
of 3e-6 or a zeroed weight reads there as a number, not as "this step's policy gradient was scaled
by 3e-6". The trainer's scoring step is wrapped on the instance (as phases.py does) and, from the
tensors it hands to the loss, these go into the trainer's metrics, which TRL averages per step:

    is/logp_gap/mean, is/logp_gap/p99, is/logp_gap/max
                                        |trainer - sampler| logprob per completion token (nats); TRL averages
                                        each over a step's generation batches, so with several a step's max is
                                        the mean of their maxima
    is/kl/mean                          KL(sampler || trainer) per token, the k3 estimate on the sampled tokens:
                                        exp(d) - 1 - d, d = trainer - sampler (>= 0, unbiased, low variance)
    is/logp_bias/mean                   trainer - sampler per token: what a sequence ratio sums
    is/seq_log_ratio/mean               that sum per completion: the log of the raw sequence ratio
    is/weight/mean                      the weight the loss applies per completion token (1 = unchanged)
    is/zeroed/token_frac, seq_frac      tokens, and completions on every token, whose weight is 0
                                        (masked, or a ratio that underflowed)
    is/clipped/token_frac               tokens whose weight a `*_truncate` bound changed
"""
import functools

import torch

PREFIX = "is/"


def effect(out: dict, sequence_level: bool) -> dict[str, float]:
    """The `is/*` figures of one scored batch (`_generate_and_score_completions`' output)."""
    mask = out["completion_mask"].bool()  # [B, T]
    diff = out["old_per_token_logps"] - out["sampling_per_token_logps"]  # [B, T] trainer - sampler
    scored = mask & ~torch.isnan(diff)  # TRL gives tokens the sampler could not score no correction
    diff = torch.where(scored, diff, torch.zeros_like(diff))
    weight = out["importance_sampling_ratio"].expand_as(mask)  # [B, T]; sequence modes: [B, 1] broadcast
    seq_log = diff.sum(-1, keepdim=True)  # [B, 1]
    raw = torch.exp(seq_log).expand_as(mask) if sequence_level else torch.exp(diff)  # [B, T] before clip/mask
    gap = diff[scored].abs().float()
    w = weight[mask].float()
    zero = weight == 0
    has_tokens = mask.any(-1)  # [B]
    clipped = mask & ~zero & ~torch.isclose(weight, raw, rtol=1e-5, atol=0.0)
    none = torch.tensor(0.0)
    return {
        "logp_gap/mean": (gap.mean() if gap.numel() else none).item(),
        "logp_gap/p99": (torch.quantile(gap, 0.99) if gap.numel() else none).item(),
        "logp_gap/max": (gap.max() if gap.numel() else none).item(),
        "kl/mean": ((torch.expm1(diff[scored].float()) - diff[scored].float()).mean() if gap.numel() else none).item(),
        "logp_bias/mean": (diff[scored].float().mean() if gap.numel() else none).item(),
        "seq_log_ratio/mean": seq_log[has_tokens].float().mean().item() if has_tokens.any() else 0.0,
        "weight/mean": (w.mean() if w.numel() else none).item(),
        "zeroed/token_frac": (zero[mask].float().mean() if w.numel() else none).item(),
        "zeroed/seq_frac": ((zero | ~mask).all(-1)[has_tokens].float().mean() if has_tokens.any() else none).item(),
        "clipped/token_frac": (clipped[mask].float().mean() if w.numel() else none).item(),
    }


def install(trainer) -> bool:
    """Record `is/*` per step where TRL's correction runs (after flex_rollout.enable_importance_sampling);
    True if it does."""
    if not (trainer.use_vllm and trainer.vllm_importance_sampling_correction):
        return False
    sequence_level = trainer.vllm_importance_sampling_mode.startswith("sequence")
    score = trainer._generate_and_score_completions

    @functools.wraps(score)
    def recorded(*args, **kwargs):
        out = score(*args, **kwargs)
        if "sampling_per_token_logps" in out and "importance_sampling_ratio" in out:
            mode = "train" if trainer.model.training else "eval"
            for k, v in effect(out, sequence_level).items():
                trainer._metrics[mode][PREFIX + k].append(v)
        return out

    trainer._generate_and_score_completions = recorded
    return True
