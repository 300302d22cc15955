"""Measurement and diagnostics of the flex engine, outside it (docs/design.md §6).

They drive the engine through its public API only (Engine, its scheduler, and the runner's
`set_rows`, `decode_step`, `decode_inputs`, `capture`):

- `autotune`: the autotune pass, per model: each batch size's winning decode-kernel options
  (backends/kernel_tuning.py replays them in flex jobs).
- `decode_sweep`: each decode-kernel option set timed as the replay of the whole captured decode
  step; the autotune pass records its winner.
- `decode_profile`: the decode-profile job (per model, with the options flex jobs replay).
- `step_profile`: one decode step's time by kernel class (GEMM, attention, BlockMask,
  norm/rotary/elementwise, sampling) and the gaps between kernels, from torch.profiler.
- `gpu_check`: a stand-alone GPU self-check and benchmark on the Qwen3-4B shape.
- `logprob_gap`: where the sampler-vs-trainer logprob gap comes from (the bf16 noise floor).
- `random_model`: seeded random-weight models and adapters for the tests and both tools.
- `gemm_bench`: the decode GEMMs per shape and implementation; the autotune pass's tile tuning.
"""
