"""Each job's code inputs are the import closure of what its command runs."""
import pytest

from rollout_bench import backends, sources
from rollout_bench.grpo import availability

SRC = "src/rollout_bench"
ENGINE = f"{SRC}/engine/engine.py"


def generate(backend):
    return sources.closure(["cli:_generate", "gpu_lease", f"backends.{backend}"],
                           sources.other_backends(backend, backends.NAMES))


def train(backend):
    return sources.closure(["grpo.cli:_train", "gpu_lease"], sources.other_backends(backend, availability.NAMES))


def test_cb_sync_closure_holds_the_backend_it_imports():
    files = generate("cb_sync")
    assert {f"{SRC}/backends/transformers_cb.py", f"{SRC}/backends/hf_model.py", f"{SRC}/backends/cb_sync.py",
            f"{SRC}/generation.py", f"{SRC}/kernel_tuning.py", f"{SRC}/gpu_lease.py", f"{SRC}/cli.py",
            f"{SRC}/__init__.py", f"{SRC}/backends/__init__.py", f"{SRC}/assets/__init__.py",
            "workflow/schemas/stats.schema.json"} <= set(files)
    assert ENGINE not in files and f"{SRC}/backends/flex.py" not in files and f"{SRC}/render.py" not in files
    assert files == sorted(files) and all(not f.startswith("/") for f in files)


def test_flex_closure_holds_the_engine_and_no_other_backend():
    files = generate("flex")
    assert {ENGINE, f"{SRC}/engine/__init__.py", f"{SRC}/engine/models/qwen3.py", f"{SRC}/backends/flex.py"} <= set(files)
    assert not [f for f in files if f.startswith(f"{SRC}/backends/")
                and f.rsplit("/", 1)[1] not in ("__init__.py", "flex.py", "hf_model.py")], files


def test_train_closure_follows_lazy_imports_of_its_own_backend_only():
    common = {f"{SRC}/assets/chat.py", f"{SRC}/assets/dataset.py", f"{SRC}/grpo/driver.py", f"{SRC}/grpo/rewards.py",
              f"{SRC}/stats.py", f"{SRC}/gpu_lease.py"}
    for backend in availability.NAMES:
        assert common <= set(train(backend)), backend
    # driver.py imports these inside `if backend == ...`
    assert f"{SRC}/backends/vllm.py" in train("vllm") and f"{SRC}/backends/unsloth.py" in train("unsloth")
    assert ENGINE in train("flex")
    hf = train("hf_generate")
    assert ENGINE not in hf and f"{SRC}/backends/vllm.py" not in hf and f"{SRC}/backends/unsloth.py" not in hf


def test_report_closures():
    assert f"{SRC}/render.py" in sources.closure(["grpo.cli:_render"])  # grpo/report.py imports save_chart from it
    assert sources.closure(["cli:_render"]) == [f"{SRC}/{f}" for f in ("__init__.py", "atomic.py", "cli.py",
                                                                       "render.py")]
    # a handler's closure holds its own imports, not the other handlers' of the same module
    assert f"{SRC}/aggregate.py" in sources.closure(["cli:_aggregate"])
    assert f"{SRC}/generation.py" not in sources.closure(["cli:_aggregate"])


def test_unknown_handler_fails_loudly():
    with pytest.raises(LookupError, match="_nope"):
        sources.closure(["cli:_nope"])
