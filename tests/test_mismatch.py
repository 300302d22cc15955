"""Mismatch beside speed: an engine's logprobs of its own tokens against the trainer's forward on them."""
import json
import math

import pytest
import torch

from rollout_bench.backends import flex
from rollout_bench.core.workload import GenSpec, Sampling
from rollout_bench.generation import logprob_sample, mismatch
from rollout_bench.pipeline import config, jobs

from .conftest import ROOT


def _spec(tiny_assets, adapter=False, temperature=1.0):
    return GenSpec(model_dir=tiny_assets["model"], adapter_dir=tiny_assets["lora"] if adapter else None,
                   variant="eager", batch_size=4, max_new_tokens=12, sampling=Sampling(temperature=temperature, seed=0),
                   ignore_eos=True, eos_token_id=0, pad_token_id=0, max_prompt_tokens=16, num_generations=2)


def _record(spec, prompts, rows=3):
    gen = flex.load(spec)
    outs = gen.generate(prompts, spec.num_generations)
    return {"status": "ok", "backend": "flex", "logprob_sample": logprob_sample.sample(gen, spec, prompts, outs, rows),
            "workload": {"dtype": spec.dtype, "device": spec.device, "lora_rank": 4 if spec.adapter_dir else 0}}


def test_sample_keeps_spread_rows_with_their_prompts_and_the_engines_logprobs(tiny_assets):
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    smp = _record(_spec(tiny_assets, temperature=0.0), prompts)["logprob_sample"]
    assert smp["rows"] == [0, 2, 3] and smp["prompts"] == [prompts[0], prompts[1], prompts[1]]
    assert smp["temperature"] == 1.0  # greedy: the logprobs are log_softmax(logits)
    assert [len(t) for t in smp["tokens"]] == [12] * 3 and [len(lp) for lp in smp["logprobs"]] == [12] * 3
    assert all(lp <= 0 for row in smp["logprobs"] for lp in row)
    # a generator that returns no logprobs keeps none
    assert logprob_sample.sample(object(), _spec(tiny_assets), prompts, [[1]] * 4) is None


def test_the_trainer_sees_an_exact_engine_as_exact_and_a_small_bias_as_that_bias(tiny_assets, tmp_path):
    """A float32 engine on the trainer's weights (LoRA merged in the engine, unmerged in the trainer) differs by
    rounding alone; logprobs shifted by 0.05 nats on every token read as 0.05, with k3 = exp(d) - 1 - d."""
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    exact = _record(_spec(tiny_assets), prompts)
    lora = _record(_spec(tiny_assets, adapter=True), prompts)
    biased = json.loads(json.dumps(exact))
    biased["logprob_sample"]["logprobs"] = [[x - 0.05 for x in row] for row in exact["logprob_sample"]["logprobs"]]
    paths = {}
    for name, rec in {"exact": exact, "lora": lora, "biased": biased,
                      "skipped": {"status": "skipped", "backend": "vllm", "workload": {}}}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(rec))
    out = tmp_path / "mismatch.json"
    rec = mismatch.run(model="qwen3-tiny", model_dir=tiny_assets["model"], adapter_dir=tiny_assets["lora"],
                       stats_paths=[str(p) for p in paths.values()], out=str(out))
    cells = json.loads(out.read_text())["cells"]
    assert cells == json.loads(json.dumps(rec["cells"]))
    for name in ("exact", "lora"):
        c = cells[str(paths[name])]
        assert c["tokens"] == 36 and c["max_abs"] < 1e-4 and c["kl_k3"] < 1e-8, (name, c)
    b = cells[str(paths["biased"])]
    assert b["mean_abs"] == pytest.approx(0.05, abs=1e-4) and b["mean_signed"] == pytest.approx(0.05, abs=1e-4)
    assert b["kl_k3"] == pytest.approx(math.expm1(0.05) - 0.05, rel=1e-2)
    assert cells[str(paths["skipped"])] == {"reason": "the cell is skipped"}


def test_a_lora_cell_without_the_adapter_is_refused(tiny_assets, tmp_path):
    p = tmp_path / "lora.json"
    p.write_text(json.dumps(_record(_spec(tiny_assets, adapter=True), [[5, 6, 7]])))
    with pytest.raises(ValueError, match="no --adapter"):
        mismatch.run(model="qwen3-tiny", model_dir=tiny_assets["model"], adapter_dir=None, stats_paths=[str(p)],
                     out=str(tmp_path / "out.json"))
    assert not (tmp_path / "out.json").exists()


def test_summarize_per_token():
    s = mismatch.summarize([[-1.0, -2.0], [-0.5]], [torch.tensor([-1.1, -2.0]), torch.tensor([-0.2])])
    assert s["tokens"] == 3 and s["max_abs"] == pytest.approx(0.3) and s["mean_abs"] == pytest.approx(0.4 / 3)
    d = torch.tensor([-0.1, 0.0, 0.3], dtype=torch.float64)
    assert s["kl_k3"] == pytest.approx((torch.expm1(d) - d).mean().item())


def test_one_mismatch_job_a_model_over_the_engines_that_return_logprobs():
    cfg = config.load(str(ROOT / "config/config.yaml"))
    found = jobs.mismatch_jobs(cfg)
    assert found and {c.backend for m in found for c in m.cells} <= {"flex", "vllm"}
    assert len({m.model for m in found}) == len(found)
    for m in found:
        assert m.lora == any(cfg["workload"]["cases"][c.case]["lora"] for c in m.cells)
        assert m.path == f"results/mismatch/{jobs.model_slug(m.model)}.json"


def test_a_dry_runs_plan_names_the_mismatch_job_at_its_published_wall(tmp_path):
    import yaml

    from rollout_bench.pipeline import plan

    cfg = config.resolve({**yaml.safe_load((ROOT / "config/config.yaml").read_text()), "profile": "headline"})
    rec = tmp_path / "pub/run/mismatch/qwen3-4b.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps({"kind": "mismatch", "status": "ok", "model": "qwen3-4b", "wall_s": 31.0,
                               "env": {"gpu_name": "NVIDIA H200"}}))
    rows = {r["job"]: r for r in plan.estimate(cfg, tmp_path / "pub")}
    assert rows["mismatch qwen3-4b"]["seconds"] == 31.0 and rows["mismatch qwen3-4b"]["cells"] == 14
    assert rows["decode_profile qwen3-4b"]["seconds"] is None  # in the profile, no published wall here


def test_a_broken_logprob_path_fails_the_mismatch_job_and_an_option_off_does_not(tiny_assets, tmp_path):
    """A cell whose engine raised reading its logprobs (logprob_sample_error) makes the job `failed`, naming it; a
    cell whose engine was asked for none (vLLM option logprobs: false) is only named."""
    wl = {"dtype": "float32", "device": "cpu", "lora_rank": 0}
    paths = {"broken": {"status": "ok", "backend": "vllm", "workload": wl,
                        "logprob_sample_error": "RuntimeError: vLLM returned no logprobs"},
             "off": {"status": "ok", "backend": "vllm", "workload": wl}}
    for name, rec in paths.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(rec))
    out = tmp_path / "out.json"
    rec = mismatch.run(model="qwen3-tiny", model_dir=tiny_assets["model"], adapter_dir=None,
                       stats_paths=[str(tmp_path / "broken.json")], out=str(out))
    assert rec["status"] == "failed" and "broken.json: RuntimeError" in rec["reason"]
    rec = mismatch.run(model="qwen3-tiny", model_dir=tiny_assets["model"], adapter_dir=None,
                       stats_paths=[str(tmp_path / "off.json")], out=str(out))
    assert rec["status"] == "ok" and rec["cells"][str(tmp_path / "off.json")] == {"reason": "vllm returned no logprobs"}
