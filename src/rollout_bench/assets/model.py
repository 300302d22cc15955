"""The model directory: an HF config JSON materialised with seeded random weights, plus tokenizer.

Every backend then loads the directory with its normal loader, so all see identical weights.
"""
import json
import shutil
from pathlib import Path

from .. import MODEL_CONFIGS
from ..core import atomic
from . import paths


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


# What AutoModelForCausalLM / AutoTokenizer.from_pretrained need in a model directory: any one of each
NEEDS = {"config.json": ("config.json",),
         "weights (*.safetensors or pytorch_model*.bin)": ("*.safetensors", "pytorch_model*.bin"),
         "tokenizer (tokenizer.json, tokenizer.model, vocab.json or vocab.txt)": ("tokenizer.json", "tokenizer.model",
                                                                                 "vocab.json", "vocab.txt")}


WARM = "-warm"


def warm_base(source: str) -> str | None:
    """The config name a `<name>-warm` source warm-starts from (assets.warmstart), else None."""
    base = source[:-len(WARM)] if source.endswith(WARM) else None
    return base if base and (MODEL_CONFIGS / f"{base}.json").exists() else None


def config_names() -> list[str]:
    """The names of config/models/*.json: the models built from a shipped config (and warm-started)."""
    return sorted(p.stem for p in MODEL_CONFIGS.glob("*.json"))


def resolve(source: str) -> str:
    """A name of config/models/*.json, such a name + `-warm`, a local model directory, or a hub id (as is).

    A path-like source (/, ./, ../, ~) must be a model directory: taken as a hub id, every job would
    fail on its model load with transformers' repo-id message instead.
    """
    if (MODEL_CONFIGS / f"{source}.json").exists():
        return "config"
    local = paths.local(source)
    if warm_base(source) is not None and local is None:
        return "warm"
    if local is not None:
        if not local.is_dir():
            raise ValueError(f"model {source!r}: no such directory (a path must be an HF model directory; "
                             f"a hub id has the form owner/name)")
        missing = [what for what, globs in NEEDS.items() if not any(any(local.glob(g)) for g in globs)]
        if missing:
            raise ValueError(f"model {source!r}: directory has no {', no '.join(missing)}; point models to a "
                             f"directory saved with save_pretrained (model and tokenizer), a hub id, or a "
                             f"name from config/models/")
        return "dir"
    if "/" in source:
        return "hub"
    known = ", ".join(config_names())
    raise ValueError(f"model {source!r}: no config/models/{source}.json, no such directory, not a hub id "
                     f"(owner/name); known configs: {known} (each also as <name>{WARM}: its warm start)")
