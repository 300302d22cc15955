"""Offline wheelhouse: selection, sdist builds, split/reassemble/sha256, offline install (no network)."""
import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rollout_bench.host import wheelhouse as wh

ENV312 = wh.target_environment("3.12", wh.platform_tags("manylinux_x86_64"))


def make_wheel(directory: Path, name: str, version: str, files: dict | None = None, requires=()) -> Path:
    """A minimal valid pure-Python wheel, written by hand (no build backend, no network)."""
    files = files if files is not None else {f"{name}/__init__.py": f"VALUE = {version!r}\n"}
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {**files, f"{dist}/METADATA": meta,
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    out = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return out


# --- names, tags, host packages ----------------------------------------------------------------

def test_platform_tags_cover_every_manylinux_glibc():
    tags = wh.platform_tags("manylinux_x86_64")
    for n in range(17, 40):
        assert f"manylinux_2_{n}_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert wh.platform_tags("manylinux_2_28_x86_64") == ["manylinux_2_28_x86_64"]  # exact tags pass through


def test_read_host_packages(tmp_path):
    f = tmp_path / "host.txt"
    f.write_text("# comment\nTorch==2.11.0\nhuggingface_hub==1.33.0  # pinned\nnumba\n"
                 "mypkg @ file:///tmp/mypkg\n-e git+https://x/y#egg=z\nruamel.yaml==0.18\n\n")
    host = wh.read_host_packages(f)
    assert host == {"torch": "2.11.0", "huggingface-hub": "1.33.0", "numba": None, "mypkg": None,
                    "ruamel-yaml": "0.18"}


def test_shipped_host_file_parses():
    host = wh.read_host_packages(wh.ENVS / "h200-host.txt")
    assert host["torch"] == "2.11.0" and host["numpy"] == "2.5.2" and host["peft"] is None
    assert len(host) > 150


def test_wheel_fits():
    plats = wh.platform_tags("manylinux_x86_64")
    assert wh.wheel_fits("connection_pool-0.0.3-py3-none-any.whl", "3.12", plats)
    assert wh.wheel_fits("x-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.12", plats)
    assert wh.wheel_fits("vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl", "3.12", plats)  # abi3 of an older cp
    assert not wh.wheel_fits("x-1-cp313-abi3-manylinux_2_28_x86_64.whl", "3.12", plats)
    assert not wh.wheel_fits("x-1-cp311-cp311-linux_x86_64.whl", "3.12", plats)


def test_unmatched_requirement_from_pip_error():
    err = ("WARNING: Location 'file:///opt/x' is ignored\n"
           "ERROR: Could not find a version that satisfies the requirement connection_pool>=0.0.3 "
           "(from snakemake) (from versions: 0.0.1, 0.0.2)\n"
           "ERROR: No matching distribution found for connection_pool>=0.0.3\n")
    assert wh.unmatched_requirement(err) == "connection_pool>=0.0.3"
    assert wh.unmatched_requirement("ERROR: ResolutionImpossible: ...") is None


# --- selection ---------------------------------------------------------------------------------

def item(name, version, requires=(), sha=None):
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)},
            "download_info": {"url": f"https://files/{name}-{version}.whl",
                              "archive_info": {"hashes": {"sha256": sha}} if sha else {}}}


def fake_report():
    return {"install": [
        item("App", "1.0", ["lib-b>=1", "Lib_C[fast]", "old-only; python_version < '3.12'",
                            "winonly; sys_platform == 'win32'"]),
        item("lib-b", "2.0", ["torch>=2"]),
        item("torch", "2.13.0", ["nvidia-foo", "sympy"]),
        item("nvidia-foo", "1.0"),
        item("sympy", "1.14"),
        item("lib_c", "3.0", ["lib-e", "lib-f; extra == 'fast'", "lib-g; extra == 'slow'", "heavy"]),
        item("lib-e", "1.0", ["sympy"]),
        item("lib-f", "1.0"),
        item("heavy", "9.0", ["heavy-only-dep"]),
        item("heavy-only-dep", "1.0"),
        item("old-only", "1.0"),
    ]}


def test_select_walks_markers_extras_host_and_lean():
    sel = wh.select(fake_report(), ["app==1.0"], {"torch": "2.11.0", "numpy": None}, {"Heavy"}, ENV312)
    assert sel["kept"] == ["app", "lib-b", "lib-c", "lib-e", "lib-f", "sympy"]  # sympy: lib-e needs it too
    assert sel["host"] == [{"name": "torch", "resolved": "2.13.0", "host": "2.11.0"}]
    assert sel["lean"] == ["heavy"]
    # needed only through the host's torch, the lean `heavy`, or a marker false on 3.12
    assert sel["pruned"] == ["heavy-only-dep", "nvidia-foo", "old-only"]


def test_select_python_version_markers_follow_target():
    env311 = wh.target_environment("3.11", ["manylinux_2_28_x86_64"])
    assert "old-only" in wh.select(fake_report(), ["app"], {}, set(), env311)["kept"]


# --- files: split, reassemble, sha256 ----------------------------------------------------------

def test_split_reassemble_roundtrip(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir(), dest.mkdir()
    data = os.urandom(2500)
    (src / "big-1.0-py3-none-any.whl").write_bytes(data)
    (src / "small-1.0-py3-none-any.whl").write_bytes(b"tiny")
    big = wh.add_file(src / "big-1.0-py3-none-any.whl", 1024, project="big", version="1.0")
    small = wh.add_file(src / "small-1.0-py3-none-any.whl", 1024, project="small", version="1.0")
    assert [p["file"] for p in big["parts"]] == [f"big-1.0-py3-none-any.whl.part00{i}" for i in range(3)]
    assert [p["size"] for p in big["parts"]] == [1024, 1024, 452]
    assert not (src / "big-1.0-py3-none-any.whl").exists() and "parts" not in small
    wh.write_manifest(src, {"files": [big, small]})
    entries = wh.load_manifest(src)["files"]
    out = wh.assemble(src, entries[0], dest)
    assert out.read_bytes() == data and big["sha256"] == hashlib.sha256(data).hexdigest()
    assert wh.assemble(src, entries[1], dest) == src / "small-1.0-py3-none-any.whl"  # used in place

    part = src / big["parts"][1]["file"]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(ValueError, match="part001: sha256 mismatch"):
        wh.assemble(src, entries[0], dest)
    (src / "small-1.0-py3-none-any.whl").write_bytes(b"tinY")
    with pytest.raises(ValueError, match="sha256 mismatch"):
        wh.assemble(src, entries[1], dest)
    part.unlink()
    with pytest.raises(FileNotFoundError):
        wh.assemble(src, entries[0], dest)


def test_open_wheel_reads_a_split_wheel_in_place(tmp_path):
    whl = make_wheel(tmp_path, "splitpkg", "1.0", {"splitpkg/__init__.py": "X = 1\n" + "#" * 3000 + "\n"})
    entry = wh.add_file(whl, 700, project="splitpkg", version="1.0")
    assert len(entry["parts"]) > 2
    wh.write_manifest(tmp_path, {"files": [entry]})
    z = wh.open_wheel(tmp_path, "SplitPkg")
    assert z.read("splitpkg/__init__.py").decode().startswith("X = 1")
    assert wh.open_wheel(tmp_path, "other") is None


def test_install_offline_reassembles_and_installs(tmp_path):
    house, target = tmp_path / "house", tmp_path / "site"
    house.mkdir()
    payload = "VALUE = 'offline'\n# " + "z" * 4000 + "\n"
    a = make_wheel(house, "tinypkg_a", "0.1", {"tinypkg_a/__init__.py": payload})
    b = make_wheel(house, "tinypkg_b", "0.2", requires=["not-on-any-index>=1"])  # --no-deps: not looked up
    files = [wh.add_file(a, 1500, project="tinypkg-a", version="0.1"),
             wh.add_file(b, 1500, project="tinypkg-b", version="0.2")]
    assert files[0].get("parts") and not files[1].get("parts")
    wh.write_manifest(house, {"files": files})
    assert wh.main(["install", str(house), "--target", str(target)]) == 0
    out = subprocess.run([sys.executable, "-c", "import tinypkg_a, tinypkg_b; print(tinypkg_a.VALUE, tinypkg_b.VALUE)"],
                         env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True)
    assert out.stdout.split() == ["offline", "0.2"], out.stderr
    assert (target / "tinypkg_b-0.2.dist-info" / "METADATA").exists()
    assert sorted(p.name for p in house.iterdir() if p.suffix == ".whl") == ["tinypkg_b-0.2-py3-none-any.whl"]


# --- build, with pip replaced by a fake index ---------------------------------------------------

class FakePip:
    """Stands in for `python -m pip`: an index where `sdistonly` has no wheel, and downloads."""

    def __init__(self, tmp_path, tamper=False):
        self.src = tmp_path / "index"
        self.src.mkdir()
        self.wheels = {n: make_wheel(self.src, n, v) for n, v in
                       [("app", "1.0"), ("libb", "2.0"), ("torch", "2.13.0"), ("nvidia_foo", "1.0"),
                        ("bigdep", "3.0"), ("sdistonly", "0.3"), ("skipme", "1.0")]}
        big = self.wheels["bigdep"]
        with zipfile.ZipFile(big, "a") as z:
            z.writestr("bigdep/blob.bin", os.urandom(5000))
        self.tamper = tamper
        self.calls = []

    def report(self, built):
        reqs = {"app": ["libb", "torch", "bigdep", "sdistonly", "skipme"], "torch": ["nvidia-foo"]}
        names = ["app", "libb", "torch", "nvidia_foo", "bigdep", "skipme"] + (["sdistonly"] if built else [])
        out = []
        for n in names:
            f = self.wheels[n]
            sha = hashlib.sha256(f.read_bytes()).hexdigest()
            out.append(item(n, f.name.split("-")[1], reqs.get(n, []), sha=sha))
        return {"version": "1", "pip_version": "fake", "install": out}

    def __call__(self, python, args, env=None):
        self.calls.append(args)
        cmd = args[0]
        if cmd == "install":
            assert "--dry-run" in args and "--only-binary=:all:" in args and "manylinux_2_28_x86_64" in args
            built_dir = Path(args[args.index("--find-links") + 1])
            built = any(built_dir.glob("sdistonly-*.whl"))
            if not built:
                err = "ERROR: No matching distribution found for sdistonly>=0.2\n"
                return subprocess.CompletedProcess(args, 1, "", err)
            Path(args[args.index("--report") + 1]).write_text(json.dumps(self.report(built)))
            return subprocess.CompletedProcess(args, 0, "", "")
        if cmd == "wheel":
            assert "--no-deps" in args and args[-1] == "sdistonly>=0.2"
            wd = Path(args[args.index("--wheel-dir") + 1])
            (wd / self.wheels["sdistonly"].name).write_bytes(self.wheels["sdistonly"].read_bytes())
            return subprocess.CompletedProcess(args, 0, "", "")
        if cmd == "download":
            assert "--no-deps" in args
            dest = Path(args[args.index("--dest") + 1])
            dest.mkdir(parents=True, exist_ok=True)
            for pin in [a for a in args if "==" in a]:
                name = wh.canon(pin.split("==")[0]).replace("-", "_")
                data = self.wheels[name].read_bytes()
                (dest / self.wheels[name].name).write_bytes(data + (b"!" if self.tamper else b""))
            return subprocess.CompletedProcess(args, 0, "", "")
        raise AssertionError(args)


def test_build_selects_builds_splits_and_writes_manifest(tmp_path, monkeypatch):
    fake = FakePip(tmp_path)
    monkeypatch.setattr(wh, "run_pip", fake)
    host = tmp_path / "host.txt"
    host.write_text("torch==2.11.0\n")
    lean = tmp_path / "lean.txt"
    lean.write_text("skipme\n")
    out = tmp_path / "house"
    m = wh.build("demo", requirements=["app==1.0"], constraints=host, exclude=lean, split_mb=4000 / wh.MiB,
                 out=out, pip_python=sys.executable)
    projects = [f["project"] for f in m["files"]]
    assert projects == ["app", "bigdep", "libb", "sdistonly"]
    assert m["host_excluded"] == [{"name": "torch", "resolved": "2.13.0", "host": "2.11.0"}]
    assert m["lean_excluded"] == ["skipme"] and m["pruned"] == ["nvidia-foo"]
    assert m["built_from_sdist"] == [{"requirement": "sdistonly>=0.2", "file": "sdistonly-0.3-py3-none-any.whl"}]
    assert any("torch" in n and "2.11.0" in n for n in m["notes"])
    big = next(f for f in m["files"] if f["project"] == "bigdep")
    assert len(big["parts"]) == 2 and not (out / big["file"]).exists()
    assert m["total_bytes"] == sum(f["size"] for f in m["files"])
    assert wh.load_manifest(out)["files"] == m["files"]
    assert not out.with_name("house.tmp").exists()
    # and it installs offline from there
    wh.install(out, tmp_path / "site")
    assert (tmp_path / "site" / "bigdep" / "blob.bin").stat().st_size == 5000


def test_build_dry_run_downloads_nothing(tmp_path, monkeypatch):
    fake = FakePip(tmp_path)
    monkeypatch.setattr(wh, "run_pip", fake)
    m = wh.build("demo", requirements=["app==1.0"], dry_run=True, out=tmp_path / "h", pip_python=sys.executable)
    assert {f["project"] for f in m["files"]} == {"app", "libb", "torch", "nvidia-foo", "bigdep", "sdistonly", "skipme"}
    assert not any(c[0] == "download" for c in fake.calls) and not (tmp_path / "h").exists()


def test_build_refuses_a_download_whose_hash_differs_from_the_index(tmp_path, monkeypatch):
    monkeypatch.setattr(wh, "run_pip", FakePip(tmp_path, tamper=True))
    with pytest.raises(RuntimeError, match="sha256 differs"):
        wh.build("demo", requirements=["app==1.0"], out=tmp_path / "h", pip_python=sys.executable)
    assert not (tmp_path / "h").exists() and not (tmp_path / "h.tmp").exists()


def test_build_fails_clearly_when_an_sdist_build_does_not_fit(tmp_path, monkeypatch):
    def pip(python, args, env=None):
        if args[0] == "install":
            return subprocess.CompletedProcess(args, 1, "", "ERROR: No matching distribution found for cext>=1\n")
        wd = Path(args[args.index("--wheel-dir") + 1])
        (wd / "cext-1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(wh, "run_pip", pip)
    with pytest.raises(RuntimeError, match="only pure-Python sdists"):
        wh.build("demo", requirements=["cext>=1"], out=tmp_path / "h", pip_python=sys.executable)


def test_default_exclude_is_the_groups_lean_list():
    assert wh._default_exclude("vllm") == wh.ENVS / "vllm.lean.txt"
    assert wh._default_exclude("report") is None


def test_arrange_packs_files_and_parts_into_carryable_batches(tmp_path):
    entries = []
    for name, size in [("a", 700), ("b", 400), ("c", 300), ("d", 2500)]:
        f = tmp_path / f"{name}-1-py3-none-any.whl"
        f.write_bytes(os.urandom(size))
        entries.append(wh.add_file(f, 1000, project=name, version="1"))
    sizes = wh.arrange(tmp_path, entries, 1000)
    assert sizes == [1000, 1000, 1000, 900]  # d.part000, d.part001, a+c, d.part002+b
    for i, size in enumerate(sizes):
        folder = tmp_path / f"batch{i:03d}"
        assert sum(p.stat().st_size for p in folder.iterdir()) == size <= 1000
    assert not list(tmp_path.glob("*.whl*"))
    out = wh.assemble(tmp_path, entries[3], tmp_path)
    assert wh.sha256(out) == entries[3]["sha256"]
    with pytest.raises(ValueError, match="does not fit a batch"):
        wh.arrange(tmp_path, [{"file": "huge.whl", "size": 2000}], 1000)


def test_build_in_batches_installs_from_the_batch_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(wh, "run_pip", FakePip(tmp_path))
    out = tmp_path / "house"
    m = wh.build("demo", requirements=["app==1.0"], split_mb=0, batch_mb=4000 / wh.MiB, out=out,
                 pip_python=sys.executable)
    assert m["split_bytes"] == m["batch_bytes"] and len(m["batches"]) >= 2
    assert all(size <= m["batch_bytes"] for size in m["batches"])
    batches = [f"batch{i:03d}" for i in range(len(m["batches"]))]
    assert sorted(p.name for p in out.iterdir()) == batches + ["manifest.json"]
    wh.install(out, tmp_path / "site")
    assert (tmp_path / "site" / "bigdep" / "blob.bin").exists()


def test_rebatch_shrinks_batches_and_still_installs(tmp_path, monkeypatch):
    monkeypatch.setattr(wh, "run_pip", FakePip(tmp_path))
    out = tmp_path / "house"
    before = wh.build("demo", requirements=["app==1.0"], split_mb=0, batch_mb=4000 / wh.MiB, out=out,
                      pip_python=sys.executable)
    after = wh.rebatch(out, 1500 / wh.MiB)
    assert after["batch_bytes"] == after["split_bytes"] == 1500 and len(after["batches"]) > len(before["batches"])
    assert all(size <= 1500 for size in after["batches"])
    assert [(e["file"], e["sha256"]) for e in after["files"]] == [(e["file"], e["sha256"]) for e in before["files"]]
    assert wh.load_manifest(out)["batches"] == after["batches"]
    for i, size in enumerate(after["batches"]):
        assert sum(p.stat().st_size for p in (out / f"batch{i:03d}").iterdir()) == size
    assert not (tmp_path / "house.tmp").exists()
    wh.install(out, tmp_path / "site")
    assert (tmp_path / "site" / "bigdep" / "blob.bin").exists()


def test_rebatch_re_splits_split_wheels_and_keeps_the_original_on_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(wh, "run_pip", FakePip(tmp_path))
    out = tmp_path / "house"
    before = wh.build("demo", requirements=["app==1.0"], split_mb=1000 / wh.MiB, batch_mb=3000 / wh.MiB, out=out,
                      pip_python=sys.executable)
    assert any(e.get("parts") for e in before["files"])  # some wheel was split at 1000 bytes
    after = wh.main(["rebatch", str(out), "--batch-mb", str(700 / wh.MiB)])
    assert after == 0
    m = wh.load_manifest(out)
    assert all(p["size"] <= 700 for e in m["files"] for p in (e.get("parts") or [e]))
    assert [e["sha256"] for e in m["files"]] == [e["sha256"] for e in before["files"]]
    wh.install(out, tmp_path / "site")
    assert (tmp_path / "site" / "bigdep" / "blob.bin").exists()
    listing = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    # a corrupt part: nothing is replaced
    part = next(out.rglob("*.part*"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(ValueError, match="sha256 mismatch"):
        wh.rebatch(out, 500 / wh.MiB)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == listing
    assert not (tmp_path / "house.tmp").exists() and not (tmp_path / "house.old").exists()
    with pytest.raises(ValueError, match="must be above 0"):
        wh.rebatch(out, 0)


def test_offline_gpu_host_installs_carried_wheelhouses_once_then_runs(tmp_path):
    """workflow/scripts/offline_gpu_host.sh on a checkout that carries .wheelhouse/<group>/ (install, run)."""
    root = Path(__file__).resolve().parents[1]
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    house = checkout / ".wheelhouse" / "tiny"
    house.mkdir(parents=True)
    (checkout / "src").symlink_to(root / "src")
    a = make_wheel(house, "tinypkg_c", "0.3", {"tinypkg_c/__init__.py": "VALUE = 'carried'\n# " + "z" * 4000 + "\n"})
    wh.write_manifest(house, {"files": [wh.add_file(a, 1500, project="tinypkg-c", version="0.3")]})
    env = {**os.environ, "SITE": str(site)}
    env.pop("WHEELS", None)
    script = str(root / "workflow/scripts/offline_gpu_host.sh")
    r = subprocess.run(["bash", script, "--version"], cwd=checkout, env=env, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert (site / "tinypkg_c" / "__init__.py").read_text().startswith("VALUE = 'carried'")  # reassembled
    assert (site / ".installed").exists()
    (site / "tinypkg_c" / "__init__.py").unlink()
    r = subprocess.run(["bash", script, "--version"], cwd=checkout, env=env, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0 and not (site / "tinypkg_c" / "__init__.py").exists()  # installed once per SITE


def test_pth_files_of_a_target_install_work_from_pythonpath(tmp_path):
    """A --target directory on PYTHONPATH is not a site directory: its .pth files (nvidia-cutlass-dsl's puts
    `cutlass` on sys.path) are skipped unless `install --pth` wrote the sitecustomize that adds it as one."""
    site = tmp_path / "site"
    (site / "pkg" / "inner").mkdir(parents=True)
    (site / "pkg" / "inner" / "hidden_mod.py").write_text("X = 1\n")
    (site / "pkg.pth").write_text("import sys, os; sys.path.insert(0, os.path.join(%r, 'pkg', 'inner'))\n" % str(site))
    probe = [sys.executable, "-c", "import hidden_mod"]
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    assert subprocess.run(probe, env=env, capture_output=True).returncode != 0
    assert wh.process_pth(site)
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 0
    (tmp_path / "plain").mkdir()
    assert not wh.process_pth(tmp_path / "plain") and not (tmp_path / "plain" / "sitecustomize.py").exists()
