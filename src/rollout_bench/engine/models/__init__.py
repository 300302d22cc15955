"""Per-architecture attention pieces. The rest of a decoder layer is run through the HF modules."""
from . import llama, qwen3


def project_qkv(model_type: str):
    if model_type == "qwen3":
        return qwen3.project_qkv
    if model_type == "llama":
        return llama.project_qkv
    raise NotImplementedError(f"flex engine: no attention patch for model_type {model_type!r} (qwen3, llama)")
