from rollout_bench import backends
from rollout_bench.core import envinfo


def test_every_backend_module_follows_the_protocol():
    for name in backends.NAMES:
        mod = backends.module(name)
        assert mod.VARIANTS and isinstance(mod.NEEDS_GPU, bool) and "torch" in mod.REQUIRES
        assert callable(mod.load) and callable(mod.unavailable)


def test_skip_reason_says_what_would_make_it_run(monkeypatch):
    monkeypatch.setattr(envinfo, "version", lambda p: None if p == "vllm" else "1.0")
    reason = backends.unavailable("vllm", "default", gpu_count=1)
    assert "vllm" in reason and "install" in reason
    reason = backends.unavailable("hf_static", "default", gpu_count=0)
    assert "needs a CUDA GPU" in reason and "--resources gpu" in reason
    assert "unknown variant" in backends.unavailable("flex", "turbo", gpu_count=0)


def test_fingerprint_changes_when_what_decides_a_skip_changes(monkeypatch):
    """The fingerprint is a Snakemake param: a change re-runs a `skipped` job."""
    versions = {"torch": "2.13.0", "vllm": None}
    monkeypatch.setattr(envinfo, "version", lambda p: versions.get(p))
    monkeypatch.setattr(envinfo, "physical_gpu_count", lambda: 0)
    before = backends.fingerprint("vllm")
    versions["vllm"] = "0.26.0"
    after_install = backends.fingerprint("vllm")
    monkeypatch.setattr(envinfo, "physical_gpu_count", lambda: 1)
    after_gpu = backends.fingerprint("vllm")
    assert len({before, after_install, after_gpu}) == 3
    # a flash-attention variant's package counts too
    fa = backends.fingerprint("transformers_cb")
    versions["flash-attn-4"] = "4.0.0b36"
    assert backends.fingerprint("transformers_cb") != fa


def test_each_job_runs_in_its_environment_group():
    """envs/GROUP.yaml a job runs in: vLLM's and Unsloth's own, FA4's variants the fa4 group (flash-attn-4 needs a
    newer nvidia-cutlass-dsl than vLLM pins), the rest core; every group named has its envs file."""
    assert backends.env_group("vllm", "default") == "vllm" and backends.env_group("unsloth", "4bit") == "unsloth"
    assert backends.env_group("flex", "fa4") == "fa4" and backends.env_group("flex", "graphs") == "core"
    assert backends.env_group("transformers_cb", "paged_flash_attention_4") == "fa4"
    assert backends.env_group("transformers_cb", "paged_sdpa") == "core"
    from rollout_bench import ROOT

    for name in backends.NAMES:
        for v in backends.module(name).VARIANTS:
            assert (ROOT / "envs" / f"{backends.env_group(name, v)}.yaml").is_file(), (name, v)
