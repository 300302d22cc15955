"""The generation benchmark: one job (one engine) serves its cells; each cell's rounds timed and checked.

    job          a job's cells in order: plan, build once, serve, one stats file a cell, the job's record
    measure      one cell: warm-up, timed rounds, re-measure on spread, lengths and memory checks
    round_probe  what the process did in a round: CPU time, garbage-collector pauses; the heap frozen before
    completions  completion-length statistics of a cell's outputs
    trace        recorded completion-length distributions, replayed as per-request budgets
"""
