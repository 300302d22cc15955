"""GRPO training with TRL's GRPOTrainer, one rollout backend per job, and the equivalence comparison.

    config        TrainSpec (the seed's hyper-parameters) -> GRPOConfig
    data          DAPO-schema rows -> chat prompts + `answer`
    rewards       the seed's four reward functions
    driver        one training run; job: one job -> stats JSON (kind "train")
    flex_rollout  our engine behind TRL's rollout_func
    stats_callback, phases   per-step TRL keys, wall time, memory, step-time breakdown
    outcomes, importance     per step: accuracy, completions cut short; what the IS correction did
    verdict       the reference seeds' noise band per window, a candidate's excursions from it
    compare, report          pairwise diffs + gate + band verdict; tables and per-step charts
    availability  which backends can run here; cli: the command lines
"""
