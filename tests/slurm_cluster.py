"""A single-node SLURM cluster in a scratch directory, for the tests: munged, MariaDB, slurmdbd,
slurmctld and slurmd on localhost, from Debian's packages (slurmctld, slurmd, slurmdbd 22.05, munge,
mariadb-server), CPUs only. Every config, key, socket, log and database lives under the directory;
nothing in /etc is read or changed, and clients find the cluster through SLURM_CONF.

    python -m tests.slurm_cluster DIR    # start one by hand; Ctrl-C stops it

The node declares two `gpu` GRES backed by links to /dev/null, so that SLURM grants GPUs and exports
CUDA_VISIBLE_DEVICES to a job; no CUDA device is behind them.

Snakemake's SLURM job step runs the rule under `srun` with every SLURM_* variable but the job's ids
removed from its environment, SLURM_CONF included (plugin 2.8.0 / jobstep 0.6.1). A site's srun finds
/etc/slurm/slurm.conf without it; this cluster's does not, so `bin/srun`, first on the clients' PATH,
puts SLURM_CONF back.
"""
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rollout_bench.host.gpu_lease import free_port

DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sacct", "sacctmgr", "sinfo", "scontrol", "scancel", "mariadb")
PACKAGES = "slurmctld slurmd slurm-client slurmdbd munge mariadb-server"  # as .ci/run installs them
NAME = "rbtest"
FAKE_GPUS = 2
# config_overrides makes slurmd take this node description as given: memory is not a consumable here
# (CR_CPU), so the profile's per-rule requests, sized for GPU hosts, are accepted on a small machine
REAL_MEMORY_MB = 262144


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    absent = [b for b in DAEMONS + CLIENTS if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if absent:
        return f"SLURM packages not installed (no {', '.join(absent)}): apt-get install -y {PACKAGES}"
    if os.geteuid() != 0:
        return "a local SLURM cluster needs root (slurmd launches jobs as their user)"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class Cluster:
    root: Path
    cpus: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    procs: list = field(default_factory=list)  # (name, Popen), in start order

    @property
    def node(self) -> str:
        return socket.gethostname().split(".")[0]

    @property
    def conf(self) -> Path:
        return self.root / "etc/slurm.conf"

    def env(self, base=None) -> dict:
        """The environment of a client of this cluster (sbatch, sacct, snakemake's executor)."""
        base = os.environ if base is None else base
        path = f"{self.root / 'bin'}{os.pathsep}{base.get('PATH', os.environ.get('PATH', ''))}"
        return {**base, "SLURM_CONF": str(self.conf), "PATH": path}

    def run(self, *cmd, check=True, timeout=60) -> subprocess.CompletedProcess:
        r = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}\n{self.logs()}")
        return r

    def logs(self, tail: int = 15) -> str:
        out = []
        for p in sorted((self.root / "log").glob("*.*")):
            lines = p.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {p.name}\n" + "\n".join(lines))
        return "\n".join(out)

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> "Cluster":
        for d in ("etc", "log", "run", "munge", "db", "ctld", "spool", "dev", "bin"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        srun = self.root / "bin/srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF="{self.conf}" exec {shutil.which("srun")} "$@"\n')
        srun.chmod(0o755)
        ports = {k: free_port() for k in ("mysql", "dbd", "ctld", "slurmd")}
        self._munge()
        self._mariadb(ports["mysql"])
        self._write_confs(ports)
        self._spawn("slurmdbd", _exe("slurmdbd"), "-D")
        self._wait("slurmdbd", lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0)
        # the default account of the job's user, as a site's accounting would have it
        self.run("sacctmgr", "-i", "add", "cluster", NAME)
        self.run("sacctmgr", "-i", "add", "account", "bench", f"cluster={NAME}")
        self.run("sacctmgr", "-i", "add", "user", "root", "account=bench", f"cluster={NAME}")
        self._spawn("slurmctld", _exe("slurmctld"), "-D", "-i")
        self._spawn("slurmd", _exe("slurmd"), "-D", "-N", self.node)
        self._wait("slurmd", lambda: self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle")
        return self

    def _munge(self):
        key = self.root / "munge/munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        m = self.root / "munge"
        self._spawn("munged", _exe("munged"), "-F", "--force", f"--key-file={key}", f"--socket={m}/munge.socket",
                    f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed",
                    f"--log-file={self.root}/log/munged.log")
        self._wait("munged", lambda: (m / "munge.socket").exists())

    def _mariadb(self, port: int):
        data, sock = self.root / "db", self.root / "run/mysql.sock"
        subprocess.run([_exe("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=socket", "--skip-test-db"],
                       check=True, capture_output=True, timeout=300)
        self._spawn("mariadbd", _exe("mariadbd"), "--no-defaults", f"--datadir={data}", f"--socket={sock}",
                    f"--port={port}", "--bind-address=127.0.0.1", "--user=root", "--innodb-buffer-pool-size=64M",
                    "--innodb-lock-wait-timeout=900", f"--log-error={self.root}/log/mariadb.log",
                    f"--pid-file={self.root}/run/mariadb.pid")
        self._wait("mariadbd", lambda: sock.exists())
        sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        subprocess.run([_exe("mariadb"), "--no-defaults", f"--socket={sock}", "-u", "root", "-e", sql],
                       check=True, capture_output=True, timeout=60)

    def _write_confs(self, ports: dict):
        r, munge_sock = self.root, self.root / "munge/munge.socket"
        gpus = [r / f"dev/nvidia{i}" for i in range(FAKE_GPUS)]
        for g in gpus:  # slurmd wants character devices; any will do, no job opens them
            g.symlink_to("/dev/null")
        (r / "etc/slurm.conf").write_text(f"""\
ClusterName={NAME}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ports['ctld']}
SlurmdPort={ports['slurmd']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_sock}
CredType=cred/munge
StateSaveLocation={r}/ctld
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports['dbd']}
# the munge socket that clients and slurmctld use towards slurmdbd (not the default one)
AccountingStoragePass={munge_sock}
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
GresTypes=gpu
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={REAL_MEMORY_MB} Gres=gpu:{FAKE_GPUS} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (r / "etc/gres.conf").write_text(f"Name=gpu File={r}/dev/nvidia[0-{FAKE_GPUS - 1}]\n")
        dbd = r / "etc/slurmdbd.conf"
        dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={munge_sock}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports['dbd']}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports['mysql']}
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile={r}/run/slurmdbd.pid
LogFile={r}/log/slurmdbd.log
""")
        dbd.chmod(0o600)  # slurmdbd refuses a config others can read (it holds the DB password)

    def _spawn(self, name: str, *cmd):
        log = open(self.root / f"log/{name}.out", "ab")
        # own session: stop() signals each daemon by its pid, never by name
        p = subprocess.Popen(cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, p))

    def _wait(self, name: str, ready, timeout: float = 180):
        proc = dict(self.procs).get(name)
        deadline = time.monotonic() + timeout
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}) while starting\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout:.0f}s\n{self.logs()}")
            time.sleep(0.5)

    # -- stop ----------------------------------------------------------------------------------

    def stop(self):
        """Cancel what is left in the queue, then stop the daemons, last started first."""
        if any(n == "slurmctld" and p.poll() is None for n, p in self.procs):
            self.run("scancel", "--full", "--user=root", check=False)
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        self.procs.clear()


def main(argv=None) -> int:
    root = Path((argv or sys.argv[1:])[0]).resolve()
    c = Cluster(root).start()
    print(f"export SLURM_CONF={c.conf}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
