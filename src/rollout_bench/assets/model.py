"""The model directory: an HF config JSON materialised with seeded random weights, plus tokenizer.

Every backend then loads the directory with its normal loader, so all see identical weights.
"""
import json
import shutil
from pathlib import Path

from .. import atomic


def build(model_json, out_dir, tokenizer_dir, seed: int) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = json.loads(Path(model_json).read_text())
    config = AutoConfig.for_model(**cfg_dict)
    dtype = getattr(torch, cfg_dict.get("torch_dtype", "float32"))
    torch.manual_seed(seed)
    # Random init of a 4B model is minutes on CPU and seconds on a GPU; values depend only on the seed.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    with atomic.directory(out_dir) as tmp:
        model.save_pretrained(tmp)
        for f in Path(tokenizer_dir).iterdir():
            shutil.copy2(f, Path(tmp) / f.name)
    return Path(out_dir)


def resolve(source: str) -> str:
    """A name of config/models/*.json, a local model directory, or a hub id (loaded as is)."""
    from .. import MODEL_CONFIGS

    if (MODEL_CONFIGS / f"{source}.json").exists():
        return "config"
    if Path(source).is_dir():
        if not (Path(source) / "config.json").exists():
            raise ValueError(f"model {source!r}: directory has no config.json; point models to an HF model "
                             f"directory, a hub id, or a name from config/models/")
        return "dir"
    if "/" in source:
        return "hub"
    known = ", ".join(sorted(p.stem for p in MODEL_CONFIGS.glob("*.json")))
    raise ValueError(f"model {source!r}: no config/models/{source}.json, no such directory, not a hub id "
                     f"(owner/name); known configs: {known}")
