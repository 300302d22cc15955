import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def sdpa_flags():
    """A GRPO run turns cuDNN's SDPA off process-wide (grpo/attention_kernels.py): no test sees another's flags."""
    import torch

    kept = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(kept)


@pytest.fixture(autouse=True)
def thawed_heap():
    """A generation cell freezes the heap before its rounds (generation/round_probe.py) and never thaws it: no test
    sees another's frozen heap."""
    import gc

    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory):
    """Tokenizer, dataset, tiny Qwen3 model dir and a rank-4 adapter, built once per session."""
    from rollout_bench.assets import dataset, lora, model, tokenizer

    d = tmp_path_factory.mktemp("assets")
    tokenizer.build(d / "tokenizer", vocab_size=1024)
    dataset.build(d / "dataset", 300, 3407)
    model.build(ROOT / "config/models/qwen3-tiny.json", d / "model", d / "tokenizer", seed=0)
    lora.build(d / "model", d / "lora", 4, 8, ["q_proj", "v_proj", "down_proj"], 1e-4, 0)
    return {k: str(d / k) for k in ("tokenizer", "dataset", "model", "lora")}


@pytest.fixture(scope="session")
def learnable_dir(tmp_path_factory):
    """The learnable task, 2000 train and 64 held-out problems."""
    from rollout_bench.assets import learnable

    return learnable.build(tmp_path_factory.mktemp("learnable") / "d", 2000, 64, 11)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """The pipeline's tokenizer (4096 tokens: the tiny configs' vocabulary) and random qwen3-tiny."""
    from rollout_bench.assets import model, tokenizer

    d = tmp_path_factory.mktemp("warm-base")
    tokenizer.build(d / "tokenizer", vocab_size=4096)
    return model.build(ROOT / "config/models/qwen3-tiny.json", d / "model", d / "tokenizer", seed=0)


@pytest.fixture(scope="session")
def tiny_warm(tiny_base, learnable_dir, tmp_path_factory):
    """A real warm start of qwen3-tiny as the `warmstart` rule makes it (the rule's SFT, a smaller held-out
    evaluation), once per session (~40 s on 2 cores): {"dir", "card", "base", "dataset"}."""
    from rollout_bench.assets import warm_card, warm_eval, warmstart

    out = tmp_path_factory.mktemp("warm") / "qwen3-tiny-warm"
    c = warmstart.build(tiny_base, learnable_dir, out, warmstart.SFTSpec(), warm_eval.EvalSpec(group_prompts=16),
                        warm_card.Gates())
    return {"dir": out, "card": c, "base": tiny_base, "dataset": learnable_dir}


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matmuls run faster, and steadier beside other tests, on one thread."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A single-node SLURM cluster with accounting (tests/slurm_cluster.py), stopped even when a test fails."""
    from . import slurm_cluster

    reason = slurm_cluster.missing()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install -e '.[test]' (the SLURM executor)")
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
