"""Seeded random inputs for the tests and the tools: HF models from config/models/*.json, LoRA adapters, prompts."""
import json
from pathlib import Path

import torch

from ..core.workload import LORA_TARGETS


def config(name_or_dict, **overrides):
    from transformers import AutoConfig

    from .. import MODEL_CONFIGS

    d = name_or_dict if isinstance(name_or_dict, dict) else json.loads(
        (Path(MODEL_CONFIGS) / f"{name_or_dict}.json").read_text())
    # overrides go in before the config is built: Gemma-4's per-layer configs (head dims) derive from them
    return AutoConfig.for_model(**{**d, **overrides})


def build(name_or_dict, seed: int = 0, dtype=torch.float32, device="cpu", **overrides):
    """overrides: config attributes, e.g. tie_word_embeddings=False (tied random embeddings make
    greedy decoding repeat the last prompt token, so token-identical output would mean little)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config(name_or_dict, **overrides), dtype=dtype)
    return model.eval().requires_grad_(False)


def lora_state(model, rank, seed=0):
    """A seeded random adapter on every LoRA target projection, bf16, keys as PEFT's
    get_peft_model_state_dict names them."""
    dev = model.device
    g = torch.Generator(device=dev).manual_seed(seed)
    state = {}
    for name, mod in model.named_modules():
        if name.rsplit(".", 1)[-1] in LORA_TARGETS and isinstance(mod, torch.nn.Linear):
            a = torch.randn(rank, mod.in_features, device=dev, generator=g) / mod.in_features ** 0.5
            b = torch.randn(mod.out_features, rank, device=dev, generator=g) * 0.02
            state[f"base_model.model.{name}.lora_A.weight"] = a.to(torch.bfloat16)
            state[f"base_model.model.{name}.lora_B.weight"] = b.to(torch.bfloat16)
    return state


def prompts(n: int, vocab: int, lo: int = 128, hi: int = 256, seed: int = 0) -> list[list[int]]:
    """n prompts of seeded random token ids, lo to hi tokens long (both included)."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(0, vocab, (k,), generator=g).tolist() for k in lens]
