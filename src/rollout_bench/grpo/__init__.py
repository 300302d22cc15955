"""GRPO training with TRL's GRPOTrainer, one rollout backend per job, and the equivalence comparison.
(The seed's four reward functions are the task's: assets/rewards.py.)

    config        TrainSpec (the seed's hyper-parameters) -> GRPOConfig
    data          DAPO-schema rows -> chat prompts + `answer`
    driver        one training run; job: one job -> stats JSON (kind "train")
    flex_rollout  our engine behind TRL's rollout_func
    stats_callback, phases   per-step TRL keys, wall time, memory, step-time breakdown
    outcomes, importance     per step: accuracy, completions cut short; what the IS correction did
    verdict       the reference seeds' noise band per window, a candidate's excursions from it
    compare       pairwise diffs + gate + band verdict (report/train.py: the tables and charts)
    nan_replay    a saved non-finite step replayed, to find where it came from
    availability  which backends can run here; cli: the command lines
"""
