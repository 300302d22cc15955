"""envs/: one conda env per backend group; its pip pins agree with envs/GROUP.requirements.txt."""
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from rollout_bench import ROOT
from rollout_bench.host import wheelhouse as wh

ENVS = ROOT / "envs"
HF_STACK = ("transformers", "peft", "trl", "datasets", "accelerate", "huggingface-hub", "tokenizers", "safetensors")


def pins(group) -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in wh.group_requirements(group)]
    names = [wh.canon(r.name) for r in reqs]
    assert len(names) == len(set(names)), f"{group}: a package is listed twice"
    return dict(zip(names, reqs))


def version(req: Requirement) -> str:
    (spec,) = req.specifier
    assert spec.operator == "==", f"{req}: pins must be exact"
    return spec.version


@pytest.mark.parametrize("group", wh.GROUPS)
def test_env_file_is_a_conda_env_with_exact_pip_pins(group):
    doc = yaml.safe_load((ENVS / f"{group}.yaml").read_text())
    assert doc["name"] == f"rollout-bench-{group}"
    assert "conda-forge" in doc["channels"]
    assert "python=3.12" in doc["dependencies"] and "pip" in doc["dependencies"]
    for req in pins(group).values():
        version(req)


@pytest.mark.parametrize("group", wh.GROUPS)
def test_requirements_txt_matches_yaml(group):
    assert (ENVS / f"{group}.requirements.txt").read_text() == wh.render_requirements(group), (
        f"envs/{group}.requirements.txt is stale: python -m rollout_bench.host.wheelhouse requirements {group} --write")


def test_core_pins_match_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    exact = {wh.canon(r.name): r for r in map(Requirement, deps) if any(s.operator == "==" for s in r.specifier)}
    core = pins("core")
    for name, req in exact.items():
        assert name in core and version(core[name]) == version(req), name
    for req in map(Requirement, deps):  # the loose ones: core's pin must satisfy pyproject's range
        assert req.specifier.contains(version(core[wh.canon(req.name)])), req


def test_groups_share_the_hf_stack():
    """Same transformers/peft/trl/... everywhere, so backends differ only in the engine."""
    core = pins("core")
    for group in ("vllm", "unsloth", "fa4"):
        g = pins(group)
        for name in HF_STACK:
            assert version(g[name]) == version(core[name]), (group, name)


def test_gpu_groups_use_the_hosts_torch():
    host = wh.read_host_packages(ENVS / "h200-host.txt")
    for group in ("vllm", "unsloth", "fa4"):
        assert version(pins(group)["torch"]) == host["torch"] == "2.11.0"


def test_vllm_group():
    g = pins("vllm")
    assert version(g["vllm"]) == "0.26.0"
    lean = {wh.canon(n) for n in wh.read_name_list(ENVS / "vllm.lean.txt")}
    assert lean == {wh.canon(n) for n in (
        "tokenspeed-triton", "nvidia-cutlass-dsl-libs-cu12", "nvidia-nvvm", "nvidia-cuda-nvcc",
        "nvidia-cuda-cccl", "nvidia-cuda-crt", "tilelang", "z3-solver", "PyNvVideoCodec")}


def test_unsloth_group_respects_unsloth_caps_and_leaves_xformers_out():
    g = pins("unsloth")
    assert {"unsloth", "unsloth-zoo", "bitsandbytes"} <= set(g)
    caps = {"trl": "<=1.15.0", "datasets": "<5", "transformers": "<=5.17.0"}
    for name, cap in caps.items():
        assert Requirement(f"{name}{cap}").specifier.contains(version(g[name])), name
    assert "xformers" not in g
    assert "xformers" in wh.read_name_list(ENVS / "unsloth.lean.txt")
    assert "pip uninstall -y xformers" in (ENVS / "unsloth.post-deploy.sh").read_text()


def test_fa4_group_is_separate_from_vllm():
    """flash-attn-4 needs nvidia-cutlass-dsl>=4.6.2; vLLM 0.26.0 pins 4.6.0: never one env."""
    assert "flash-attn-4" in pins("fa4") and "flash-attn-4" not in pins("vllm")
    assert pins("fa4")["flash-attn-4"].extras == {"cu13"}
    assert "vllm" not in pins("fa4")


def test_report_group_has_no_torch():
    assert "torch" not in pins("report") and {"altair", "vl-convert-python", "pandas"} <= set(pins("report"))


def test_slurm_pins_match_pyproject_extras_and_core():
    """The SLURM executor the tests drive is the one envs/slurm.yaml ships, on core's snakemake."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    slurm = pins("slurm")
    for extra in ("slurm", "test"):
        plugins = {wh.canon(r.name): r for r in map(Requirement, extras[extra]) if "slurm" in r.name}
        assert set(plugins) == set(slurm) - {"snakemake"}, extra
        for name, req in plugins.items():
            assert version(req) == version(slurm[name]), (extra, name)
    assert version(slurm["snakemake"]) == version(pins("core")["snakemake"])
