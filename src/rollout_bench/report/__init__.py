"""Tables, charts and the README's answer, made from stats files (the top layer).

    aggregate  stats JSONs -> the summary frame and CSV
    render     generation and decode-profile tables, charts
    train      GRPO training and equivalence tables, per-step charts
    headline   the README's answer block, from the newest headline folder
    standings  every published pair (results/published/STANDINGS.md)
    blocks     the tables in docs/ made from published stats (docs/results.md)
    cli        `python -m rollout_bench aggregate|render|render-decode-profile|render-train`
"""
