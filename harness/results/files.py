"""Result files: raw samples written as the run goes, a summary derived from them.

Layout of one run (``results/<regime-name>/<run-id>/``)::

    regime.json                  schema_version, resolved regime, its fingerprint, workloads with hashes
    environment.json             harness/engine/Python versions, CPU/GPU
    arms/<arm>/launch.json       the exact argv and env the server was started with
    arms/<arm>/server.log        the engine's own log (server.start-N.log: its N-th start-up)
    arms/<arm>/warmup.jsonl      warm-up requests (kept apart; never in metrics)
    arms/<arm>/samples.jsonl     one RequestRecord per measured request
    arms/<arm>/noise_floor.jsonl baseline only, with exactness.noise_floor: the same windows again
    arms/<arm>/margins.jsonl     baseline only, greedy exactness over 2+ start-ups: the logprobs of the
                                 prompts an output diverged on, asked on its later start-ups
    arms/<arm>/distribution.jsonl temperature > 0: N seeded samples per prompt (distribution check)
    arms/<arm>/workload_pass.jsonl baseline only, verdict.covariate: every prompt of each workload's pool once
    workload_pass.json           what the workload pass did: measured, copied from the cache, or skipped (why)
    arms/<arm>/windows.jsonl     one line per measured window: duration, counter scrapes
    arms/<arm>/<file>.jsonl.sums one digest per line of <file>.jsonl, appended as each line is written
    arms/<arm>/status.json       an ArmStatus: running | ok | failed | interrupted, with the error
    arms/<arm>.attempt-N/        an incomplete arm's files, moved aside by ``bench run --resume``
    run.lock                     flock of the bench process writing the run, with its pid (while it runs)
    summary.json                 metrics derived from all of the above (``bench`` rewrites it)

JSON files are replaced atomically (temp file + ``os.replace``); JSONL files are appended one
flushed line at a time, each line's digest appended to ``<file>.sums`` right after it (``check_lines``
names any line missing, edited or added since). On reading, a torn last line (a crash mid-write: no
newline after it) is skipped and reported by every command that reads the run; any other bad line is
an error. A run
directory is created exclusively and never overwritten. The record types are ``records.py``'s
models; the summary is ``model.py``'s ``Summary``.

Every file of a run is of the run's ``schema_version`` (in ``regime.json``; ``summary.json`` holds its
own). Older files are read through ``harness.results.migrations``, whose steps are the schema history.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.core.errors import UserError
from harness.results import migrations
from harness.results.migrations import run_record as run_record_steps
from harness.results.migrations import status as status_steps
from harness.results.records import ArmStatus, RequestRecord, RunRecord

# The version this harness writes, and the versions it reads (the steps of harness.results.migrations).
SCHEMA_VERSION = 16
READABLE_VERSIONS = tuple(range(1, SCHEMA_VERSION + 1))
RecordT = TypeVar("RecordT", bound=BaseModel | RequestRecord)


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temp file and ``os.replace``: readers never see a half-written file. The temp
    file is created new (``O_EXCL``, a random name, never through a link): nothing someone
    placed at that name beforehand is written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


SUMS_SUFFIX = ".sums"
# a sums file's first line where its JSONL file had lines before any digest (a run written before
# lines were counted, continued since): that many lines cannot be checked
UNCHECKED = "unchecked "


def sums_path(path: Path) -> Path:
    """Where a JSONL file's line digests are kept: ``samples.jsonl`` -> ``samples.jsonl.sums``."""
    return path.with_name(path.name + SUMS_SUFFIX)


def line_digest(line: str) -> str:
    """A line's digest as its sums file holds it (64 bits: against damage and edits, not forgery)."""
    return hashlib.sha256(line.encode()).hexdigest()[:16]


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """One line, on disk before it returns, then its digest. The digest comes after: a crash between
    the two leaves a line without a digest (read: a crash's), never a digest without its line. The
    digest is not fsynced: a process crash keeps it (the page cache), and a per-request second fsync
    would sit in the client's event loop; a power cut may leave trailing lines uncounted (named)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True)
    sums = sums_path(path)
    if not sums.exists() and path.exists():
        _adopt(path)
    with open(path, "a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    with open(sums, "a") as handle:
        handle.write(line_digest(line) + "\n")


def write_jsonl(path: Path, records: list[dict[str, Any]], unchecked: int = 0) -> None:
    """A JSONL file of ``records`` at once, with its sums (``unchecked``: how many of its first lines
    were written before lines were counted, so copying them keeps that said)."""
    lines = [json.dumps(record, sort_keys=True) for record in records]
    with open(path, "w") as handle:
        handle.writelines(line + "\n" for line in lines)
        handle.flush()
        os.fsync(handle.fileno())
    head = f"{UNCHECKED}{unchecked}\n" if unchecked else ""
    write_text_atomic(sums_path(path), head + "".join(line_digest(line) + "\n" for line in lines))


def _adopt(path: Path) -> None:
    """A JSONL file written before lines were counted, about to be appended to: its lines as they are
    now are digested, and said to be unchecked (the sums file's first line), so the notice stays."""
    lines = [line for _, line in _complete_lines(_read_utf8(path))]
    digests = "".join(line_digest(line) + "\n" for line in lines)
    write_text_atomic(sums_path(path), f"{UNCHECKED}{len(lines)}\n{digests}")


def _complete_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every non-blank line read as a record: each one ended by a newline, and
    a last one without if it is whole JSON (read as ``read_jsonl`` reads it)."""
    pieces = text.split("\n")
    found = [(number, line) for number, line in enumerate(pieces[:-1], start=1) if line.strip()]
    last = pieces[-1]
    if last.strip() and _whole(last):
        found.append((len(pieces), last))
    return found


def _whole(line: str) -> bool:
    try:
        json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError:
        return False
    return True


def _numbers(numbers: list[int]) -> str:
    """Line numbers as ranges: ``line 5``, ``lines 3-4, 9``."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"line{'s' if len(numbers) > 1 else ''} {text}"


@dataclass(frozen=True)
class LineCheck:
    """A JSONL file against its sums (``check_lines``)."""

    unchecked: int = 0  # lines written before lines were counted (no sums, or its first line says so)
    damage: tuple[str, ...] = ()  # lines missing, edited or added since written, each said with its numbers
    uncounted: str | None = None  # trailing whole lines without a digest: a crash (or a power cut) between
    torn: str | None = None  # a last line cut short (no newline, not whole JSON)

    def problems(self, finished: bool) -> list[str]:
        """What is wrong with the file: its damage, and for an arm that finished (no crash could have
        left them) its uncounted and torn lines too."""
        tail = [self.uncounted, self.torn] if finished else []
        return [*self.damage, *filter(None, tail)]


def check_lines(path: Path) -> LineCheck:
    """A JSONL file's lines against the digests written with them (``append_jsonl``): each line
    missing (numbered as written), edited or added (numbered as found) named. No sums file: the
    file was written before lines were counted (an older run), all its lines unchecked."""
    sums = sums_path(path)
    text = _read_utf8(path) if path.exists() else ""
    found = _complete_lines(text)
    torn = None
    pieces = text.split("\n")
    if pieces[-1].strip() and not _whole(pieces[-1]):
        torn = f"line {len(pieces)} torn (cut short)"
    if not sums.exists():  # nothing to check against: a torn last line stays the crash's note
        return LineCheck(unchecked=len(found))
    # a digest cut short (no newline) is none: its line reads as uncounted
    entries = _read_utf8(sums).split("\n")[:-1]
    unchecked = 0
    if entries and entries[0].startswith(UNCHECKED):
        head = entries.pop(0).removeprefix(UNCHECKED)
        unchecked = int(head) if head.isdigit() else 0
    digests = [line_digest(line) for _, line in found]
    damage: list[str] = []
    uncounted = None
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, entries, digests, autojunk=False).get_opcodes():
        edited = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        if edited:
            damage.append(f"{_numbers([n for n, _ in found[j1 : j1 + edited]])} edited since written")
        if tag in ("delete", "replace") and i2 - i1 > edited:
            numbers = list(range(i1 + edited + 1, i2 + 1))
            damage.append(f"{_numbers(numbers)} of {len(entries)} written missing")
        if tag in ("insert", "replace") and j2 - j1 > edited:
            added = _numbers([n for n, _ in found[j1 + edited : j2]])
            if i2 == len(entries) and j2 == len(digests) and tag == "insert":
                uncounted = f"{added} without a digest (written as the run was cut, or added since)"
            else:
                damage.append(f"{added} not written by the harness (added since)")
    return LineCheck(unchecked=unchecked, damage=tuple(damage), uncounted=uncounted, torn=torn)


class UnreadLines:
    """Lines of JSONL files that were not read: only a torn LAST line (a write cut by a crash) is
    ever skipped, and every reader of a run says how many, of which file."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def add(self, path: Path, number: int) -> None:
        self.notes.append(f"{path}: line {number} not read (a torn last line: a write cut by a crash)")

    def damaged(self, path: Path, problems: list[str], consequence: str) -> None:
        """Lines of ``path`` missing, edited, added or torn since written (``check_lines``): this
        note replaces a torn last line's, which a finished arm's file cannot owe to a crash."""
        crash = f"{path}: line "
        self.notes = [n for n in self.notes if not (n.startswith(crash) and n.endswith("cut by a crash)"))]
        self.notes.append(f"{path}: {'; '.join(problems)}: {consequence}")

    def missing(self, path: Path) -> None:
        """A file a finished arm must have written, missing or empty (deleted, truncated since)."""
        state = "missing" if not path.exists() else "empty"
        self.notes.append(f"{path}: {state}, though its arm finished: its requests are in no figure")


def _no_constant(name: str) -> Any:
    """NaN is no number the harness writes (a time or a count is a number or null): a line holding
    one (``t_done: NaN``: shown as nan, a NOT NULL failure in the history) is corrupt. An infinite
    logprob an engine reported is kept as it was written."""
    if name == "NaN":
        raise json.JSONDecodeError(f"{name} is not a number this harness writes", name, 0)
    return float(name)


def read_jsonl(path: Path, unread: UnreadLines | None = None) -> list[dict[str, Any]]:
    """Every line of a JSONL file; a missing file reads as empty. A line that is not a JSON object
    is an error naming the file and line, except a last line with no newline (a write cut by a
    crash): it is skipped and noted in ``unread``."""
    if not path.exists():
        return []
    text = _read_utf8(path)
    lines = text.split("\n")
    torn_allowed = not text.endswith("\n")  # only then was the last line's write cut short
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            if number == len(lines) and torn_allowed:
                if unread is not None:
                    unread.add(path, number)
                continue
            raise UserError(f"{path}:{number}: not valid JSON ({exc.msg}); the file is corrupt") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{number}: expected a JSON object per line")
        rows.append(row)
    return rows


def read_records(path: Path, model: type[RecordT], unread: UnreadLines | None = None) -> list[RecordT]:
    """A JSONL file's lines as typed records; a line that is not a valid record names its file and line."""
    parse = model.from_json if model is RequestRecord else model.model_validate
    records = []
    for number, row in enumerate(read_jsonl(path, unread), start=1):
        try:
            records.append(parse(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(line)"
            raise UserError(f"{path}: record {number}: {where}: {first['msg']}") from None
    return records


def _read_utf8(path: Path) -> str:
    if not path.is_file():  # a link to /dev/zero read to a MemoryError: a run's files are regular ones
        raise UserError(f"{path}: not a regular file; the run directory is damaged")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None


def read_json(path: Path) -> Any:
    if not path.exists():
        raise UserError(f"{path}: not found; is this a run directory?")
    try:
        return json.loads(_read_utf8(path))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def create_exclusive(root: Path) -> Path:
    """Create a run (or study) directory; raises if it exists: never write into someone else's."""
    root.parent.mkdir(parents=True, exist_ok=True)
    root.mkdir()
    return root


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class RunDir:
    """Paths of one run directory; created exclusively so no run is ever overwritten."""

    def __init__(self, root: Path):
        self.root = root

    @cached_property
    def schema_version(self) -> Any:
        """The version of the run's files, as ``regime.json`` holds it (before any migration); this
        harness's own while it is not written yet (a run this harness is creating)."""
        path = self.root / "regime.json"
        record = read_json(path) if path.exists() else {"schema_version": SCHEMA_VERSION}
        return record.get("schema_version") if isinstance(record, dict) else None

    @classmethod
    def create(cls, results_dir: Path, regime_name: str) -> RunDir:
        return cls.create_at(results_dir / regime_name / new_run_id())

    @classmethod
    def create_at(cls, root: Path) -> RunDir:
        return cls(create_exclusive(root))

    def arm_dir(self, arm: str) -> Path:
        return self.root / "arms" / arm

    def samples(self, arm: str) -> Path:
        return self.arm_dir(arm) / "samples.jsonl"

    def warmup(self, arm: str) -> Path:
        return self.arm_dir(arm) / "warmup.jsonl"

    def noise_floor(self, arm: str) -> Path:
        return self.arm_dir(arm) / "noise_floor.jsonl"

    def margins(self, arm: str) -> Path:
        """The baseline's targeted logprob pass (greedy exactness over two or more start-ups): on each
        later start-up, only the prompts an output diverged on and no logprob record answers yet."""
        return self.arm_dir(arm) / "margins.jsonl"

    def distribution(self, arm: str) -> Path:
        """Temperature > 0: the arm's unmeasured samples for the distribution check."""
        return self.arm_dir(arm) / "distribution.jsonl"

    def workload_pass(self, arm: str) -> Path:
        """The baseline's workload pass (``verdict.covariate``): every prompt of each workload's pool
        once, greedy and unmeasured, on its first start-up (or copied from a pass kept earlier)."""
        return self.arm_dir(arm) / "workload_pass.jsonl"

    def windows(self, arm: str) -> Path:
        return self.arm_dir(arm) / "windows.jsonl"

    def ramp(self, arm: str) -> Path:
        """``load.ramp``: the requests of the arm's ramp windows."""
        return self.arm_dir(arm) / "ramp.jsonl"

    def ramp_windows(self, arm: str) -> Path:
        """``load.ramp``: one line per ramp window (per workload and server start-up)."""
        return self.arm_dir(arm) / "ramp_windows.jsonl"

    def status(self, arm: str) -> Path:
        return self.arm_dir(arm) / "status.json"

    def server_log(self, arm: str, server_start: int = 0) -> Path:
        """The engine's log: ``server.log`` for the first start-up, ``server.start-N.log`` for start-up N
        (``load.server_starts``)."""
        return self.arm_dir(arm) / (
            "server.log" if server_start == 0 else f"server.start-{server_start + 1}.log"
        )

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def read_status(self, arm: str) -> ArmStatus:
        """The arm's status; ``not_run`` when it never started."""
        return self.read_status_at(self.arm_dir(arm))

    def read_status_at(self, arm_dir: Path) -> ArmStatus:
        """The status in an arm's directory (its own, or an attempt set aside)."""
        path = arm_dir / "status.json"
        if not path.exists():
            return ArmStatus(status="not_run")
        data = migrations.upgrade(read_json(path), status_steps.MIGRATIONS, str(path), self.schema_version)
        try:
            return ArmStatus.model_validate(data)
        except ValidationError as exc:
            raise UserError(f"{path}: not an arm status: {exc.errors()[0]['msg']}") from None

    def write_status(self, arm: str, status: ArmStatus) -> None:
        """The one place an arm's status is written."""
        write_json_atomic(self.status(arm), status.model_dump(mode="json", exclude_none=True))

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
        with writer_lock(self.root / "run.lock"):
            yield


@contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """One writer at a time: ``flock`` on an open descriptor of ``path``, held while the block
    runs, so a writer that dies (even by SIGKILL) releases it with its last descriptor, and no
    reused pid can pass for a live one. ``path`` holds the writer's pid for the message a second
    writer gets; it is removed on release, and a writer that locked a file removed meanwhile
    locks the new one. (On one host: a study's bench run and its points' jobs share a file
    system, and only the study's own command takes its lock.)"""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UserError(
                f"{path.parent} is being written by another bench process (pid {holder})"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # released and removed between our open and our lock: lock the new file
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # before the lock goes: a waiter then locks a new file
        os.close(fd)


def lock_held(path: Path) -> bool:
    """Whether a live writer holds ``path`` (``writer_lock``), without taking it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def read_run_record(run: RunDir) -> RunRecord:
    """A run's ``regime.json`` as the current version; versions this harness does not know, and a
    record that is not one (a hand-edited file), are refused naming the file and field."""
    path = run.root / "regime.json"
    record = migrations.upgrade(read_json(path), run_record_steps.MIGRATIONS, str(path))
    try:
        return RunRecord.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
