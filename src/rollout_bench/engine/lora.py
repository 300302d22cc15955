"""LoRA double copy: a pristine base and an inference copy with the adapter merged into it.

refresh() rewrites each merged weight in place as pristine + scaling * B @ A (in float32, rounded
once), so the result depends only on (pristine, A, B, scaling): no drift across refreshes, unlike
PEFT's merge/unmerge pair, whose unmerge rounds the delta to bf16 before subtracting it. In-place
writes keep the tensors' addresses, so captured CUDA graphs stay valid.
"""
import copy
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import nn


def causal_lm(model) -> nn.Module:
    """The HF CausalLM inside a PeftModel (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_lora_layer(module) -> bool:
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def target_names(lm: nn.Module, suffixes: tuple[str, ...]) -> list[str]:
    """Linear (or PEFT LoRA) modules whose last name component is in `suffixes`."""
    out = []
    for name, mod in lm.named_modules():
        if name.rsplit(".", 1)[-1] in suffixes and (is_lora_layer(mod) or isinstance(mod, nn.Linear)):
            out.append(name)
    return out


def module_name(key: str) -> tuple[str, str]:
    """'base_model.model.model.layers.0.self_attn.q_proj.lora_A[.default].weight' -> (module, 'A'|'B')."""
    for part in ("A", "B"):
        marker = f".lora_{part}."
        if marker in key:
            name = key.split(marker)[0]
            return name.removeprefix("base_model.model."), part
    raise KeyError(f"not a LoRA A/B weight: {key}")


def pairs(adapter_state: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{module name: (A [r, in], B [out, r])}."""
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, t in adapter_state.items():
        if ".lora_A." in key or ".lora_B." in key:
            name, part = module_name(key)
            parts.setdefault(name, {})[part] = t
    missing = [n for n, d in parts.items() if len(d) != 2]
    assert not missing, f"LoRA state lacks A or B for {missing[:3]}"
    return {n: (d["A"], d["B"]) for n, d in parts.items()}


class DoubleCopy:
    """Builds the inference copy of `model` (a CausalLM or PeftModel) and refreshes its merged weights.

    Only the targeted linear weights are copied; embeddings, norms and lm_head are shared with the
    pristine model, which this class never writes.
    """

    def __init__(self, model, targets: tuple[str, ...]):
        lm = causal_lm(model)
        names = target_names(lm, targets)
        assert names, f"no linear modules named {targets} in {type(lm).__name__}"
        pristine = {}
        for name in names:
            mod = lm.get_submodule(name)
            pristine[name] = (mod.base_layer if is_lora_layer(mod) else mod).weight
        copied = {id(w) for w in pristine.values()}
        # deepcopy shares every tensor found in memo: all but the targeted weights (LoRA A/B too,
        # they are dropped below with the LoRA wrappers).
        memo = {id(t): t for t in list(lm.parameters()) + list(lm.buffers()) if id(t) not in copied}
        self.model = copy.deepcopy(lm, memo)
        for name in names:
            mod = self.model.get_submodule(name)
            if is_lora_layer(mod):
                parent, _, child = name.rpartition(".")
                setattr(self.model.get_submodule(parent), child, mod.base_layer)
        for name in names:  # the copy's own tensors only: shared ones stay as their owner (a trainer) set them
            self.model.get_submodule(name).weight.requires_grad_(False)
        for mod in self.model.modules():  # a trainer's hooks (e.g. input-grad for checkpointing) stay with it
            mod._forward_hooks.clear()
            mod._forward_pre_hooks.clear()
        self.pristine = pristine
        for name, w in self.live.items():
            assert w.data_ptr() != pristine[name].data_ptr()

    @property
    def live(self) -> dict[str, torch.Tensor]:
        """The inference copy's targeted weights, read from the modules (fused.py may re-lay them)."""
        return {name: self.model.get_submodule(name).weight for name in self.pristine}

    @property
    def nbytes(self) -> int:
        return sum(w.numel() * w.element_size() for w in self.live.values())

    @torch.no_grad()
    def offload_pristine(self) -> None:
        """Keep the pristine weights in pinned host memory instead of beside the merged copy on the
        GPU; refresh() streams each one in before merging. Only for a model nothing else runs: the
        original modules' parameters are re-pointed at the host copies, which frees their GPU memory."""
        for w in self.pristine.values():
            if w.device.type == "cuda":
                host = torch.empty(w.shape, dtype=w.dtype, pin_memory=True)
                host.copy_(w)
                w.data = host

    @torch.no_grad()
    def refresh(self, adapter_state: dict, scaling: float) -> None:
        """live <- pristine + scaling * B @ A for every targeted weight (pristine alone where absent)."""
        ab = pairs(adapter_state)
        unknown = set(ab) - set(self.live)
        assert not unknown, f"adapter targets modules without a double copy: {sorted(unknown)[:3]}"
        for name, live in self.live.items():
            base = self.pristine[name].to(live.device, non_blocking=True)  # a no-op unless offloaded
            if name not in ab:
                live.copy_(base)
                continue
            a, b = (t.to(device=live.device, dtype=torch.float32) for t in ab[name])
            assert b.shape[0] == live.shape[0] and a.shape[1] == live.shape[1], (name, a.shape, b.shape)
            live.copy_(base.float() + (b @ a) * scaling)  # PEFT's delta formula, one rounding

    def restore(self) -> None:
        self.refresh({}, 0.0)


def load_adapter(adapter_dir) -> tuple[dict, float, tuple[str, ...]]:
    """A PEFT adapter dir -> (state dict, scaling, target module names)."""
    d = Path(adapter_dir)
    cfg = json.loads((d / "adapter_config.json").read_text())
    assert not cfg.get("use_dora"), "DoRA adapters are not supported by the merged double copy"
    assert not cfg.get("rank_pattern") and not cfg.get("alpha_pattern"), "per-module rank/alpha not supported"
    r, alpha = cfg["r"], cfg["lora_alpha"]
    scaling = alpha / r ** 0.5 if cfg.get("use_rslora") else alpha / r
    if (d / "adapter_model.safetensors").exists():
        from safetensors.torch import load_file

        state = load_file(str(d / "adapter_model.safetensors"))
    else:
        state = torch.load(d / "adapter_model.bin", map_location="cpu", weights_only=True)
    targets = cfg["target_modules"]
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    return state, scaling, targets


def sha256(named_tensors) -> str:
    """sha256 over (name, raw bytes) of each tensor; per-tensor digests hashed in threads, then combined."""
    items = sorted(named_tensors, key=lambda kv: kv[0])

    def one(item):
        name, t = item
        raw = t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy()
        return name.encode() + hashlib.sha256(raw).digest()

    with ThreadPoolExecutor(8) as pool:
        digests = list(pool.map(one, items))
    return hashlib.sha256(b"".join(digests)).hexdigest()
