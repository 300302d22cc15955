"""Write-then-rename, so a crashed job never leaves a half-written result."""
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def write_text(path, text: str) -> None:
    _write(path, text, "w")


def write_bytes(path, data: bytes) -> None:
    _write(path, data, "wb")


def _write(path, data, mode: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            # mkstemp makes 0600 whatever the umask; results are shared like any file open() makes
            os.fchmod(f.fileno(), 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask can only set it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    # set-and-restore: a thread creating a file in between would get 0o077, tighter, never looser
    old = os.umask(0o077)
    os.umask(old)
    return old


def write_json(path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(o):
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextmanager
def directory(path):
    """Yield a temp dir beside `path`; it becomes `path` only if the block finishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        # mkdtemp makes 0700 whatever the umask; give the dir the mode mkdir() would
        tmp.chmod(0o777 & ~umask())
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
