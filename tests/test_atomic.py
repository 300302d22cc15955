import os
import stat

import pytest

from rollout_bench.core import atomic


@pytest.fixture(params=[0o022, 0o027, 0o002])
def mask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_outputs_get_the_modes_open_and_mkdir_would(tmp_path, mask):
    """Stats, tables and asset dirs were 0600 / 0700 (mkstemp's, mkdtemp's), unreadable to colleagues."""
    atomic.write_json(tmp_path / "stats.json", {"v": 1})
    with atomic.directory(tmp_path / "dataset") as d:
        (d / "data.jsonl").write_text("{}\n")
    (tmp_path / "plain.txt").write_text("x")
    (tmp_path / "plain_dir").mkdir()
    assert _mode(tmp_path / "stats.json") == _mode(tmp_path / "plain.txt") == 0o666 & ~mask
    assert _mode(tmp_path / "dataset") == _mode(tmp_path / "plain_dir") == 0o777 & ~mask


def test_umask_is_read_without_proc_too(mask, monkeypatch):
    assert atomic.umask() == mask
    real_open = open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc"):
            raise OSError("no /proc")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", no_proc)
    assert atomic.umask() == mask
    assert os.umask(mask) == mask  # the fallback put it back
