"""The package reads top-down: every import in src (lazy ones inside functions too) points to its own area or to
one below it, and resolves to a module that exists (a moved module's old name fails here, not on a GPU host)."""
from rollout_bench.pipeline import sources

# Lowest first (docs/design.md, "The package"): an area imports only itself and the areas before it.
LAYERS = ("core", "host", "engine", "assets", "backends", "diagnostics", "generation", "grpo", "pipeline", "report")
# The package root (ROOT, SCHEMAS, MODEL_CONFIGS) is below everything; `python -m rollout_bench` wires every area.
ENTRY = ("rollout_bench.__main__",)


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _modules() -> list[str]:
    out = []
    for p in sorted(sources.PKG_DIR.rglob("*.py")):
        rel = p.relative_to(sources.PKG_DIR.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def test_the_top_level_is_the_areas_and_the_entry_point():
    entries = sorted(p.name for p in sources.PKG_DIR.iterdir() if p.name != "__pycache__")
    assert entries == sorted([*LAYERS, "__init__.py", "__main__.py"]), entries
    assert len(LAYERS) <= 10


def test_no_import_points_up_and_each_resolves():
    rank = {name: i for i, name in enumerate(LAYERS)}
    up, missing = [], []
    for module in _modules():
        for target, _lazy in sources.imports(module):
            name = target  # `from pkg.mod import attr` names pkg.mod (sources._resolve)
            if sources._file(name) is None:
                missing.append((module, target))
                continue
            if module in ENTRY or _area(name) in ("", "__main__"):
                continue
            src, dst = _area(module), _area(name)
            if src and dst != src and rank[dst] > rank[src]:
                up.append(f"{module} -> {name}")
    assert not missing, missing
    assert not up, up


def test_every_module_imports():
    """Top-level imports of every module (lazy ones are checked above for the module they name)."""
    import importlib

    for module in _modules():
        importlib.import_module(module)
