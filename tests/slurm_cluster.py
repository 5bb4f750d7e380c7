"""A real one-node Slurm cluster for the tests, started and stopped by the test session itself.

Debian's slurm-wlm 22.05 (slurmctld, slurmd), slurmdbd, MariaDB and munge (.ci/run installs them
and sets BENCH_REQUIRE_SLURM, so the Slurm tests run there and never skip). Everything lives in
one temporary directory: the configuration, the state, the spool, the logs, the accounting
database. Accounting is not optional here: submitit reads every job's state with ``sacct``, and
``sacct`` answers only through slurmdbd ("Slurm accounting storage is disabled" otherwise).

The order matters and each step waits for the one before: munged (on the default socket, which
sacct and sacctmgr use whatever slurm.conf says), MariaDB, slurmdbd, the cluster registered with
``sacctmgr`` (before slurmctld starts, or sacct lists nothing), slurmctld, slurmd, then ``sinfo``
until the node is idle. Stopped in the reverse order, each by its own pid; a daemon that does not
end in 15 s is killed. Nothing is left running, whatever failed on the way.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PARTITION = "bench"
CLUSTER = "benchtest"
DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "mariadbd", "munged", "mariadb-install-db", "sacctmgr")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def missing() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    absent = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install slurm-wlm slurmdbd mariadb-server munge)"
    if os.geteuid() != 0:
        return "the one-node cluster's daemons are started as root, and this is not root"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class Cluster:
    """A running cluster: ``env`` is what a process needs to talk to it (SLURM_CONF)."""

    root: Path
    node: str
    cpus: int
    env: dict[str, str]
    partition: str = PARTITION
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *command: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stdout}{done.stderr}")
        return done.stdout

    def jobs(self, *names: str, settle_s: float = 60) -> list[dict[str, str]]:
        """sacct's view of every job (allocations, not steps), or of the jobs with these names:
        JobID, JobName, State, ExitCode, Elapsed, Timelimit. slurmctld hands job records to
        slurmdbd asynchronously: a job that left the queue can be missing from sacct, or still
        RUNNING there, for a few seconds; those are waited for up to ``settle_s``."""
        fields = ["JobID", "JobName", "State", "ExitCode", "Elapsed", "Timelimit"]
        deadline = time.monotonic() + settle_s
        while True:
            out = self.run("sacct", "-X", "--parsable2", "--noheader", "-a", "-o", ",".join(fields))
            rows = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines() if line]
            queued = set(self.queue())
            settled = all(
                r["JobID"] in queued or r["State"] not in ("PENDING", "RUNNING", "COMPLETING") for r in rows
            ) and all(any(r["JobName"] == n for r in rows) for n in names)
            if settled or time.monotonic() > deadline:
                return [r for r in rows if not names or r["JobName"] in names]
            time.sleep(0.5)

    def queue(self) -> list[str]:
        """The ids of jobs still pending or running."""
        return self.run("squeue", "--noheader", "-o", "%i").split()

    def log(self, daemon: str) -> str:
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _wait(what: str, ready, timeout: float, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {d}\n{cluster.log(d)[-1500:]}" for d in ("slurmctld", "slurmd", "slurmdbd", "munged")
            )
            mariadb = cluster.root / "run" / "mariadb.log"
            if mariadb.exists():
                logs += f"\n--- mariadb\n{mariadb.read_text(errors='replace')[-1500:]}"
            raise RuntimeError(f"the test cluster: {what} not ready after {timeout} s\n{logs}")
        time.sleep(0.2)


def _munge_answers() -> bool:
    if not MUNGE_SOCKET.exists():
        return False
    credential = subprocess.run(["munge", "-n"], capture_output=True)
    if credential.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=credential.stdout, capture_output=True).returncode == 0


def _pid_of(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop(pid: int, grace_s: float = 15) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if (
            Path(f"/proc/{pid}/stat").exists()
            and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        ):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _cancel_everything(cluster: Cluster) -> None:
    """Every job still queued or running is cancelled, and waited for (its processes are gone
    when it leaves the queue), before the daemons stop."""
    try:
        cluster.run("scancel", "--full", "--user", "root", check=False, timeout=20)
        deadline = time.monotonic() + 60
        while cluster.queue() and time.monotonic() < deadline:
            time.sleep(0.5)
    except (subprocess.SubprocessError, RuntimeError, OSError):
        pass


def _write(path: Path, lines: list[str], mode: int = 0o644) -> None:
    path.write_text("\n".join(lines) + "\n")
    path.chmod(mode)


@contextmanager
def one_node_cluster() -> Iterator[Cluster]:
    """Start the cluster in a new temporary directory and, on exit, stop every daemon it started
    and remove the directory. The directory is readable by others (MariaDB runs as mysql), so
    not under pytest's own temporary directories (mode 700)."""
    root = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    root.chmod(0o755)
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    for sub in ("state", "spool", "log", "run", "db"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Cluster(root=root, node=node, cpus=cpus, env=env)
    children: list[subprocess.Popen] = []  # the daemons run in the foreground, as our children
    try:
        # munge: the default socket (sacct/sacctmgr use it to reach slurmdbd); a machine's own
        # munged, if one answers there, is used as it is
        if not _munge_answers():
            MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
            key = root / "munge.key"
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
            children.append(
                subprocess.Popen(
                    [
                        _binary("munged"),
                        "-F",
                        "--force",
                        f"--key-file={key}",
                        f"--socket={MUNGE_SOCKET}",
                        f"--pid-file={root / 'run' / 'munged.pid'}",
                        f"--log-file={root / 'log' / 'munged.log'}",
                        f"--seed-file={root / 'run' / 'munged.seed'}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            )
            _wait("munged", _munge_answers, 20, cluster)

        # MariaDB for slurmdbd's accounting, on its own port and socket
        db_port, db_socket = _free_port(), root / "run" / "mysql.sock"
        subprocess.run(
            [_binary("mariadb-install-db"), "--user=mysql", f"--datadir={root / 'db'}",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        shutil.chown(root / "run", "mysql")
        children.append(
            subprocess.Popen(
                [
                    _binary("mariadbd"),
                    "--user=mysql",
                    f"--datadir={root / 'db'}",
                    f"--socket={db_socket}",
                    f"--port={db_port}",
                    "--bind-address=127.0.0.1",
                    f"--pid-file={root / 'run' / 'mariadb.pid'}",
                    "--skip-name-resolve",
                    f"--log-error={root / 'run' / 'mariadb.log'}",  # run/ is mysql's, log/ root's
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        )
        password = os.urandom(8).hex()
        sql = (
            f"CREATE USER 'slurm'@'localhost' IDENTIFIED BY '{password}';"
            f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )

        def db_ready() -> bool:
            return (
                db_socket.exists()
                and subprocess.run(
                    ["mariadb", f"--socket={db_socket}", "-uroot", "-e", "SELECT 1"], capture_output=True
                ).returncode
                == 0
            )

        _wait("MariaDB", db_ready, 60, cluster)
        subprocess.run(
            ["mariadb", f"--socket={db_socket}", "-uroot", "-e", sql], check=True, capture_output=True
        )

        ports = {"ctld": _free_port(), "slurmd": _free_port(), "dbd": _free_port()}
        log, run = root / "log", root / "run"
        _write(
            root / "slurmdbd.conf",  # slurmdbd reads it from the directory of $SLURM_CONF
            [
                "AuthType=auth/munge",
                "DbdHost=localhost",
                f"DbdPort={ports['dbd']}",
                "SlurmUser=root",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={db_port}",
                "StorageUser=slurm",
                f"StoragePass={password}",
                "StorageLoc=slurm_acct_db",
                f"LogFile={log / 'slurmdbd.log'}",
                f"PidFile={run / 'slurmdbd.pid'}",
            ],
            mode=0o600,
        )
        _write(
            conf,
            [
                f"ClusterName={CLUSTER}",
                f"SlurmctldHost={node}(127.0.0.1)",  # whether or not the host name resolves
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"SlurmctldPort={ports['ctld']}",
                f"SlurmdPort={ports['slurmd']}",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={run / 'slurmctld.pid'}",
                f"SlurmdPidFile={run / 'slurmd.pid'}",
                f"SlurmctldLogFile={log / 'slurmctld.log'}",
                f"SlurmdLogFile={log / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={ports['dbd']}",
                "ReturnToService=2",
                "MpiDefault=none",
                "SchedulerType=sched/backfill",
                "KillWait=30",
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            ],
        )
        children.append(
            subprocess.Popen(
                [_binary("slurmdbd"), "-D"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
            )
        )

        def dbd_ready() -> bool:
            return (
                subprocess.run(["sacctmgr", "-n", "list", "cluster"], env=env, capture_output=True).returncode
                == 0
            )

        _wait("slurmdbd", dbd_ready, 60, cluster)
        cluster.run("sacctmgr", "-i", "add", "cluster", CLUSTER)
        children.append(
            subprocess.Popen(
                [_binary("slurmctld"), "-D", "-i"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )
        children.append(
            subprocess.Popen(
                [_binary("slurmd"), "-D", "-N", node],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )

        def idle() -> bool:
            out = subprocess.run(["sinfo", "--noheader", "-o", "%t"], env=env, capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait("the node", idle, 60, cluster)
        cluster.pids = {Path(p.args[0]).name: p.pid for p in children}
        yield cluster
    finally:
        if any(Path(p.args[0]).name == "slurmctld" and p.poll() is None for p in children):
            _cancel_everything(cluster)
        for child in reversed(children):  # slurmd, slurmctld, slurmdbd, MariaDB, munged
            try:  # each one, whatever the one before did
                _stop(child.pid)
                child.wait(timeout=5)
            except (OSError, subprocess.SubprocessError):
                pass
        shutil.rmtree(root, ignore_errors=True)
