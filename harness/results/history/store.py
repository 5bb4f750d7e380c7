"""The nightly history: every run kept in one DuckDB file (``results/history.duckdb`` by default).

One row per run (its regime fingerprint, the machine it ran on, the engine and its patches, the
harness's commit, when it started), and per run, arm and cell the start-up-level samples of every
metric (``harness.results.history.entry`` makes them from a run directory) and the cell's verdict with its
interval. Runs are keyed by run id and by content (a digest of the run's raw samples, not of its
directory's name or path): adding one twice, or a copy of it under another name, adds it once. The
file carries its schema version; an older file is migrated on open (``MIGRATIONS``), a newer one
refused. Its free text (run ids, regime names, versions, an accept's reason) is the user's or a
server's: a reason is made inert (``harness.core.formats.inert``) before it is stored, and every such
text is made inert where it is printed.

    schema 1: runs, samples, cells, meta(schema_version)
    schema 2: + accepted (``bench history accept``: a change accepted as the new normal; the gate's
              nights for that fingerprint and machine start at the accepted run), + cells.noisy_neighbour,
              + runs.env
    schema 3: + runs.content_digest (NULL for the runs of an older file until their directory is
              read again: ``History.fill_digests``)
    schema 4: + runs.gate_outcome (the run's last ``bench gate``: pass, regression, inconclusive,
              infrastructure failure; NULL: not gated, or added before it was kept). A night whose
              gate was inconclusive is never a later night's reference.

Reads come back as DataFrames (``History.runs()``, ``.samples()``, ``.cells()``), the same columns
as the typed models of ``harness.results.history.entry``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pandas as pd

from harness.core.errors import UserError
from harness.core.formats import inert
from harness.results.history.entry import HistoryEntry, HistoryRun

SCHEMA_VERSION = 4
DEFAULT_PATH = Path("results") / "history.duckdb"
# DuckDB lets one process hold a file for writing: another writer (a second `bench history add`, a
# nightly `bench run --history`) waits this long for it, then is told who holds it
LOCK_WAIT_S = 120.0

TABLES = {
    "runs": """
        run_id VARCHAR PRIMARY KEY, regime VARCHAR NOT NULL, regime_fingerprint VARCHAR NOT NULL,
        conditions_fingerprint VARCHAR, machine_key VARCHAR NOT NULL, machine VARCHAR NOT NULL,
        environment_fingerprint VARCHAR, engine VARCHAR NOT NULL, engine_version VARCHAR,
        engine_patches VARCHAR NOT NULL, harness_commit VARCHAR, engine_commit VARCHAR,
        started_at TIMESTAMP NOT NULL, study VARCHAR, point VARCHAR, source VARCHAR NOT NULL,
        added_at TIMESTAMP NOT NULL DEFAULT current_timestamp, env VARCHAR, content_digest VARCHAR,
        gate_outcome VARCHAR""",
    "samples": """
        run_id VARCHAR NOT NULL, arm VARCHAR NOT NULL, method VARCHAR NOT NULL, workload VARCHAR NOT NULL,
        concurrency INTEGER NOT NULL, request_rate DOUBLE, metric VARCHAR NOT NULL, sample INTEGER NOT NULL,
        value DOUBLE NOT NULL""",
    "cells": """
        run_id VARCHAR NOT NULL, arm VARCHAR NOT NULL, method VARCHAR NOT NULL, workload VARCHAR NOT NULL,
        concurrency INTEGER NOT NULL, request_rate DOUBLE, server_starts INTEGER NOT NULL, verdict VARCHAR,
        speedup DOUBLE, speedup_low DOUBLE, speedup_high DOUBLE, speedup_log_se DOUBLE, speedup_df INTEGER,
        noisy_neighbour BOOLEAN""",
    "accepted": """
        run_id VARCHAR PRIMARY KEY, regime_fingerprint VARCHAR NOT NULL, machine_key VARCHAR NOT NULL,
        started_at TIMESTAMP NOT NULL, reason VARCHAR NOT NULL,
        accepted_at TIMESTAMP NOT NULL DEFAULT current_timestamp""",
}


def _schema_2(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"CREATE TABLE accepted ({TABLES['accepted']})")
    con.execute("ALTER TABLE cells ADD COLUMN noisy_neighbour BOOLEAN")  # unknown (NULL) for older runs
    con.execute("ALTER TABLE runs ADD COLUMN env VARCHAR")


def _schema_3(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("ALTER TABLE runs ADD COLUMN content_digest VARCHAR")  # unknown (NULL) for older runs


def _schema_4(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("ALTER TABLE runs ADD COLUMN gate_outcome VARCHAR")  # unknown (NULL) for older runs


# schema N -> N + 1, run in order on an older file
MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {
    1: _schema_2,
    2: _schema_3,
    3: _schema_4,
}


class History:
    """An open history file (``open_history``)."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, path: Path):
        self.connection, self.path = connection, path

    def has(self, run_id: str) -> bool:
        return self.connection.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None

    def stored_as(self, run: HistoryRun) -> str | None:
        """The run id the history holds ``run`` as: its own, or that of a run with the same raw
        samples (a copy of the run's directory under another name); None when it holds neither."""
        if self.has(run.run_id):
            return run.run_id
        if run.content_digest is None:
            return None
        found = self.connection.execute(
            "SELECT run_id FROM runs WHERE content_digest = ? ORDER BY started_at, run_id LIMIT 1",
            [run.content_digest],
        ).fetchone()
        return None if found is None else found[0]

    def fill_digests(self, digest: Callable[[Path], str | None]) -> int:
        """Give the runs an older file holds without a content digest theirs, from the directory each
        was read from where it is still there (``digest``: the run directory's, as an entry has it);
        how many were filled. A directory of another name is not theirs (a relative source read
        from elsewhere) and is left alone."""
        missing = self.connection.execute(
            "SELECT run_id, source FROM runs WHERE content_digest IS NULL"
        ).fetchall()
        filled = 0
        for run_id, source in missing:
            where = Path(source)
            if where.name != run_id.rsplit("/", 1)[-1] or not (where / "regime.json").is_file():
                continue
            found = digest(where)
            if found is not None:
                self.connection.execute(
                    "UPDATE runs SET content_digest = ? WHERE run_id = ?", [found, run_id]
                )
                filled += 1
        return filled

    def add(self, entry: HistoryEntry) -> bool:
        """Append one run with its samples and cells, in one transaction; False (nothing written)
        when the history already holds it (``stored_as``: its run id, or a copy of it)."""
        run = entry.run
        if self.stored_as(run) is not None:
            return False
        row = run.model_dump()
        row["machine"] = json.dumps(row["machine"], sort_keys=True)
        row["engine_patches"] = json.dumps(row["engine_patches"])
        row["env"] = json.dumps(row["env"], sort_keys=True)
        con = self.connection
        con.execute("BEGIN TRANSACTION")
        try:
            columns = ", ".join(row)
            con.execute(
                f"INSERT INTO runs ({columns}) VALUES ({', '.join('?' * len(row))})", list(row.values())
            )
            for table, models in (("samples", entry.samples), ("cells", entry.cells)):
                if models:
                    frame = pd.DataFrame([{"run_id": run.run_id, **m.model_dump()} for m in models])
                    con.register("incoming", frame)
                    con.execute(f"INSERT INTO {table} ({', '.join(frame.columns)}) SELECT * FROM incoming")
                    con.unregister("incoming")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return True

    def accept(self, run_id: str, reason: str) -> bool:
        """Accept the change ``run_id`` shows as the new normal: later gates of its fingerprint and
        machine take their nights from it on. False when it was accepted already. The reason is
        stored inert: a control character in it is kept as its visible escape (``\\x1b``)."""
        found = self.connection.execute(
            "SELECT regime_fingerprint, machine_key, started_at FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        if found is None:
            raise UserError(
                f"{self.path}: no run {inert(run_id)} in the history (bench history show lists them)"
            )
        if self.connection.execute("SELECT 1 FROM accepted WHERE run_id = ?", [run_id]).fetchone():
            return False
        self.connection.execute(
            "INSERT INTO accepted (run_id, regime_fingerprint, machine_key, started_at, reason) "
            "VALUES (?, ?, ?, ?, ?)",
            [run_id, *found, inert(reason)],
        )
        return True

    def record_gate(self, run: HistoryRun, outcome: str) -> bool:
        """Keep a run's gate outcome (``bench gate --history``), on the run the history holds it as
        (``stored_as``); False when it holds no such run."""
        run_id = self.stored_as(run)
        if run_id is None:
            return False
        self.connection.execute("UPDATE runs SET gate_outcome = ? WHERE run_id = ?", [outcome, run_id])
        return True

    def accepted(self) -> pd.DataFrame:
        """The accepted changes, oldest first."""
        return self.connection.execute("SELECT * FROM accepted ORDER BY started_at, run_id").df()

    def runs(self) -> pd.DataFrame:
        """One row per run, oldest first."""
        return self.connection.execute("SELECT * FROM runs ORDER BY started_at, run_id").df()

    def samples(self) -> pd.DataFrame:
        """Every start-up-level sample, with its run's time, fingerprint and machine."""
        return self.connection.execute(
            "SELECT r.started_at, r.regime_fingerprint, r.machine_key, s.* FROM samples s "
            "JOIN runs r USING (run_id) ORDER BY r.started_at, s.run_id, s.arm, s.workload, s.concurrency, "
            "s.metric, s.sample"
        ).df()

    def cells(self) -> pd.DataFrame:
        """Every cell's verdict and interval, with its run's time, fingerprint and machine."""
        return self.connection.execute(
            "SELECT r.started_at, r.regime_fingerprint, r.machine_key, c.* FROM cells c "
            "JOIN runs r USING (run_id) ORDER BY r.started_at, c.run_id, c.arm, c.workload, c.concurrency"
        ).df()


def _schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "meta" not in tables:
        return None if not tables else 0
    found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(found[0]) if found else 0


def _create(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    for name, columns in TABLES.items():
        con.execute(f"CREATE TABLE {name} ({columns})")
    con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


def _ready(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """A new file gets the schema; an older one is migrated; a newer or foreign one is refused."""
    version = _schema_version(con)
    if version is None:
        _create(con)
        return
    if version == 0:
        raise UserError(f"{path}: a DuckDB file that is not a bench history (no schema_version)")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{path}: history schema {version} is newer than this harness reads ({SCHEMA_VERSION}): "
            "upgrade the harness"
        )
    for step in range(version, SCHEMA_VERSION):
        MIGRATIONS[step](con)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(step + 1)])


def _connect(path: Path, read_only: bool, wait_s: float = LOCK_WAIT_S) -> duckdb.DuckDBPyConnection:
    """A connection to ``path``, waiting up to ``wait_s`` while another process holds its lock."""
    deadline, said = time.monotonic() + wait_s, False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:  # another process holds it, or not a DuckDB file
            reason = str(exc).splitlines()[0]
            if "lock" not in reason.lower() or time.monotonic() >= deadline:
                raise UserError(f"{path}: cannot open the history: {reason}") from None
            if not said:  # once: the terminal of a nightly job shows why it paused
                print(f"{path}: held by another process; waiting up to {wait_s:.0f} s", file=sys.stderr)
                said = True
            time.sleep(0.2)
        except duckdb.Error as exc:
            raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: duckdb.Error) -> UserError:
    return UserError(
        f"{path}: the history file is damaged ({str(exc).splitlines()[0]}); restore it from a copy, "
        "or move it aside and rebuild it with bench history import RESULTS_DIR"
    )


def _damage(exc: BaseException) -> bool:
    """DuckDB's word for a file it cannot read: a checksum that does not match, a block it cannot
    deserialize (a programming error, a bad query, is none of these)."""
    text = str(exc).lower()
    return isinstance(exc, duckdb.Error) and ("corrupt" in text or "checksum" in text or "serializ" in text)


@contextmanager
def open_history(path: Path, read_only: bool = False) -> Iterator[History]:
    """The history file at ``path`` (created, with its folder, unless ``read_only``). An older file is
    migrated first, also when it is opened to be read. A damaged file is an error naming it, where
    it is opened or read."""
    if read_only and not path.is_file():
        raise UserError(f"{path}: no history file (bench history add RUN creates it)")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    con = _connect(path, read_only)
    try:
        if read_only and (_schema_version(con) or 0) < SCHEMA_VERSION:
            con.close()
            con = _connect(path, False)
            _ready(con, path)
            con.close()
            con = _connect(path, True)
        if not read_only:
            _ready(con, path)
        elif _schema_version(con) != SCHEMA_VERSION:
            raise UserError(
                f"{path}: history schema {_schema_version(con)}, this harness reads {SCHEMA_VERSION}"
            )
        yield History(con, path)
    except duckdb.Error as exc:
        if _damage(exc):
            raise _unreadable(path, exc) from None
        raise
    finally:
        con.close()


class LoadedHistory:
    """A history file read whole into memory (``harness.load_history``): its tables as DataFrames,
    the file closed again (DuckDB lets one process write it at a time)."""

    def __init__(self, path: Path):
        with open_history(Path(path), read_only=True) as history:
            self._runs, self._samples, self._cells = history.runs(), history.samples(), history.cells()
            self._accepted = history.accepted()
        self.path = Path(path)

    def accepted(self) -> pd.DataFrame:
        return self._accepted

    def runs(self) -> pd.DataFrame:
        return self._runs

    def samples(self) -> pd.DataFrame:
        return self._samples

    def cells(self) -> pd.DataFrame:
        return self._cells


def load_history(path: str | Path) -> LoadedHistory:
    """The history at ``path`` for analysis (``.runs()``, ``.samples()``, ``.cells()``)."""
    return LoadedHistory(Path(path))
