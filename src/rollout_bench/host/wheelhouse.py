"""Offline wheelhouse for an air-gapped GPU host: one backend group's wheels, minus what the host has.

    python -m rollout_bench.host.wheelhouse build vllm --constraints envs/h200-host.txt   # here (PyPI)
    python -m rollout_bench.host.wheelhouse install .wheelhouse/vllm --target /tmp/site   # on the host
    python -m rollout_bench.host.wheelhouse requirements vllm --write                     # envs/*.txt

build:
  1. resolve the group's pins (envs/GROUP.yaml) for the target with `pip install --dry-run --report`
     (wheels only, explicit --platform tags; metadata only, nothing large is downloaded). pip
     evaluates environment markers with the interpreter it runs under, so the resolver runs under
     a Python of the target version when one is found (--pip-python).
  2. a requirement that exists only as an sdist (`connection_pool`) is built with `pip wheel
     --no-deps`; a pure-Python result joins the resolution through --find-links, anything else fails.
  3. walk the dependency graph from the group's pins, stopping at packages the host has (a
     `pip list --format=freeze` file; a bare name = present, any version) and at the lean list:
     a package that only they need is dropped too.
  4. `pip download --no-deps` exactly the kept pins; check sha256 against the resolver's report;
     split files above --split-mb into name.part000...; write manifest.json.
install: reassemble parts, verify every sha256 in the manifest, then
  `pip install --no-index --no-deps --upgrade --target T`; use it with PYTHONPATH=T.

The install side uses the standard library only (the host may lack `packaging`/`yaml`).
"""
import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import ROOT

ENVS = ROOT / "envs"
GROUPS = ("core", "vllm", "unsloth", "fa4", "report", "slurm")
MiB = 2**20
DEFAULT_SPLIT_MB = 58
MANIFEST = "manifest.json"
PART = ".part{:03d}"


# --- groups and package lists -------------------------------------------------------------------

def group_requirements(group: str, envs: Path = ENVS) -> list[str]:
    """The pip requirement lines of envs/GROUP.yaml (the source of truth for a group's pins)."""
    import yaml

    doc = yaml.safe_load((Path(envs) / f"{group}.yaml").read_text())
    for dep in doc["dependencies"]:
        if isinstance(dep, dict) and "pip" in dep:
            return [str(r).strip() for r in dep["pip"]]
    raise ValueError(f"envs/{group}.yaml has no pip: section")


def render_requirements(group: str, envs: Path = ENVS) -> str:
    head = (f"# Generated from envs/{group}.yaml (the source of truth); do not edit. Regenerate:\n"
            f"#   python -m rollout_bench.host.wheelhouse requirements {group} --write\n")
    return head + "".join(r + "\n" for r in group_requirements(group, envs))


def canon(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_name_list(path) -> list[str]:
    """Non-empty lines without comments."""
    out = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def read_host_packages(path) -> dict[str, str | None]:
    """`name==version` -> version; a bare name (or `name @ url`, `-e ...`) -> None: present, any version."""
    host = {}
    for line in read_name_list(path):
        if line.startswith("-e ") or line.startswith("--"):
            continue
        name, sep, version = line.partition("==")
        name = re.split(r"[\s@<>=!~;\[]", name.strip(), maxsplit=1)[0]
        host[canon(name)] = version.strip() if sep and version.strip() else None
    return host


def platform_tags(spec: str) -> list[str]:
    """`manylinux_x86_64` -> every manylinux tag pip must be told about (it matches tags exactly)."""
    m = re.fullmatch(r"manylinux_(x86_64|aarch64)", spec)
    if not m:
        return [spec]
    arch = m.group(1)
    tags = [f"manylinux_2_{n}_{arch}" for n in range(39, 16, -1)] + [f"manylinux2014_{arch}"]
    if arch == "x86_64":
        tags += ["manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]
    return tags


def target_environment(python_version: str, platforms: list[str]) -> dict:
    """PEP 508 marker environment of the target (used for the dependency walk)."""
    arch = "aarch64" if any(p.endswith("aarch64") for p in platforms) else "x86_64"
    full = python_version if python_version.count(".") >= 2 else python_version + ".0"
    return {"python_version": ".".join(python_version.split(".")[:2]), "python_full_version": full,
            "implementation_name": "cpython", "implementation_version": full,
            "platform_python_implementation": "CPython", "os_name": "posix", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": arch, "platform_release": "", "platform_version": ""}


def wheel_fits(filename: str, python_version: str, platforms: list[str]) -> bool:
    """Would pip install this wheel on the target (CPython, python_version, platforms)?"""
    from packaging import tags
    from packaging.utils import parse_wheel_filename

    version = tuple(int(x) for x in python_version.split(".")[:2])
    abi = f"cp{version[0]}{version[1]}"
    supported = set(tags.cpython_tags(version, abis=[abi], platforms=platforms))
    supported |= set(tags.compatible_tags(version, interpreter=abi, platforms=platforms))
    return bool(parse_wheel_filename(filename)[3] & supported)


# --- selection: the dependency walk -------------------------------------------------------------

def select(report: dict, requirements: list[str], host: dict, lean: set[str], env: dict) -> dict:
    """Split pip's resolution into kept / host / lean / pruned.

    Walks Requires-Dist from the group's requirements (markers evaluated for `env`, extras
    followed) and never descends into a package the host has or the lean list names, so what only
    they need is `pruned`. Host packages are matched by name whatever their version; a differing
    known version is listed in `host` with both versions.
    """
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    items = {canon(i["metadata"]["name"]): i for i in report["install"]}
    lean = {canon(n) for n in lean}

    def wanted(req_marker: Marker | None, extras: set[str]) -> bool:
        return req_marker is None or any(req_marker.evaluate({**env, "extra": e}) for e in ({""} | extras))

    queue = []
    for line in requirements:
        req = Requirement(line)
        if wanted(req.marker, set()):
            queue.append((canon(req.name), set(req.extras)))
    extras_seen: dict[str, set[str]] = {}
    host_hit, lean_hit = {}, set()
    while queue:
        name, extras = queue.pop()
        if name not in items:
            continue
        if name in host:
            version = items[name]["metadata"]["version"]
            host_hit[name] = {"name": name, "resolved": version, "host": host[name]}
            continue
        if name in lean:
            lean_hit.add(name)
            continue
        if name in extras_seen and extras <= extras_seen[name]:
            continue
        extras_seen[name] = extras_seen.get(name, set()) | extras
        for line in items[name]["metadata"].get("requires_dist") or []:
            req = Requirement(line)
            if wanted(req.marker, extras_seen[name]):
                queue.append((canon(req.name), set(req.extras)))
    kept = sorted(extras_seen)
    pruned = sorted(set(items) - set(kept) - set(host_hit) - lean_hit)
    return {"kept": kept, "items": items, "host": [host_hit[n] for n in sorted(host_hit)],
            "lean": sorted(lean_hit), "pruned": pruned}


# --- pip ----------------------------------------------------------------------------------------

def run_pip(python: str, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [python, "-m", "pip", *args]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def target_args(python_version: str, platforms: list[str]) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for p in platforms:
        args += ["--platform", p]
    return args


def unmatched_requirement(stderr: str) -> str | None:
    """The requirement pip found no target wheel for (`No matching distribution found for X`), else None.

    That may be an sdist-only release (`connection_pool>=0.0.3`, whose older releases have wheels):
    the caller tries to build it, and reports pip's error when that fails too.
    """
    m = re.search(r"No matching distribution found for (.+)", stderr)
    return m.group(1).strip() if m else None


def find_python(version: str) -> str | None:
    """An interpreter of the target version, so that pip evaluates markers as the target would."""
    if sys.version_info[:2] == tuple(map(int, version.split(".")[:2])):
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(map(str, pyenv.glob(f"{version}.*/bin/python")), reverse=True)
    for c in filter(None, candidates):
        out = subprocess.run([c, "-c", "import sys, pip; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip() == version:
            return c
    return None


def resolve(python: str, requirements: list[str], python_version: str, platforms: list[str],
            work: Path, max_builds: int = 8) -> tuple[dict, list[dict]]:
    """pip's resolution report for the target (metadata only), building sdist-only requirements."""
    built_dir = work / "built"
    built_dir.mkdir(parents=True, exist_ok=True)
    built = []
    req_file = work / "requirements.txt"
    req_file.write_text("".join(r + "\n" for r in requirements))
    for _ in range(max_builds + 1):
        report = work / "report.json"
        out = run_pip(python, ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                               "--target", str(work / "never-written"), "--find-links", str(built_dir),
                               *target_args(python_version, platforms), "-r", str(req_file)])
        if out.returncode == 0:
            return json.loads(report.read_text()), built
        req = unmatched_requirement(out.stderr)
        if req is None or any(b["requirement"] == req for b in built):
            raise RuntimeError(f"pip could not resolve the group for the target:\n{tail(out.stderr)}")
        built.append(build_sdist_wheel(python, req, built_dir, python_version, platforms, out.stderr))
    raise RuntimeError(f"more than {max_builds} sdist-only requirements; last: {req}")


def build_sdist_wheel(python: str, req: str, built_dir: Path, python_version: str, platforms: list[str],
                      resolver_error: str = "") -> dict:
    """`pip wheel --no-deps` an sdist-only requirement; the wheel must fit the target (pure Python)."""
    from packaging.requirements import Requirement

    before = set(built_dir.glob("*.whl"))
    name = Requirement(req).name
    out = run_pip(python, ["wheel", "--no-deps", "--no-binary", name, "--wheel-dir", str(built_dir), req])
    new = sorted(set(built_dir.glob("*.whl")) - before)
    if out.returncode != 0 or len(new) != 1:
        raise RuntimeError(f"pip found no wheel for {req} for the target:\n{tail(resolver_error, 8)}\n"
                           f"and building it from an sdist failed:\n{tail(out.stderr)}")
    if not wheel_fits(new[0].name, python_version, platforms):
        raise RuntimeError(f"{req} has no wheel for the target and its sdist builds {new[0].name}, which does "
                           f"not fit it (only pure-Python sdists can be built here)")
    print(f"built {new[0].name} from its sdist (no wheel on the index)", file=sys.stderr)
    return {"requirement": req, "file": new[0].name}


def tail(text: str, n: int = 40) -> str:
    lines = [ln for ln in text.strip().splitlines() if not ln.startswith("WARNING: Location")]
    return "\n".join(lines[-n:])


# --- files: hashing, splitting, manifest --------------------------------------------------------

def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MiB), b""):
            h.update(block)
    return h.hexdigest()


def split_file(path: Path, part_bytes: int) -> list[dict]:
    """Replace `path` by name.part000, .part001, ... of at most part_bytes each."""
    parts = []
    with open(path, "rb") as src:
        for i in range(10**3):
            chunk = src.read(part_bytes)
            if not chunk:
                break
            part = path.with_name(path.name + PART.format(i))
            part.write_bytes(chunk)
            parts.append({"file": part.name, "size": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
        else:
            raise ValueError(f"{path}: 1000 parts or more; raise --split-mb")
    path.unlink()
    return parts


def add_file(path: Path, split_bytes: int, **info) -> dict:
    """Manifest entry for one wheel; split it when above split_bytes (0 = never)."""
    entry = {"file": path.name, **info, "size": path.stat().st_size, "sha256": sha256(path)}
    if split_bytes and entry["size"] > split_bytes:
        entry["parts"] = split_file(path, split_bytes)
    return entry


def locate(directory: Path, rec: dict) -> Path:
    """Where a manifest file or part lies: in its batch folder, or flat in the wheelhouse."""
    for path in (Path(directory) / rec.get("dir", "") / rec["file"], Path(directory) / rec["file"]):
        if path.exists():
            return path
    raise FileNotFoundError(f"{rec['file']} listed in the manifest is missing from {directory}")


def assemble(src_dir: Path, entry: dict, dest_dir: Path) -> Path:
    """The wheel of one manifest entry, reassembled if split, its sha256 (and its parts') verified."""
    if not entry.get("parts"):
        path = locate(src_dir, entry)
        if sha256(path) != entry["sha256"]:
            raise ValueError(f"{path.name}: sha256 mismatch (corrupt or incomplete copy)")
        return path
    dest = Path(dest_dir) / entry["file"]
    h = hashlib.sha256()
    with open(dest, "wb") as out:
        for part in entry["parts"]:
            data = locate(src_dir, part).read_bytes()
            if hashlib.sha256(data).hexdigest() != part["sha256"]:
                raise ValueError(f"{part['file']}: sha256 mismatch (corrupt or incomplete copy)")
            h.update(data)
            out.write(data)
    if h.hexdigest() != entry["sha256"]:
        raise ValueError(f"{entry['file']}: reassembled file's sha256 does not match the manifest")
    return dest


def arrange(stage: Path, entries: list[dict], batch_bytes: int) -> list[int]:
    """Move files and parts into batch000/, batch001/, ... of at most batch_bytes each (largest
    first, first fit), so that each folder can travel on its own; returns the batches' sizes."""
    units = [(p["size"], p) for e in entries for p in (e.get("parts") or [e])]
    sizes: list[int] = []
    for size, rec in sorted(units, key=lambda u: (-u[0], u[1]["file"])):
        if size > batch_bytes:
            raise ValueError(f"{rec['file']} ({size / MiB:.1f} MiB) does not fit a batch; lower --split-mb")
        i = next((i for i, used in enumerate(sizes) if used + size <= batch_bytes), len(sizes))
        if i == len(sizes):
            sizes.append(0)
        sizes[i] += size
        rec["dir"] = f"batch{i:03d}"
        (stage / rec["dir"]).mkdir(exist_ok=True)
        (stage / rec["file"]).rename(stage / rec["dir"] / rec["file"])
    return sizes


def load_manifest(directory) -> dict:
    return json.loads((Path(directory) / MANIFEST).read_text())


def write_manifest(directory, manifest: dict) -> None:
    path = Path(directory) / MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n")


class PartsReader:
    """Seekable read-only file over a wheel's parts, so `zipfile` can read a split wheel in place."""

    def __init__(self, paths):
        self.paths = [Path(p) for p in paths]
        self.sizes = [p.stat().st_size for p in self.paths]
        self.size, self.pos = sum(self.sizes), 0

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n=-1):
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        out, start = bytearray(), 0
        for path, size in zip(self.paths, self.sizes):
            if n and start <= self.pos < start + size:
                with open(path, "rb") as f:
                    f.seek(self.pos - start)
                    chunk = f.read(min(n, start + size - self.pos))
                out += chunk
                self.pos += len(chunk)
                n -= len(chunk)
            start += size
        return bytes(out)

    def close(self):
        pass


def open_wheel(directory, project: str):
    """A zipfile.ZipFile of `project`'s wheel in a wheelhouse (split or not), or None."""
    import zipfile

    directory = Path(directory)
    for entry in load_manifest(directory)["files"]:
        if canon(entry["project"]) == canon(project):
            if entry.get("parts"):
                return zipfile.ZipFile(PartsReader([locate(directory, p) for p in entry["parts"]]))
            return zipfile.ZipFile(locate(directory, entry))
    return None


def download(python, sel: dict, pins: list[str], work: Path, python_version: str, tags: list[str],
             stage: Path, split_bytes: int) -> list[dict]:
    """`pip download --no-deps` the kept pins into `stage`; one wheel each, hashes as resolved."""
    from packaging.utils import parse_wheel_filename

    dl = work / "download"
    res = run_pip(python, ["download", "--no-deps", "--dest", str(dl), "--find-links", str(work / "built"),
                           *target_args(python_version, tags), *pins])
    if res.returncode != 0:
        raise RuntimeError(f"pip download failed:\n{tail(res.stderr)}")
    by_name: dict[str, list] = {}
    for f in sorted(dl.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(f.name)
        by_name.setdefault(canon(name), []).append((f, str(version)))
    missing = [n for n in sel["kept"] if n not in by_name]
    extra = [f.name for f in dl.iterdir() if f.suffix != ".whl"]
    if missing or extra or any(len(v) > 1 for v in by_name.values()):
        raise RuntimeError(f"download does not match the resolution: missing {missing}, non-wheels {extra}, "
                           f"duplicates {[n for n, v in by_name.items() if len(v) > 1]}")
    entries = []
    for n in sel["kept"]:
        (f, version), = by_name[n]
        expected = sel["items"][n].get("download_info", {}).get("archive_info", {}).get("hashes", {}).get("sha256")
        shutil.move(str(f), stage / f.name)
        entry = add_file(stage / f.name, split_bytes, project=n, version=version)
        if expected and expected != entry["sha256"]:
            raise RuntimeError(f"{f.name}: sha256 differs from the index's ({expected})")
        entries.append(entry)
    return entries


# --- build --------------------------------------------------------------------------------------

def build(group: str, *, requirements: list[str] | None = None, python_version: str = "3.12",
          platforms: tuple[str, ...] = ("manylinux_x86_64",), constraints=None, exclude=None,
          split_mb: float = DEFAULT_SPLIT_MB, batch_mb: float = 0, out=None, pip_python: str | None = None,
          dry_run: bool = False, envs: Path = ENVS) -> dict:
    requirements = requirements if requirements is not None else group_requirements(group, envs)
    tags = [t for p in platforms for t in platform_tags(p)]
    host = read_host_packages(constraints) if constraints else {}
    lean = set(read_name_list(exclude)) if exclude else set()
    out = Path(out) if out else Path(".wheelhouse") / group
    notes = []
    if batch_mb and not 0 < split_mb <= batch_mb:
        split_mb = batch_mb  # every part must fit a batch
    python = pip_python or find_python(python_version)
    if python is None:
        python = sys.executable
        notes.append(f"no Python {python_version} interpreter found: environment markers were evaluated for "
                     f"Python {sys.version_info.major}.{sys.version_info.minor} (pass --pip-python)")
        print("warning: " + notes[-1], file=sys.stderr)

    work = Path(tempfile.mkdtemp(prefix=f"wheelhouse-{group}-"))
    try:
        report, built = resolve(python, requirements, python_version, tags, work)
        sel = select(report, requirements, host, lean, target_environment(python_version, tags))
        for h in sel["host"]:
            if h["host"] and h["host"] != h["resolved"]:
                notes.append(f"{h['name']}: the group resolves {h['resolved']}, the host has {h['host']} (host's kept)")
        manifest = {
            "schema": 1, "group": group, "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "target": {"python_version": python_version, "implementation": "cp", "platforms": tags},
            "resolver": {"python": python, "pip": report.get("pip_version")},
            "requirements": requirements, "constraints": str(constraints) if constraints else None,
            "exclude": str(exclude) if exclude else None,
            "host_excluded": sel["host"], "lean_excluded": sel["lean"], "pruned": sel["pruned"],
            "built_from_sdist": built, "split_bytes": int(split_mb * MiB), "batch_bytes": int(batch_mb * MiB),
            "batches": [], "notes": notes, "files": [], "total_bytes": 0,
        }
        pins = [f"{sel['items'][n]['metadata']['name']}=={sel['items'][n]['metadata']['version']}" for n in sel["kept"]]
        if dry_run:
            manifest["files"] = [{"project": canon(p.split("==")[0]), "version": p.split("==")[1],
                                  "url": sel["items"][canon(p.split("==")[0])]["download_info"]["url"]} for p in pins]
            return manifest
        stage = out.with_name(out.name + ".tmp")
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        try:
            manifest["files"] = download(python, sel, pins, work, python_version, tags, stage, manifest["split_bytes"])
            manifest["total_bytes"] = sum(e["size"] for e in manifest["files"])
            if batch_mb:
                manifest["batches"] = arrange(stage, manifest["files"], manifest["batch_bytes"])
            write_manifest(stage, manifest)
            shutil.rmtree(out, ignore_errors=True)
            stage.rename(out)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rebatch(directory, batch_mb: float) -> dict:
    """Lay an existing wheelhouse out again in batches of at most batch_mb MiB (parts re-split to
    fit), every file verified on the way, without downloading anything: for when the checkout that
    travels beside a batch has grown."""
    if not batch_mb > 0:
        raise ValueError(f"--batch-mb must be above 0, got {batch_mb}")
    directory = Path(directory).resolve()
    manifest = load_manifest(directory)
    part_bytes = int(batch_mb * MiB)
    stage, old = (directory.with_name(directory.name + suffix) for suffix in (".tmp", ".old"))
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory(prefix="wheelhouse-rebatch-") as tmp:
            files = []
            for entry in manifest["files"]:
                wheel = stage / entry["file"]
                shutil.copyfile(assemble(directory, entry, Path(tmp)), wheel)  # sha256-checked, parts too
                Path(tmp, entry["file"]).unlink(missing_ok=True)
                info = {k: v for k, v in entry.items() if k not in ("file", "size", "sha256", "parts", "dir")}
                files.append(add_file(wheel, part_bytes, **info))
                if files[-1]["sha256"] != entry["sha256"]:
                    raise ValueError(f"{entry['file']}: the re-laid copy's sha256 differs from the manifest's")
        manifest.update(files=files, split_bytes=part_bytes, batch_bytes=part_bytes,
                        batches=arrange(stage, files, part_bytes))
        write_manifest(stage, manifest)
        # swap by renames, so that no moment leaves neither copy (the wheels cannot be fetched again offline)
        shutil.rmtree(old, ignore_errors=True)
        directory.rename(old)
        try:
            stage.rename(directory)
        except BaseException:
            old.rename(directory)
            raise
        shutil.rmtree(old)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return manifest


# --- install ------------------------------------------------------------------------------------

SITECUSTOMIZE = """# written by rollout_bench.host.wheelhouse install --pth: this directory is a PYTHONPATH entry, not a
# site directory, so Python would skip its .pth files (nvidia-cutlass-dsl's puts its `cutlass` package on sys.path)
import os, site
site.addsitedir(os.path.dirname(os.path.abspath(__file__)))
"""


def process_pth(target) -> bool:
    """Make the .pth files of a --target install take effect when `target` is first on PYTHONPATH: a sitecustomize
    that adds it as a site directory (Python imports the first sitecustomize on sys.path). False: no .pth there."""
    target = Path(target)
    if not any(target.glob("*.pth")):
        return False
    assert not (target / "sitecustomize.py").exists() or "wheelhouse install --pth" in (
        target / "sitecustomize.py").read_text(), f"{target}/sitecustomize.py is a package's own"
    (target / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return True


def install(directory, target, *, python: str = sys.executable, compile_pyc: bool = False) -> list[str]:
    """Reassemble and verify every wheel of the manifest, then pip-install them offline into target."""
    directory = Path(directory)
    manifest = load_manifest(directory)
    stage = Path(tempfile.mkdtemp(prefix="wheelhouse-install-"))
    try:
        wheels = [str(assemble(directory, e, stage)) for e in manifest["files"]]
        # the host's own pip config (constraints, indexes) must not change what gets installed
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
        cmd = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir", "--upgrade",
               "--target", str(target), *([] if compile_pyc else ["--no-compile"]), *wheels]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise RuntimeError(f"pip install failed:\n{tail(res.stdout + res.stderr)}")
        return [Path(w).name for w in wheels]
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# --- CLI ----------------------------------------------------------------------------------------

def _default_exclude(group: str, envs: Path = ENVS) -> Path | None:
    path = Path(envs) / f"{group}.lean.txt"
    return path if path.exists() else None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.host.wheelhouse", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download a group's wheel closure for an offline host")
    b.add_argument("group", help=f"one of {', '.join(GROUPS)} (envs/GROUP.yaml)")
    b.add_argument("--requirements", help="a requirements file instead of the group's pins")
    b.add_argument("--python-version", default="3.12")
    b.add_argument("--platform", action="append", dest="platforms",
                   help="manylinux_x86_64 (default: manylinux_2_17..2_39, 2014, 2010, 1) or an exact tag; repeatable")
    b.add_argument("--constraints", help="the host's packages (pip list --format=freeze); left out of the wheelhouse")
    b.add_argument("--exclude", help="names to leave out (default: envs/GROUP.lean.txt when it exists)")
    b.add_argument("--no-exclude", action="store_true", help="ignore envs/GROUP.lean.txt")
    b.add_argument("--split-mb", type=float, default=DEFAULT_SPLIT_MB,
                   help="split files above this many MiB into .partNNN (0: never)")
    b.add_argument("--batch-mb", type=float, default=0,
                   help="lay files out in batchNNN/ folders of at most this many MiB, each small enough to "
                        "carry to the host on its own (0: one flat folder)")
    b.add_argument("--out", help="output folder (default .wheelhouse/GROUP; keep it git-ignored)")
    b.add_argument("--pip-python", help="interpreter that runs the resolver (default: a Python of --python-version)")
    b.add_argument("--dry-run", action="store_true", help="resolve and select only; print what would be downloaded")
    i = sub.add_parser("install", help="reassemble, verify and pip-install a wheelhouse offline")
    i.add_argument("directory")
    i.add_argument("--target", required=True)
    i.add_argument("--python", default=sys.executable)
    i.add_argument("--compile", action="store_true", help="byte-compile (default: --no-compile)")
    i.add_argument("--pth", action="store_true",
                   help="make the target's .pth files work from PYTHONPATH (a sitecustomize; the fa4 group's "
                        "nvidia-cutlass-dsl needs it)")
    rb = sub.add_parser("rebatch", help="lay a built wheelhouse out in smaller batches (no download)")
    rb.add_argument("directory")
    rb.add_argument("--batch-mb", type=float, required=True, help="at most this many MiB a batch (and a part)")
    r = sub.add_parser("requirements", help="print (or --write) envs/GROUP.requirements.txt from envs/GROUP.yaml")
    r.add_argument("group", nargs="?", help="default: every group")
    r.add_argument("--write", action="store_true")
    return ap


def _requirements(args) -> None:
    for g in [args.group] if args.group else GROUPS:
        text = render_requirements(g)
        if args.write:
            (ENVS / f"{g}.requirements.txt").write_text(text)
            print(f"wrote envs/{g}.requirements.txt")
        else:
            print(text, end="")


def _rebatch(args) -> None:
    m = rebatch(args.directory, args.batch_mb)
    print(f"{len(m['files'])} wheels in {args.directory}: " +
          ", ".join(f"batch{i:03d} {size / MiB:.1f} MiB" for i, size in enumerate(m["batches"])))


def _install(args) -> None:
    names = install(args.directory, args.target, python=args.python, compile_pyc=args.compile)
    if args.pth and process_pth(args.target):
        print(f"{args.target}/sitecustomize.py: its .pth files take effect from PYTHONPATH")
    print(f"installed {len(names)} wheels into {args.target}; use it with PYTHONPATH={args.target}")


def _build(args) -> None:
    requirements = read_name_list(args.requirements) if args.requirements else None
    exclude = None if args.no_exclude else (args.exclude or _default_exclude(args.group))
    m = build(args.group, requirements=requirements, python_version=args.python_version,
              platforms=tuple(args.platforms or ("manylinux_x86_64",)), constraints=args.constraints,
              exclude=exclude, split_mb=args.split_mb, batch_mb=args.batch_mb, out=args.out, pip_python=args.pip_python,
              dry_run=args.dry_run)
    for n in m["notes"]:
        print("note: " + n, file=sys.stderr)
    print(f"host packages left out: {len(m['host_excluded'])}; lean-excluded: {', '.join(m['lean_excluded']) or '-'}; "
          f"pruned (needed only by those): {', '.join(m['pruned']) or '-'}")
    if m["built_from_sdist"]:
        print("built from sdist: " + ", ".join(b["file"] for b in m["built_from_sdist"]))
    if args.dry_run:
        for f in m["files"]:
            print(f"  {f['project']}=={f['version']}")
        print(f"{len(m['files'])} wheels would be downloaded")
    else:
        split = sum(1 for f in m["files"] if f.get("parts"))
        print(f"{len(m['files'])} wheels, {m['total_bytes'] / MiB:.1f} MiB ({split} split) in "
              f"{args.out or Path('.wheelhouse') / args.group}")
        for i, size in enumerate(m["batches"]):
            print(f"  batch{i:03d}/  {size / MiB:.1f} MiB")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    {"requirements": _requirements, "rebatch": _rebatch, "install": _install, "build": _build}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
