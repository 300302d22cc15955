"""Cached stats files that do not load are moved aside, so Snakemake sees them missing and reruns their jobs.

Snakemake judges a cached output by its existence and times, never its content: a truncated stats file
looks current and fails `aggregate` later. The Snakefile calls `set_aside` on every stats path at start,
dry runs included: the file is useless either way, it is kept (as `<path>.corrupt`), and the dry run
then lists the job a real run would do.
"""
import os

from . import stats

SUFFIX = ".corrupt"


def set_aside(paths) -> list[str]:
    """Move each existing stats file that fails `stats.load` to `<path>.corrupt`; one message per file moved."""
    moved = []
    for path in paths:
        if not os.path.isfile(path):
            continue
        try:
            stats.load(path)
        except stats.InvalidResultFile as e:
            dest = f"{path}{SUFFIX}"
            if os.path.exists(dest):  # an earlier corrupt copy stays for whoever looks into it
                dest = f"{path}.{int(os.path.getmtime(path))}{SUFFIX}"
            os.replace(path, dest)
            moved.append(f"{path}: {e.why}; moved to {dest}, so its job reruns")
        except OSError as e:  # unreadable: the job that writes it will say so, the DAG can still be built
            moved.append(f"{path}: cannot be read ({e}); left in place")
    return moved
