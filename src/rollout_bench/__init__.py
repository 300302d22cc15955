"""rollout-bench: which rollout engine should a GRPO run use, measured."""
from pathlib import Path

__version__ = "0.1.0"

# The package runs from a checkout (editable install or PYTHONPATH=src); schemas and model configs
# live beside the workflow, not inside the wheel.
ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "workflow" / "schemas"
MODEL_CONFIGS = ROOT / "config" / "models"
