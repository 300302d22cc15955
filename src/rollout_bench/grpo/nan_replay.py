"""Replay a GRPO step whose gradient was not finite, under kernel variants, to find whose backward makes it.

finite_grads.py (with ROLLOUT_BENCH_NAN_DUMP=DIR) saves the failing step's batch and the trainable weights
it ran on. This rebuilds the trainer of that job (same model, adapter, workload), loads those weights, and
runs the step's loss and backward once per variant:
  as_run              the kernels a GRPO job uses now (grpo/attention_kernels.py: SDPA free to choose, except
                      cuDNN's kernel; a dump from a run before that policy ran with cuDNN allowed: sdpa_cudnn);
  sdpa_cudnn          attention through cuDNN's SDPA kernel only (the kernel of the NaN below);
  sdpa_math           attention through SDPA's math backend only;
  sdpa_efficient      attention through SDPA's memory-efficient kernel only;
  torch_logprob_head  TRL's Triton chunked log-prob head swapped for the plain-torch one (trl_cpu.py);
  anomaly             autograd's anomaly mode, which names the backward op that first returned NaN.
Each reports the loss, the first module whose forward output was not finite, and the parameters whose
gradient was not (variants that need CUDA are skipped elsewhere, with the reason). On the H200 the learn
case's NaN replayed only with cuDNN's kernel allowed (then the default), finite under the math, memory-efficient
and no-cuDNN kernels: the forward was finite, and anomaly mode named cuDNN's SDPA backward
(results/published/h200-2026-12-01-session7); GRPO jobs have run without it since.

    python -m rollout_bench.grpo.nan_replay DUMP --backend flex --workload JSON \\
        --model-dir D --adapter A --dataset S [--out report.json]
"""
import argparse
import contextlib
import json
import sys
import tempfile

import torch

from ..host import trl_cpu
from . import attention_kernels, driver, flex_rollout
from .config import TrainSpec

VARIANTS = ("as_run", "sdpa_cudnn", "sdpa_math", "sdpa_efficient", "torch_logprob_head", "anomaly")
SDPA_BACKENDS = {  # variant -> the SDPBackend names it allows
    "sdpa_cudnn": ("CUDNN_ATTENTION",),
    "sdpa_math": ("MATH",),
    "sdpa_efficient": ("EFFICIENT_ATTENTION",),
}
CUDA_ONLY = {"sdpa_efficient": "SDPA's memory-efficient kernel runs on CUDA only",
             "sdpa_cudnn": "cuDNN's SDPA kernel runs on CUDA only"}


def build_trainer(backend: str, workload: dict, model_dir: str, adapter_dir: str | None, dataset_dir: str, workdir: str):
    """The job's GRPOTrainer without a rollout (the loss needs none), its adapter loaded."""
    spec = TrainSpec.from_workload(workload)
    spec, tok, train_ds, max_prompt_len = driver.load_data(backend, spec, model_dir, dataset_dir, None)
    policy_backend = "unsloth" if backend == "unsloth" else "hf_generate"  # vLLM and flex train the HF policy
    model, peft_config = driver.load_model(policy_backend, spec, model_dir, adapter_dir, max_prompt_len)
    trainer, _ = driver.build_trainer(policy_backend, spec, 1, workdir, max_prompt_len, model, peft_config, tok,
                                      train_ds, [], None)
    if adapter_dir and peft_config is not None:
        driver.load_adapter_weights(trainer.model, adapter_dir)
    return trainer


@contextlib.contextmanager
def variant(name: str):
    if name in SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([getattr(SDPBackend, b) for b in SDPA_BACKENDS[name]]):
            yield
    elif name == "torch_logprob_head":
        import trl.trainer.utils as trl_utils

        kept = trl_utils._ChunkedLogProbFunction
        trl_utils._ChunkedLogProbFunction = None
        trl_cpu.ensure_logprob_head()
        try:
            yield
        finally:
            trl_utils._ChunkedLogProbFunction = kept
    elif name == "anomaly":
        with torch.autograd.detect_anomaly(check_nan=True):
            yield
    else:
        assert name == "as_run", name
        yield


def first_nonfinite_output(model, run) -> tuple[object, str | None]:
    """run() under forward hooks -> (its result, the first module whose output held a NaN or inf)."""
    seen: list[str] = []

    def hook(name):
        def check(_module, _inputs, out):
            t = out[0] if isinstance(out, tuple) else out
            if not seen and isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(t.isfinite().all()):
                seen.append(name)
        return check

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n]
    try:
        return run(), (seen[0] if seen else None)
    finally:
        for h in handles:
            h.remove()


def replay(trainer, dump: dict, names=VARIANTS) -> dict:
    model = trainer.model
    params = dict(model.named_parameters())
    missing = sorted(set(dump["trainable"]) - set(params))
    assert not missing, f"the dump's parameters are not the trainer's: {missing[:3]}"
    with torch.no_grad():
        for n, t in dump["trainable"].items():
            params[n].copy_(t.to(params[n].device, params[n].dtype))
    device = next(model.parameters()).device
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in dump["inputs"].items()}
    if "importance_sampling_ratio" in inputs:  # flex's and vLLM's runs: TRL applies it only under use_vllm
        flex_rollout.enable_importance_sampling(trainer)
    report = {"step": dump["step"], "bad_params_in_run": dump["bad_params"][:10],
              "as_run_kernels": attention_kernels.state(), "variants": {}}
    # set by the Trainer's loop, read by GRPOTrainer's loss normalisation
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    model.train()
    for name in names:
        if device.type != "cuda" and name in CUDA_ONLY:
            report["variants"][name] = {"skipped": CUDA_ONLY[name]}
            continue
        model.zero_grad(set_to_none=True)
        rec: dict = {}
        try:
            with variant(name):
                loss, rec["first_nonfinite_output"] = first_nonfinite_output(
                    model, lambda: trainer.compute_loss(model, inputs))
                rec["loss"] = float(loss)
                loss.backward()
        except RuntimeError as e:  # anomaly mode raises at the op that made the NaN
            rec["error"] = str(e).splitlines()[0][:400]
        bad = [n for n, p in model.named_parameters() if p.grad is not None and not bool(p.grad.isfinite().all())]
        rec.update(grad_finite=not bad, nonfinite_params=bad[:10], n_nonfinite_params=len(bad))
        report["variants"][name] = rec
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.grpo.nan_replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--workload", required=True, help="the job's workload JSON (its stats' `workload`)")
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    dump = torch.load(a.dump, map_location="cpu")
    attention_kernels.apply()  # as a GRPO job does before it builds its trainer
    with tempfile.TemporaryDirectory(prefix="nan-replay-") as workdir:
        trainer = build_trainer(a.backend, json.loads(a.workload), a.model_dir, a.adapter, a.dataset, workdir)
        report = replay(trainer, dump, a.variants.split(","))
    text = json.dumps(report, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
