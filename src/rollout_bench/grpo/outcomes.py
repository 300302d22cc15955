"""Per-step figures of how the step's completions came out that TRL does not log: answer accuracy, and
completions cut short.

    accuracy                     fraction whose `check_answer` score is the exact-answer score. TRL logs
                                 each reward function's mean, which mixes exact answers with near misses
                                 and format failures
    completions/cut_short_frac   fraction that ended neither with EOS nor at max_completion_length. A
                                 rollout ends at one or the other; anything else is a backend that drops
                                 or mistakes its stop token (TRL would read such a completion as truncated)

The trainer's reward step, which receives the completion ids, is wrapped on the instance (as phases.py
does); the figures go into the trainer's metrics, which TRL averages and logs per step.
"""
import functools

from ..assets.rewards import EXACT_ANSWER

ACCURACY = "accuracy"
CUT_SHORT = "completions/cut_short_frac"
ANSWER_FUNC = "check_answer"


def cut_short(completion_ids: list[list[int]], eos_ids, max_len: int) -> float:
    ended = [(bool(ids) and ids[-1] in eos_ids) or len(ids) >= max_len for ids in completion_ids]
    return 1.0 - sum(ended) / len(ended)


def install(trainer) -> None:
    col = [f.__name__ for f in trainer.reward_funcs].index(ANSWER_FUNC)
    # TRL's stop tokens (tokenizer and generation config); the tokenizer's where a patched trainer has none
    eos = set(getattr(trainer, "eos_token_ids", None) or [trainer.processing_class.eos_token_id])
    max_len = trainer.args.max_completion_length
    calculate = trainer._calculate_rewards

    @functools.wraps(calculate)
    def scored(inputs, prompts, completions, completion_ids_list):
        per_func = calculate(inputs, prompts, completions, completion_ids_list)  # [B, n_funcs]
        metrics = trainer._metrics["train" if trainer.model.training else "eval"]
        metrics[ACCURACY].append((per_func[:, col] == EXACT_ANSWER).float().mean().item())
        metrics[CUT_SHORT].append(cut_short(completion_ids_list, eos, max_len))
        return per_func

    trainer._calculate_rewards = scored
