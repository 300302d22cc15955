"""The flex rollout engine (docs/design.md §6): paged KV, flex_attention, CUDA graphs, GPU sampling."""
from .config import EngineConfig
from .engine import Engine
from .sequence import Completion

__all__ = ["Completion", "Engine", "EngineConfig"]
