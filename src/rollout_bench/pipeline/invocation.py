"""The record of one Snakemake invocation (results/logs/invocation.json): its command, profile, start, end and wall,
written by the Snakefile's onstart and onsuccess/onerror handlers (which a dry run does not call), so that a
published run states how long the command that made it took. Each invocation overwrites the last one's record: after
a change, the record is of the run that brought the stale jobs up to date, not of the first full run. A published
folder keeps its run's record (logs/invocation.json): whether the run ended, whether it asked for named targets only
(part of its profile), and whether the record is the whole run's or a later rerun's are read back from it."""
import datetime as _dt
import json
import shlex
import sys
import time
from pathlib import Path

from ..core import atomic, envinfo

PATH = "results/logs/invocation.json"
# where a published run keeps its jobs' own records (a session may add others beside them, such as its smoke run's)
JOB_DIRS = ("generate", "mismatch", "train", "autotune", "decode_profile")


def start(profile: str | None, path: str = PATH, argv: list[str] | None = None) -> dict:
    """Called once the DAG is built: the wall counts from the process's start (config checks and the DAG included)."""
    argv = sys.argv if argv is None else argv
    t0 = time.time() - (envinfo.process_age_s() or 0.0)
    rec = {"command": shlex.join(["snakemake", *argv[1:]]), "profile": profile, "started_at": envinfo.utc_iso(t0),
           "t0": t0, "finished_at": None, "wall_s": None, "ok": None}
    atomic.write_json(path, rec)
    return rec


def finish(ok: bool, path: str = PATH) -> dict | None:
    """The wall since `start`; None (nothing written) where this invocation wrote no start."""
    p = Path(path)
    if not p.exists():
        return None
    rec = json.loads(p.read_text())
    now = time.time()
    rec.update(finished_at=envinfo.utc_iso(now), wall_s=round(now - rec["t0"], 1), ok=ok)
    atomic.write_json(path, rec)
    return rec


def read(folder: Path) -> dict | None:
    """A published run's invocation record; None for runs before 2026-12-06, which wrote none."""
    p = Path(folder) / "logs" / "invocation.json"
    return json.loads(p.read_text()) if p.exists() else None


def cut_short(folder: Path) -> bool:
    """The run's invocation record says it never ended (runs before 2026-12-06 have no record: not known cut)."""
    rec = read(folder)
    return rec is not None and rec.get("wall_s") is None


def whole_run(folder: Path) -> dict | None:
    """The run's record where it is of the whole profile run to its end: it ended, named no targets, and none of the
    folder's jobs started before it (a record that overwrote the first run's, of a rerun of stale jobs, is not);
    else None. ValueError where the record cannot be read."""
    rec = read(folder)
    if rec is None or rec.get("wall_s") is None or _targets(rec, folder):
        return None
    began = _when(rec.get("started_at"))
    for p in (p for d in JOB_DIRS for p in (Path(folder) / d).rglob("*.json")) if began else ():
        try:
            at = _when(json.loads(p.read_text()).get("started_at"))
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, ValueError):
            continue
        if at is not None and at < began:
            return None
    return rec


def _when(iso) -> _dt.datetime | None:
    """An ISO timestamp as the records write them (envinfo.utc_iso); naive ones taken as UTC."""
    if not isinstance(iso, str):
        return None
    t = _dt.datetime.fromisoformat(iso)
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def targets(folder: Path) -> list[str]:
    """The targets the run's invocation asked Snakemake for (its own argument parser reads the recorded command):
    none where it ran the whole profile, or where no invocation is recorded."""
    rec = read(folder)
    return [] if rec is None else _targets(rec, folder)


def _targets(rec: dict, folder: Path) -> list[str]:
    from snakemake.cli import get_argument_parser
    command = rec.get("command")
    try:  # options of plugins or other versions are left over, not fatal
        args, _ = get_argument_parser().parse_known_args(shlex.split(command)[1:])
    except (SystemExit, ValueError, AttributeError) as e:
        raise ValueError(f"{Path(folder) / 'logs/invocation.json'}: its command cannot be read as Snakemake's "
                         f"({e!r}): {command}") from None
    return sorted(args.targets)
