"""The command's own wall time, recorded by the Snakefile's handlers: from the process's start to its end."""
import json
import time

from rollout_bench.pipeline import invocation


def test_an_invocation_records_its_command_and_wall(tmp_path):
    path = tmp_path / "logs/invocation.json"
    assert invocation.finish(True, str(path)) is None  # no start written: nothing to finish, nothing written
    assert not path.exists()
    argv = ["/x/snakemake", "--cores", "16", "--config", "profile=headline"]
    rec = invocation.start("headline", str(path), argv=argv)
    assert rec["command"] == "snakemake --cores 16 --config profile=headline" and rec["wall_s"] is None
    assert rec["t0"] <= time.time()  # backdated to the process's start
    time.sleep(0.05)
    done = invocation.finish(False, str(path))
    assert done["ok"] is False and done["wall_s"] >= 0.05 and done["profile"] == "headline"
    assert json.loads(path.read_text()) == done


def test_the_recorded_command_reads_back_as_the_arguments_it_was(tmp_path):
    """A quoted argument stays one argument, so that the report can tell a run of named targets (invocation.targets)."""
    import shlex

    argv = ["snakemake", "results/a b.json", "--config", "sites={fa4: /tmp/site-fa4}"]
    rec = invocation.start("headline", str(tmp_path / "inv.json"), argv=argv)
    assert shlex.split(rec["command"]) == argv

