"""The generation tables on a hand-made summary: the head-to-head section's ratios and its gaps."""
import pandas as pd

from rollout_bench.report import render


def row(backend, case, bs, tps, status="ok", variant="default", reserved=None, alloc=10.0, spread=None,
        spread_ok=None):
    return {"model": "m", "backend": backend, "variant": variant, "case": case, "batch_size": bs,
            "round_spread": spread, "spread_ok": spread_ok, "num_generations": 1, "lora_rank": 0,
            "sampling": "greedy", "status": status, "reason": None if status == "ok" else "why",
            "decode_tps": tps if status == "ok" else None, "peak_alloc_gb": alloc,
            # the fastest and the slowest round, `spread` apart
            "decode_tps_best": tps and tps * (1 + (spread or 0) / 2),
            "decode_tps_worst": tps and tps * (1 - (spread or 0) / 2),
            "peak_reserved_gb": reserved, "setup_s": 1.0, "gpu_name": "G"}


def test_head_to_head_takes_each_sides_fastest_variant_and_says_what_is_missing():
    df = pd.DataFrame([
        row("flex", "greedy", 64, 1200.0, variant="eager"), row("flex", "greedy", 64, 1500.0, variant="graphs",
                                                                 reserved=20.0),
        row("vllm", "greedy", 64, 1000.0, reserved=120.0),
        row("flex", "sweep", 8, 300.0), row("vllm", "sweep", 8, None, status="skipped"),
        row("vllm", "lora", 64, 900.0),
    ])
    lines = render.head_to_head(df, "flex", "vllm").splitlines()
    assert lines[0] == "### flex / vllm"
    assert "| m | greedy | 0 | greedy | 1 | 64 | graphs | 1,500 | default | 1,000 | 1.50 | —, — | 20.0 | 120.0 |" \
        in lines
    assert "| m | sweep | 0 | greedy | 1 | 8 | default | 300 | default | skipped |  | —, — | 10.0 |  |" in lines
    assert "| m | lora | 0 | greedy | 1 | 64 |  | not run | default | 900 |  | —, — |  | 10.0 |" in lines


def test_head_to_head_flags_the_ratio_where_either_sides_rounds_spread_over_its_limit(tmp_path):
    """A pair whose rounds spread past the job's max_round_spread (after its re-measures) shows both spreads and its
    ratio flagged, with the range over the rounds; a pair within it, or from records that predate the flag, keeps
    its bare ratio."""
    df = pd.DataFrame([
        row("flex", "greedy", 8, 1800.0, spread=0.012, spread_ok=True),
        row("vllm", "greedy", 8, 1600.0, spread=0.071, spread_ok=False),
        row("flex", "greedy", 64, 9600.0, spread=0.02, spread_ok=True),
        row("vllm", "greedy", 64, 9000.0, spread=0.03, spread_ok=True),
        row("flex", "greedy", 256, 17000.0, spread=0.2),
        row("vllm", "greedy", 256, 14000.0, spread=0.01),
    ])
    # as the render rule reads it: through the summary CSV, where flags beside missing ones are no longer bools
    df.to_csv(tmp_path / "s.csv", index=False)
    lines = render.head_to_head(pd.read_csv(tmp_path / "s.csv"), "flex", "vllm").splitlines()
    # flex's slowest round (1,800 x 0.994) against vLLM's fastest (1,600 x 1.0355), and the other way round
    assert ("| m | greedy | 0 | greedy | 1 | 8 | default | 1,800 | default | 1,600 | 1.12 ⚑ (1.08–1.17) "
            "| 1.2%, 7.1% | 10.0 | 10.0 |") in lines
    assert ("| m | greedy | 0 | greedy | 1 | 64 | default | 9,600 | default | 9,000 | 1.07 | 2.0%, 3.0% | 10.0 "
            "| 10.0 |") in lines
    assert ("| m | greedy | 0 | greedy | 1 | 256 | default | 17,000 | default | 14,000 | 1.21 | 20.0%, 1.0% | 10.0 "
            "| 10.0 |") in lines


def test_head_to_head_without_either_backend_says_so():
    df = pd.DataFrame([row("cb_sync", "greedy", 64, 800.0)])
    assert render.head_to_head(df, "flex", "vllm") == "### flex / vllm\n\nNeither flex nor vllm is in these results.\n"


def test_a_case_with_eos_on_shows_lengths_tail_and_occupancy():
    base = {"ignore_eos": True, "len_p50": 32.0, "len_p90": 32.0, "eos_rate": None, "time_to_last_s": 1.0,
            "decode_occupancy": None, "pct_of_ref": None}
    eos = {"ignore_eos": False, "time_to_last_s": 2.25}
    df = pd.DataFrame([
        {**row("hf_generate", "greedy", 8, 100.0), **base},
        {**row("hf_generate", "realistic", 8, 80.0), **base, **eos, "len_p50": 61.0, "len_p90": 140.0,
         "eos_rate": 1.0},
        {**row("flex", "realistic", 8, 160.0), **base, **eos, "len_p50": 61.0, "len_p90": 141.0, "eos_rate": 0.875,
         "decode_occupancy": 0.61},
    ]).drop(columns="pct_of_ref")
    md = render.generation_table(df, "hf_generate")
    assert "### m — realistic (EOS on; LoRA r=0, sampling greedy, n=1)" in md
    assert "| flex | default | 8 | 160 | 200.0 | 61 | 141 | 88 % | 2.25 | 0.61 | 10.00 | ok |" in md
    assert "| hf_generate | default | 8 | 80 | 100.0 | 61 | 140 | 100 % | 2.25 | — | 10.00 | ok |" in md
    greedy = md.split("### m — greedy")[1].split("###")[0]
    assert "(LoRA r=0" in greedy and "time to last" not in greedy


def test_the_speed_table_shows_decode_bandwidth_where_the_engine_counts_its_bytes():
    df = pd.DataFrame([
        {**row("flex", "greedy", 64, 1500.0, variant="graphs"), "ignore_eos": True, "decode_gb_per_s": 3120.4,
         "of_copy_rate": 0.726},
        {**row("flex", "greedy", 8, 150.0, variant="eager"), "ignore_eos": True, "decode_gb_per_s": 12.0,
         "of_copy_rate": None},  # on CPU: no copy rate measured, so no fraction
        {**row("vllm", "greedy", 64, 1000.0), "ignore_eos": True, "decode_gb_per_s": None, "of_copy_rate": None},
    ])
    md = render.generation_table(df, "vllm")
    assert "| flex | graphs | 64 | 1,500 | 1,500 | 150.0 | 3,120 (73%) | 10.00 |" in md
    assert "| flex | eager | 8 | 150 | 150 |  | 12 | 10.00 |" in md
    assert "| vllm | default | 64 | 1,000 | 1,000 | 100.0 |  | 10.00 |" in md


def test_a_prefill_heavy_case_shows_the_prefill_rate_and_kernel():
    """The long-prompt case: each engine's prefill-only rate (or why none) and what ran its prefill, FA4's guard
    reason where flex fell back to its Triton kernel; other cases' sections keep their columns."""
    long = {"ignore_eos": True, "long_prompts": True, "prompt_tokens_mean": 5120.0, "median_wall_s": 1.5}
    df = pd.DataFrame([
        {**row("flex", "prefill", 8, 300.0), **long, "prefill_tps": 90000.0, "prefill_engine_tps": 120000.0,
         "prefill_kernel": "fa4", "prefill_kernel_reason": None},
        {**row("flex", "prefill", 64, 900.0, variant="graphs"), **long, "prefill_tps": 80000.0,
         "prefill_engine_tps": 95000.0, "prefill_kernel": "flex-triton", "prefill_kernel_reason": "no CUDA device"},
        {**row("vllm", "prefill", 8, 280.0), **long, "prefill_tps": 85000.0, "prefill_kernel": "FLASH_ATTN",
         "prefill_kernel_reason": "vLLM runs the attention backend it picks itself"},
        {**row("hf_static", "prefill", 8, 100.0), **long, "prefill_tps": None,
         "prefill_reason": "no one-token call", "prefill_kernel": "sdpa", "prefill_kernel_reason": "x"},
        {**row("flex", "greedy", 8, 300.0), "ignore_eos": True, "long_prompts": False, "prefill_kernel": "fa4"},
    ])
    md = render.generation_table(df, "vllm")
    assert "### m — prefill (prefill-heavy: long prompts;" in md
    assert "| flex | default | 8 | 5,120 | 1.500 | 300 | 107.1 | 90,000 | 120,000 | fa4 | 10.00 | ok |" in md
    assert "| flex | graphs | 64 | 5,120 | 1.500 | 900 |  | 80,000 | 95,000 | flex-triton (no CUDA device) |" in md
    assert "| vllm | default | 8 | 5,120 | 1.500 | 280 | 100.0 | 85,000 | — | FLASH_ATTN | 10.00 | ok |" in md
    assert "| — (no one-token call) | — | sdpa |" in md
    greedy = md[md.index("### m — greedy"):].split("\n\n")[1]
    assert "prefill" not in greedy  # the other cases' tables keep their columns


def test_a_long_prompt_case_without_prefill_rate_says_its_prefill_was_not_measured():
    long = {"ignore_eos": True, "long_prompts": True, "prompt_tokens_mean": 5120.0, "median_wall_s": 1.5,
            "prefill_kernel": "vllm", "prefill_kernel_reason": "x"}
    df = pd.DataFrame([{**row("vllm", "long", 8, 280.0), **long, "prefill_rate": False, "prefill_tps": None,
                        "prefill_reason": None}])
    md = render.generation_table(df, "vllm")
    assert "### m — long (prefill-heavy: long prompts;" in md
    assert "| — (not measured: prefill_rate off) | — | vllm |" in md


def test_a_failure_reason_with_a_traceback_stays_in_its_row():
    """A reason's newlines would end the markdown row and its pipes split it: one line, pipes escaped."""
    df = pd.DataFrame([{**row("flex", "greedy", 8, None, status="failed", variant="fa4"), "ignore_eos": True,
                        "reason": "building the engine: InductorError:\n  File 'x', line 3\n    a | b\nOutOfMemoryError"},
                       {**row("vllm", "greedy", 8, 100.0), "ignore_eos": True}])
    lines = render.generation_table(df, "vllm").splitlines()
    mine = [line for line in lines if "building the engine" in line]
    assert len(mine) == 1 and mine[0].endswith(
        "| failed: building the engine: InductorError: File 'x', line 3 a \\| b OutOfMemoryError |"), mine
    assert not any(line.startswith("  ") for line in lines)


def test_one_spread_verdict_for_every_table(tmp_path):
    """The answer block and the targets (headline.over_limit) take the verdict the generation table shows: the job's
    own spread_ok, whatever the folder's limit says; the folder's limit only for records that carry none."""
    from rollout_bench.report import headline

    df = pd.DataFrame([row("a", "greedy", 8, 1.0, spread=0.03, spread_ok=False),  # its case's own limit was tighter
                       row("b", "greedy", 8, 1.0, spread=0.07, spread_ok=True),  # its case's own limit was wider
                       row("c", "greedy", 8, 1.0, spread=0.07), row("d", "greedy", 8, 1.0, spread=0.03)])
    df.to_csv(tmp_path / "s.csv", index=False)
    sides = [r for _, r in pd.read_csv(tmp_path / "s.csv").iterrows()]
    assert [s.backend for s in headline.over_limit(sides, 0.05)] == ["a", "c"]
    assert [s.backend for s in headline.over_limit(sides, None)] == ["a"]
