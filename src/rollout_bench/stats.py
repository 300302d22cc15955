"""The stats contract (DESIGN.md section 3): build, validate, write atomically."""
import datetime as _dt
import json
import time
from functools import cache

import jsonschema

from . import SCHEMAS, atomic, envinfo

SCHEMA_VERSION = 1


@cache
def schema() -> dict:
    return json.loads((SCHEMAS / "stats.schema.json").read_text())


def base(kind: str, *, backend: str, variant: str, model: str, workload: dict, case: str = "") -> dict:
    """Common fields; `wall_s` is filled by `finish`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "status": "ok",
        "reason": None,
        "backend": backend,
        "variant": variant,
        "case": case,
        "model": model,
        "workload": workload,
        "env": envinfo.collect(),
        "gpu_ids": envinfo.gpu_ids(),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": 0.0,
        "_t0": time.perf_counter(),
    }


def skipped(record: dict, reason: str) -> dict:
    return {**record, "status": "skipped", "reason": reason}


def failed(record: dict, reason: str) -> dict:
    return {**record, "status": "failed", "reason": reason}


def validate(record: dict) -> None:
    jsonschema.validate(record, schema())


def finish(record: dict, path) -> dict:
    """Stamp wall time, validate against the schema, write atomically."""
    record = dict(record)
    t0 = record.pop("_t0", None)
    if t0 is not None:
        record["wall_s"] = round(time.perf_counter() - t0, 3)
    validate(record)
    atomic.write_json(path, record)
    return record


def load(path) -> dict:
    with open(path) as f:
        record = json.load(f)
    validate(record)
    return record
