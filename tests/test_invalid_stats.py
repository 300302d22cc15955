"""A corrupt cached stats file: every reader names it and the fix; at start it is moved aside so its job reruns."""
import pytest

from rollout_bench import __main__ as cli
from rollout_bench.core import stats
from rollout_bench.core.workload import Sampling
from rollout_bench.grpo import compare
from rollout_bench.pipeline import invalid_stats
from rollout_bench.report import train as report

WL = {"lora_rank": 0, "num_generations": 1, "sampling": Sampling().to_dict(), "ignore_eos": True,
      "max_new_tokens": 4}


@pytest.fixture
def files(tmp_path):
    rec = stats.skipped(stats.base("generate", backend="vllm", variant="default", model="m", workload=WL),
                        "vllm is not installed here")
    good, truncated, off_schema = (tmp_path / f"{n}.json" for n in ("good", "truncated", "off_schema"))
    stats.finish(rec, good)
    truncated.write_text(good.read_text()[:40])
    off_schema.write_text(good.read_text().replace('"status": "skipped"', '"status": "maybe"'))
    return good, truncated, off_schema


def _names_file_and_fix(excinfo, path):
    msg = str(excinfo.value)
    assert str(path) in msg and "Delete it and rerun" in msg, msg


def test_load_names_a_truncated_or_off_schema_file(files):
    good, truncated, off_schema = files
    assert stats.load(good)["status"] == "skipped"
    with pytest.raises(stats.InvalidResultFile, match="not JSON") as e:
        stats.load(truncated)
    _names_file_and_fix(e, truncated)
    with pytest.raises(stats.InvalidResultFile, match="stats.schema.json") as e:
        stats.load(off_schema)
    _names_file_and_fix(e, off_schema)


def test_every_reader_names_the_file(files, tmp_path):
    good, truncated, _ = files
    with pytest.raises(stats.InvalidResultFile) as e:  # was a bare JSONDecodeError
        cli.main(["aggregate", "--out", str(tmp_path / "summary.csv"), str(good), str(truncated)])
    _names_file_and_fix(e, truncated)
    for read in (report.training_table, report.trajectory_frame, report.equivalence_table):
        with pytest.raises(stats.InvalidResultFile) as e:
            read([str(truncated)])
        _names_file_and_fix(e, truncated)
    with pytest.raises(stats.InvalidResultFile) as e:
        compare.compare(good, truncated, tmp_path / "cmp.json")
    _names_file_and_fix(e, truncated)


def test_set_aside_moves_only_invalid_files(files, tmp_path):
    good, truncated, off_schema = files
    missing = tmp_path / "missing.json"
    moved = invalid_stats.set_aside([str(p) for p in (good, truncated, off_schema, missing)])
    assert len(moved) == 2 and str(truncated) in moved[0] and str(off_schema) in moved[1], moved
    assert "reruns" in moved[0]
    assert good.exists() and not truncated.exists() and not off_schema.exists() and not missing.exists()
    assert (tmp_path / "truncated.json.corrupt").exists() and (tmp_path / "off_schema.json.corrupt").exists()


def test_a_corrupt_autotune_record_is_named(tmp_path):
    from rollout_bench.backends import kernel_tuning

    p = tmp_path / "decode_opts.json"
    p.write_text('{"status": "o')
    with pytest.raises(stats.InvalidResultFile) as e:
        kernel_tuning.load(p)
    _names_file_and_fix(e, p)
