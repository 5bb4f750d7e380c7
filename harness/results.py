"""Result files: raw samples written as the run goes, a summary derived from them.

Layout of one run (``results/<regime-name>/<run-id>/``)::

    regime.json                  schema_version, resolved regime, its fingerprint, workloads with hashes
    environment.json             harness/engine/Python versions, CPU/GPU
    arms/<arm>/launch.json       the exact argv and env the server was started with
    arms/<arm>/server.log        the engine's own log
    arms/<arm>/warmup.jsonl      warm-up requests (kept apart; never in metrics)
    arms/<arm>/samples.jsonl     one raw RequestRecord per measured request
    arms/<arm>/noise_floor.jsonl baseline only, with exactness.noise_floor: the same windows again
    arms/<arm>/windows.jsonl     one line per measured window: duration, counter scrapes
    arms/<arm>/status.json       running | ok | failed | interrupted, with the error
    arms/<arm>.attempt-N/        an incomplete arm's files, moved aside by ``bench run --resume``
    run.lock                     pid of the bench process writing the run (while it runs)
    summary.json                 metrics derived from all of the above (``bench`` rewrites it)

JSON files are replaced atomically (temp file + ``os.replace``); JSONL files are appended one
flushed line at a time, and a torn last line (a crash mid-write) is skipped on reading. A run
directory is created exclusively and never overwritten.

Schema history (``schema_version``):
    1 - first version.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.errors import UserError

SCHEMA_VERSION = 1


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temp file and ``os.replace``: readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn final line from an interrupted write
    return rows


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: not found; is this a run directory?") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class RunDir:
    """Paths of one run directory; created exclusively so no run is ever overwritten."""

    def __init__(self, root: Path):
        self.root = root

    @classmethod
    def create(cls, results_dir: Path, regime_name: str) -> RunDir:
        parent = results_dir / regime_name
        parent.mkdir(parents=True, exist_ok=True)
        root = parent / new_run_id()
        root.mkdir()  # raises if it exists: never write into someone else's run
        return cls(root)

    def arm_dir(self, arm: str) -> Path:
        return self.root / "arms" / arm

    def samples(self, arm: str) -> Path:
        return self.arm_dir(arm) / "samples.jsonl"

    def warmup(self, arm: str) -> Path:
        return self.arm_dir(arm) / "warmup.jsonl"

    def noise_floor(self, arm: str) -> Path:
        return self.arm_dir(arm) / "noise_floor.jsonl"

    def windows(self, arm: str) -> Path:
        return self.arm_dir(arm) / "windows.jsonl"

    def status(self, arm: str) -> Path:
        return self.arm_dir(arm) / "status.json"

    def server_log(self, arm: str) -> Path:
        return self.arm_dir(arm) / "server.log"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def arm_status(self, arm: str) -> str | None:
        path = self.status(arm)
        return read_json(path).get("status") if path.exists() else None

    def set_aside(self, arm: str) -> Path | None:
        """Move an incomplete arm's files to ``arms/<arm>.attempt-N`` before it runs again: nothing
        already measured is deleted, and the summary only reads ``arms/<arm>``."""
        source = self.arm_dir(arm)
        if not source.exists():
            return None
        attempt = 1
        while (target := source.with_name(f"{arm}.attempt-{attempt}")).exists():
            attempt += 1
        os.replace(source, target)
        return target

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One writer per run directory: a second ``bench run`` into it is refused while the first
        lives; a lock left by a dead process is taken over."""
        path = self.root / "run.lock"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = path.read_text().strip()
            if holder.isdigit() and _pid_alive(int(holder)):
                raise UserError(f"{self.root} is being written by another bench process (pid {holder})") from None
            path.unlink(missing_ok=True)  # stale: its writer is gone
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_run_record(run: RunDir) -> dict[str, Any]:
    """A run's ``regime.json``, refusing schema versions this harness does not know."""
    record = read_json(run.root / "regime.json")
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UserError(
            f"{run.root / 'regime.json'}: schema_version {version!r} is not supported by this harness "
            f"(it reads version {SCHEMA_VERSION}); use the harness version that wrote the run"
        )
    return record
