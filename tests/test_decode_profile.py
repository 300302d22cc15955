"""The decode-profile job on the CPU: a record per batch size with the replayed kernel options, and its table."""
import json

import pytest

from rollout_bench.core import stats
from rollout_bench.diagnostics import decode_profile, step_profile
from rollout_bench.report import render

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_record_per_batch_size_with_the_options_flex_jobs_replay(tiny_assets, tmp_path):
    tuned = tmp_path / "decode_opts.json"
    tuned.write_text(json.dumps({"status": "ok", "by_batch": {"2": {"best": {"BLOCK_N": 32}}, "4": {"best": {}}}}))
    out = tmp_path / "decode_step.json"
    rec = decode_profile.run(model="qwen3-tiny", model_dir=tiny_assets["model"], batch_sizes=[4, 2, 1],
                             prompt_tokens=[20, 40], max_new_tokens=24, dtype="float32", out=str(out),
                             autotune=str(tuned))
    assert json.loads(out.read_text()) == rec and rec["status"] == "ok" and rec["env"]["torch"]
    assert (rec["kind"], rec["variant"], list(rec["by_batch"])) == ("decode_profile", "eager", ["1", "2", "4"])
    assert rec["by_batch"]["2"]["decode_kernel_options"] == {"BLOCK_N": 32}  # what a flex job of 2 replays
    assert rec["by_batch"]["4"]["decode_kernel_options"] == {}
    for b, p in rec["by_batch"].items():
        assert p["rows"] == int(b) and p["replay"] == "eager"
        assert all(p["class_ms"][c] > 0 for c in step_profile.CLASSES)
    table = render.decode_step_table([stats.read_json(out)])
    rows = [line for line in table.splitlines() if line.startswith("| qwen3-tiny |")]
    assert [r.split(" | ")[1] for r in rows] == ["1", "2", "4"] and all(r.endswith("| cpu |") for r in rows)
    p = rec["by_batch"]["2"]
    share = p["class_ms"]["attention"] / p["profiled_step_ms"]
    assert f"{p['class_ms']['attention']:.3f} ({share:.0%})" in rows[1]
    assert "| BlockMask |" in table and "a check of the code path, not a speed" in table
