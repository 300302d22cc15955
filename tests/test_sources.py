"""Each job's code inputs are the import closure of what its command runs."""
import pytest

from rollout_bench import backends
from rollout_bench.grpo import availability
from rollout_bench.pipeline import sources

SRC = "src/rollout_bench"
ENGINE = f"{SRC}/engine/engine.py"


def generate(backend):
    return sources.closure(["pipeline.cli:_generate", "host.gpu_lease", f"backends.{backend}"],
                           sources.other_backends(backend, backends.NAMES))


def train(backend):
    return sources.closure(["grpo.cli:_train", "host.gpu_lease"], sources.other_backends(backend, availability.NAMES))


def test_cb_sync_closure_holds_the_backend_it_imports():
    files = generate("cb_sync")
    assert {f"{SRC}/backends/transformers_cb.py", f"{SRC}/backends/hf_model.py", f"{SRC}/backends/cb_sync.py",
            f"{SRC}/generation/measure.py", f"{SRC}/backends/kernel_tuning.py", f"{SRC}/host/gpu_lease.py",
            f"{SRC}/pipeline/cli.py",
            f"{SRC}/__init__.py", f"{SRC}/backends/__init__.py", f"{SRC}/assets/__init__.py",
            "workflow/schemas/stats.schema.json"} <= set(files)
    assert ENGINE not in files and f"{SRC}/backends/flex.py" not in files and f"{SRC}/report/render.py" not in files
    assert files == sorted(files) and all(not f.startswith("/") for f in files)


def test_flex_closure_holds_the_engine_and_no_other_backend():
    files = generate("flex")
    assert {ENGINE, f"{SRC}/engine/__init__.py", f"{SRC}/engine/models/qwen3.py", f"{SRC}/backends/flex.py"} <= set(files)
    assert not [f for f in files if f.startswith(f"{SRC}/backends/")
                and f.rsplit("/", 1)[1] not in ("__init__.py", "flex.py", "hf_model.py", "kernel_tuning.py")], files


def test_train_closure_follows_lazy_imports_of_its_own_backend_only():
    common = {f"{SRC}/assets/chat.py", f"{SRC}/assets/dataset.py", f"{SRC}/grpo/driver.py", f"{SRC}/assets/rewards.py",
              f"{SRC}/core/stats.py", f"{SRC}/host/gpu_lease.py"}
    for backend in availability.NAMES:
        assert common <= set(train(backend)), backend
    # driver.py imports these inside `if backend == ...`
    assert f"{SRC}/backends/vllm.py" in train("vllm") and f"{SRC}/backends/unsloth.py" in train("unsloth")
    assert ENGINE in train("flex")
    hf = train("hf_generate")
    assert ENGINE not in hf and f"{SRC}/backends/vllm.py" not in hf and f"{SRC}/backends/unsloth.py" not in hf


def test_report_closures():
    # report/train.py imports save_chart from render.py
    assert f"{SRC}/report/render.py" in sources.closure(["report.cli:_render_train"])
    assert sources.closure(["report.cli:_render"]) == [f"{SRC}/{f}" for f in (
        "__init__.py", "core/__init__.py", "core/atomic.py", "report/__init__.py", "report/cli.py", "report/render.py")]
    # a handler's closure holds its own imports, not the other handlers' of the same module
    assert f"{SRC}/report/aggregate.py" in sources.closure(["report.cli:_aggregate"])
    assert f"{SRC}/report/train.py" not in sources.closure(["report.cli:_aggregate"])
    assert f"{SRC}/generation/measure.py" not in sources.closure(["pipeline.cli:_publish"])


def test_unknown_handler_fails_loudly():
    with pytest.raises(LookupError, match="_nope"):
        sources.closure(["pipeline.cli:_nope"])
