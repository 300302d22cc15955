"""Seeded random-weight HF models from config/models/*.json, for tests and the GPU self-check."""
import json
from pathlib import Path

import torch


def config(name_or_dict, **overrides):
    from transformers import AutoConfig

    from .. import MODEL_CONFIGS

    d = name_or_dict if isinstance(name_or_dict, dict) else json.loads(
        (Path(MODEL_CONFIGS) / f"{name_or_dict}.json").read_text())
    cfg = AutoConfig.for_model(**d)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def build(name_or_dict, seed: int = 0, dtype=torch.float32, device="cpu", **overrides):
    """overrides: config attributes, e.g. tie_word_embeddings=False (tied random embeddings make
    greedy decoding repeat the last prompt token, so token-identical output would mean little)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config(name_or_dict, **overrides), dtype=dtype)
    return model.eval().requires_grad_(False)
