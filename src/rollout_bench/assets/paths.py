"""Which sources name a local path: those must exist, since a hub lookup would hide the typo."""
from pathlib import Path

PREFIXES = ("/", "./", "../", "~")


def path_like(source: str) -> bool:
    """`/data/m`, `./m`, `../m`, `~/m`; a hub id such as `Qwen/Qwen3-4B-Base` is not one."""
    return source.startswith(PREFIXES) or source in (".", "..", "~")


def local(source: str) -> Path | None:
    """The directory a source names, if it is path-like or an existing directory; else None (a name or hub id)."""
    p = Path(source).expanduser()
    return p if path_like(source) or p.is_dir() else None
