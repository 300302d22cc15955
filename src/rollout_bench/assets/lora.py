"""The shared LoRA adapter: a PEFT dir whose lora_B is non-zero, so no backend can skip LoRA."""
import json
from pathlib import Path

from ..core import atomic


def build(model_dir, out_dir, rank: int, alpha: int, targets: list[str], init_std: float, seed: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    assert rank > 0 and init_std > 0
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0,
                     bias="none", task_type="CAUSAL_LM")
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # PEFT zero-inits B, which makes the adapter a no-op
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * init_std)
    with atomic.directory(out_dir) as tmp:
        peft_model.save_pretrained(tmp)
        check(tmp)
    return Path(out_dir)


def check(adapter_dir) -> dict:
    """Fail if any saved tensor is all zero; return a small summary."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))
    zero = [k for k, t in tensors.items() if not bool(t.abs().sum() > 0)]
    if zero:
        raise ValueError(f"LoRA adapter has {len(zero)} all-zero tensors (first: {zero[0]}): "
                         f"lora_B must be re-initialised (lora.init_std > 0)")
    cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    return {"tensors": len(tensors), "rank": cfg["r"], "alpha": cfg["lora_alpha"]}
