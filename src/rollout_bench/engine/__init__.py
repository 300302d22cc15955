"""The flex rollout engine (DESIGN.md section 4): paged KV, flex_attention, CUDA graphs, GPU sampling."""
from .config import EngineConfig
from .engine import Engine
from .sequence import Completion

__all__ = ["Completion", "Engine", "EngineConfig"]
