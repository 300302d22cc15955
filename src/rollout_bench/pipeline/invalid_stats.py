"""Cached stats files that do not load are moved aside, so Snakemake sees them missing and reruns their jobs.

Snakemake judges a cached output by its existence and times, never its content: a truncated stats file
looks current and fails `aggregate` later. The Snakefile calls `set_aside` on every stats path at start,
dry runs included: the file is useless either way, it is kept (as `<path>.corrupt`), and the dry run
then lists the job a real run would do.
"""
import os

from ..core import stats

SUFFIX = ".corrupt"


def set_aside(paths, readers=lambda path: []) -> list[str]:
    """Move each existing stats file that fails `stats.load` to `<path>.corrupt`; one message per file moved.
    `readers(path)`: the cached outputs made from it (the summary CSV, tables, comparisons), removed with it: a
    Snakemake run that targets one of them would otherwise find it present, never ask for the missing stats
    file, and leave a table out of step with the files."""
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
            gone = [r for r in readers(path) if os.path.isfile(r)]
            for r in gone:
                os.remove(r)
            moved.append(f"{path}: {e.why}; moved to {dest}, so its job reruns"
                         + (f"; removed {', '.join(gone)}, made from it, so that it is made again" if gone else ""))
        except OSError as e:  # unreadable: the job that writes it will say so, the DAG can still be built
            moved.append(f"{path}: cannot be read ({e}); left in place")
    return moved
