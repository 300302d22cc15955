"""The stats contract (docs/design.md §4): build, validate, write atomically."""
import json
import time
from functools import cache

import jsonschema

from .. import SCHEMAS
from . import atomic, envinfo

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
        "started_at": envinfo.utc_iso(),
        "wall_s": 0.0,
        "_t0": time.perf_counter(),
    }


def skipped(record: dict, reason: str) -> dict:
    return {**record, "status": "skipped", "reason": reason}


def failed(record: dict, reason: str) -> dict:
    return {**record, "status": "failed", "reason": reason}


@cache
def _validator():
    # built once: `jsonschema.validate` re-checks the schema on every call (~35 ms), and the Snakefile
    # validates every cached stats file at each start
    cls = jsonschema.validators.validator_for(schema())
    cls.check_schema(schema())
    return cls(schema())


def validate(record: dict) -> None:
    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is not None:
        raise error


def finish(record: dict, path) -> dict:
    """Stamp wall time, validate against the schema, write atomically."""
    record = dict(record)
    t0 = record.pop("_t0", None)
    if t0 is not None:
        record["wall_s"] = round(time.perf_counter() - t0, 3)
    validate(record)
    atomic.write_json(path, record)
    return record


class InvalidResultFile(ValueError):
    """A cached result that does not parse or validate; the message names the file and the fix."""

    def __init__(self, path, why: str):
        self.path, self.why = str(path), why
        super().__init__(f"{path}: {why}. Delete it and rerun: Snakemake then reruns the job that writes it")


def read_json(path):
    """A cached result JSON (stats or comparison); an unreadable one raises naming the file."""
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidResultFile(path, f"not JSON ({e})") from e


def load(path) -> dict:
    record = read_json(path)
    try:
        validate(record)
    except jsonschema.ValidationError as e:
        raise InvalidResultFile(path, f"fails workflow/schemas/stats.schema.json ({e.message})") from e
    return record
