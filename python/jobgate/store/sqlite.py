"""SQLite, the embedded default: one file in WAL mode, versioned migrations, and one
write transaction per admission group (BEGIN IMMEDIATE, or a single insert when the
group reads nothing first), so quota checks, inserts and idempotency keys are atomic
across threads and processes: a key is looked up and written under the same write
lock. Connections come from a small pool; the driver's failures leave as StoreFull or
StoreUnavailable. Only the dialect is here: the transactions are `SqlStore`'s. The WAL is checkpointed on a thread of
the store's own (`_Checkpointer`), not in the commits admissions wait for."""

from __future__ import annotations

import _sqlite3  # the module whose SQLite the core's writer must share
import errno
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import jobgate._core
from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TRANSITIONS
from jobgate.store.base import (
    ConnectionPool,
    NewJob,
    Remembered,
    StoreFull,
    StoreUnavailable,
    key_bytes,
    now,
    opened_record,
    record_json,
    shutting_down,
)
from jobgate.store.committer import COMMITTER_CLOSE_WAIT_S
from jobgate.store.skeleton import CommitGroup, GroupRead, NumbersAhead, Slot, SqlStore, T

log = logging.getLogger("jobgate.store")

MIGRATIONS = [
    # 1: records and their transitions
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        project TEXT NOT NULL,
        owner TEXT NOT NULL,
        gpus INTEGER NOT NULL,
        state TEXT NOT NULL,
        terminal INTEGER NOT NULL DEFAULT 0,
        record TEXT NOT NULL,
        document BLOB NOT NULL
    );
    CREATE INDEX jobs_project_open ON jobs (project, terminal);
    CREATE TABLE transitions (
        job_id TEXT NOT NULL REFERENCES jobs (id),
        n INTEGER NOT NULL,
        ts TEXT NOT NULL,
        state TEXT NOT NULL,
        message TEXT NOT NULL,
        source TEXT NOT NULL,
        PRIMARY KEY (job_id, n)
    );
    """,
    # 2: paging and quota stay O(log n) as records accumulate: an index on seq, and
    # one row per project holding its GPUs in unfinished jobs.
    """
    CREATE UNIQUE INDEX jobs_seq ON jobs (seq);
    CREATE TABLE project_usage (project TEXT PRIMARY KEY, gpus INTEGER NOT NULL);
    INSERT INTO project_usage SELECT project, SUM(gpus) FROM jobs WHERE terminal = 0 GROUP BY project;
    """,
    # 3: idempotency keys, per account: the first admission made with each (its job and
    # the report a retry gets back) and the fingerprint of its request. `created` is
    # seconds since the epoch; the index serves pruning.
    """
    CREATE TABLE idempotency_keys (
        account TEXT NOT NULL,
        key BLOB NOT NULL,
        fingerprint BLOB NOT NULL,
        job_id TEXT NOT NULL REFERENCES jobs (id),
        report BLOB NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (account, key)
    );
    CREATE INDEX idempotency_keys_created ON idempotency_keys (created);
    """,
    # 4: the key that permutes job numbers into ids, one row (written at open when
    # missing, in the transaction that migrates).
    """
    CREATE TABLE job_id_key (one INTEGER PRIMARY KEY CHECK (one = 1), key BLOB NOT NULL);
    """,
    # 5: a commit group opens its records in one statement: an insert into
    # `admissions` gives each record the next `seq` (admission order, in which ListJobs
    # pages), its first transition and its GPUs charged to its project. The number its
    # id permutes comes from `job_numbers` (the next one not given), which a store
    # takes from ahead of need, so that a group needs to read nothing first; it starts
    # above every number the ids before it were made of (their `seq`). Statements of
    # their own (a trigger holds semicolons).
    (
        "CREATE TABLE job_numbers (one INTEGER PRIMARY KEY CHECK (one = 1), next INTEGER NOT NULL)",
        "INSERT INTO job_numbers SELECT 1, COALESCE(MAX(seq), 0) + 1 FROM jobs",
        "CREATE VIEW admissions (id, project, owner, gpus, ts, record, document) AS SELECT id, project, owner, gpus, NULL, record, document FROM jobs WHERE 0",
        """CREATE TRIGGER admissions_open INSTEAD OF INSERT ON admissions BEGIN
            INSERT INTO jobs (id, seq, project, owner, gpus, state, terminal, record, document)
                VALUES (NEW.id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs), NEW.project, NEW.owner, NEW.gpus, 'PENDING', 0, NEW.record, NEW.document);
            INSERT INTO transitions VALUES (NEW.id, 1, NEW.ts, 'PENDING', 'record opened at admission', 'agent');
            INSERT INTO project_usage VALUES (NEW.project, NEW.gpus) ON CONFLICT (project) DO UPDATE SET gpus = gpus + excluded.gpus;
        END""",
    ),
]

# Write transactions and records opened after which the WAL is checkpointed (about
# SQLite's own 1000 pages: a record dirties a few).
CHECKPOINT_EVERY = 256
# Pages in the WAL past which `_Checkpointer` has it start again from its beginning,
# and past which SQLite checkpoints at commit itself, should that thread fall behind.
_RESTART_PAGES = 4_000
_BACKSTOP_PAGES = 20_000
# Rows per multi-row statement of a commit group, its parameters well under the
# smallest limit SQLite builds have had (999).
_ROWS_PER_STATEMENT = 100


def _admission_row(job: NewJob, job_id: str, ts: str) -> tuple[Any, ...]:
    """An opened record's row of `admissions` (its first transition and its GPUs
    charged come with it, through the view's trigger)."""
    record = opened_record(job, job_id, ts) | {"owner": job.owner, "project": job.project, "gpus": job.gpus}
    return (job_id, job.project, job.owner, job.gpus, ts, record_json(record), job.document)


class _Rows:
    """A decided commit group's rows (`CommitGroup`): its records, each with its
    first transition and its GPUs charged (`admissions`), and its keys."""

    def __init__(self, group: CommitGroup) -> None:
        self.admissions: list[tuple[Any, ...]] = []
        self.keys: list[tuple[Any, ...]] = []
        for o in group.openings():
            job = o.job
            self.admissions.append(_admission_row(job, o.job_id, o.ts))
            if o.slot is not None and job.idempotency is not None:
                self.keys.append((job.idempotency.account, o.slot[1], job.idempotency.fingerprint, o.job_id, o.report, o.created))

    def statements(self) -> int:
        """The statements `write` takes."""
        return -(-len(self.admissions) // _ROWS_PER_STATEMENT) + -(-len(self.keys) // _ROWS_PER_STATEMENT)

    def write(self, db: sqlite3.Connection) -> None:
        """Every row of the group, a statement each (per hundred rows), whatever its size."""
        _insert(db, "INSERT INTO admissions VALUES", "(?, ?, ?, ?, ?, ?, ?)", self.admissions)
        # An expired row for a key is replaced: the key starts afresh.
        upsert = "ON CONFLICT (account, key) DO UPDATE SET fingerprint = excluded.fingerprint, job_id = excluded.job_id, report = excluded.report, created = excluded.created"
        _insert(db, "INSERT INTO idempotency_keys VALUES", "(?, ?, ?, ?, ?, ?)", self.keys, upsert)


def _insert(db: sqlite3.Connection, head: str, row: str, rows: list[tuple[Any, ...]], tail: str = "") -> None:
    """`rows` inserted with `head`, each as `row` (its placeholders), then `tail`."""
    for i in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[i : i + _ROWS_PER_STATEMENT]
        db.execute(f"{head} {', '.join([row] * len(chunk))} {tail}", [value for values in chunk for value in values])


class _Checkpointer:
    """Checkpoints the WAL into the database file on a thread of its own, so that no
    commit waits for the copy and its two fsyncs: SQLite's autocheckpoint runs them in
    the commit that crosses its threshold, and every admission of that commit's group
    waits. A pass beside the commits never leaves the WAL wholly copied while they go
    on, and SQLite starts the WAL again from its beginning only when a writer finds it
    so: once it holds `_RESTART_PAGES`, the commit after a pass copies the few pages
    committed during it, and the next starts the WAL afresh. What a checkpoint copies
    is committed already: durability is the commit's, whichever thread copies it and
    when. SQLite's own checkpoint at commit remains, at a higher threshold, should this
    thread fall behind."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], store: str) -> None:
        self._connect, self._store = connect, store
        self._lock = threading.Lock()
        # Written since the last pass; a pass due or under way; the WAL to be wholly
        # copied by the next commit.
        self._written, self._passing, self._restart, self._closed = 0, False, False, False
        self._due = threading.Event()
        self._thread: threading.Thread | None = None
        # Also told when the WAL is to start afresh: a writer whose commits `committed`
        # never sees (the core's, `SqliteWriter.checkpoint_soon`).
        self.restart_elsewhere: Callable[[], None] | None = None

    def committed(self, db: sqlite3.Connection) -> None:
        """Called after each commit on `db`; never fails: the commit stands."""
        with self._lock:
            restart, self._restart = self._restart, False
        if restart:
            self._checkpoint(db)
        self.wrote(1)

    def wrote(self, written: int) -> None:
        """Counts what commits wrote (a transaction, a record opened: one each)."""
        with self._lock:
            self._written += written
            due = self._written >= CHECKPOINT_EVERY and not self._passing and not self._closed
            if due:
                self._written, self._passing = 0, True
                due = self._started()
        if due:
            self._due.set()

    def _started(self) -> bool:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="jobgate-checkpoint", daemon=True)
            try:
                self._thread.start()
            except RuntimeError as e:  # no thread to be had: SQLite's own checkpoints remain
                log.warning("the job store's checkpoints could not start a thread", extra={"fields": {"store": self._store, "error": str(e)}})
                return False
        return True

    def _run(self) -> None:
        try:
            db = self._connect()
        except sqlite3.Error as e:
            log.warning("the job store's checkpoints could not open a connection; SQLite checkpoints at commit instead", extra={"fields": {"store": self._store, "error": str(e)}})
            return
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._closed:
                    return
                pages = self._checkpoint(db)
                with self._lock:
                    self._passing, self._restart = False, pages >= _RESTART_PAGES
                if pages >= _RESTART_PAGES and self.restart_elsewhere is not None:
                    self.restart_elsewhere()
        finally:
            db.close()

    def _checkpoint(self, db: sqlite3.Connection) -> int:
        """One PASSIVE checkpoint; the pages in the WAL (-1 when another process was
        checkpointing). A failure is only logged: the WAL keeps every commit."""
        try:
            return int(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
        except sqlite3.Error as e:
            log.warning("checkpointing the job store's WAL failed", extra={"fields": {"store": self._store, "error": str(e)}})
            return -1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join(30)


# A record the core's writer opens (`SqliteWriter`): the row `_Rows` writes for an
# admission without a key.
_OPEN_ONE = "INSERT INTO admissions VALUES (?, ?, ?, ?, ?, ?, ?)"
# SQLite's primary result codes the store answers StoreUnavailable (retry shortly).
_UNAVAILABLE = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PROTOCOL)


class SqliteStore(SqlStore):
    """The SQLite dialect of the store's transactions (`SqlStore`)."""

    MIGRATIONS = MIGRATIONS
    PRUNE = "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys WHERE created < ? LIMIT ?)"

    def __init__(
        self,
        directory: str | Path,
        synchronous: str = "normal",
        *,
        connections: int = 16,
        core_writer: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_transitions: int = DEFAULT_MAX_TRANSITIONS,
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be normal or full, not {synchronous!r}")
        self.synchronous = synchronous.upper()
        # In WAL mode NORMAL writes a commit to the WAL without an fsync (it survives a
        # crash of the process, not of the machine); FULL flushes each commit.
        self.syncs_commits = self.synchronous == "FULL"
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "jobs.sqlite3"
        super().__init__(max_message_bytes=max_message_bytes, max_transitions=max_transitions)
        self._pool: ConnectionPool[sqlite3.Connection] = ConnectionPool(self._connect, connections, usable=lambda db: True, close=sqlite3.Connection.close)
        self._checkpointer = _Checkpointer(self._connect, str(self.path))
        # Job numbers taken ahead from `job_numbers`, not given yet.
        self._numbers = NumbersAhead()
        self._id_key = self._migrate()
        # With `core_writer` False, every record goes through `admit_many` (and a
        # subclass that changes it sees them all).
        self._writer = self._core_writer() if core_writer else None

    def _core_writer(self) -> Any | None:
        """The core's writer on this file, or None where it cannot share this Python's
        SQLite library (then every record is opened here)."""
        try:
            writer = jobgate._core.SqliteWriter(str(self.path), _OPEN_ONE, self._pragmas(), _sqlite3.__file__)
        except (RuntimeError, ValueError) as e:
            log.info("the job store opens its records without the core's writer", extra={"fields": {"store": str(self.path), "reason": str(e)}})
            return None
        self._checkpointer.restart_elsewhere = writer.checkpoint_soon
        return writer

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        # Two processes opening a new store at once (`serve --workers N`) race to switch
        # it to WAL; SQLite answers the loser "locked" without waiting for the busy
        # timeout, so the switch is retried (WAL, once set, stays set in the file).
        for attempt in range(100):
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or attempt == 99:
                    raise
                time.sleep(0.05)
        for pragma in self._pragmas():
            db.execute(pragma)
        return db

    def _pragmas(self) -> list[str]:
        """What every connection to the file runs once WAL is on, the core writer's too.
        `_Checkpointer` checkpoints sooner than the automatic checkpoint, a backstop."""
        return [f"PRAGMA synchronous={self.synchronous}", "PRAGMA busy_timeout=30000", f"PRAGMA wal_autocheckpoint={_BACKSTOP_PAGES}"]

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._pool.connection() as db:
            yield db

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._pool.connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                # SQLite ends the transaction itself on some errors (a full disk): rolling
                # back again would only hide the error behind "no transaction is active".
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            self._checkpointer.committed(db)

    def _translate(self, call: Callable[[], T]) -> T:
        """The driver's failures as the store's own: a full disk is StoreFull, a database
        that cannot be opened or stays locked is StoreUnavailable; the details are logged."""
        try:
            return call()
        except sqlite3.Error as e:
            code, message = getattr(e, "sqlite_errorcode", None) or 0, str(e)
            if code & 0xFF != sqlite3.SQLITE_FULL and code & 0xFF not in _UNAVAILABLE:
                raise
        except OSError as e:
            if e.errno == errno.ENOSPC:
                log.error("job store disk full", extra={"fields": {"store": str(self.path), "error": str(e)}})
                raise StoreFull("the disk holding the job store (store.path) is full; nothing was written") from None
            raise
        self._failed(code, message)  # outside the handler: the driver's error is not chained

    def _failed(self, code: int, message: str) -> NoReturn:
        """Raises what SQLite's result `code` is to the store's callers: StoreFull,
        StoreUnavailable, or (any other code, only from the core's writer) a
        sqlite3.DatabaseError; the details are logged."""
        primary = code & 0xFF
        if primary == sqlite3.SQLITE_FULL:
            log.error("job store disk full", extra={"fields": {"store": str(self.path), "error": message}})
            raise StoreFull("the disk holding the job store (store.path) is full; nothing was written")
        if primary in _UNAVAILABLE:
            log.error("job store unavailable", extra={"fields": {"store": str(self.path), "error": message}})
            raise StoreUnavailable("the job store is unavailable; retry shortly")
        if primary == sqlite3.SQLITE_ABORT:  # the writer closed before it wrote the record
            raise shutting_down()
        raise sqlite3.DatabaseError(message)

    def _hand_to_writer(self, job: NewJob, job_id: str) -> Any:
        self._checkpointer.wrote(2)  # a transaction and a record, as `_wrote` and `committed` count them
        return self._writer.submit([_admission_row(job, job_id, now())])

    def _log_fields(self) -> dict[str, str]:
        return {"store": str(self.path)}

    def _migrate_one(self, db: sqlite3.Connection, migration: str | tuple[str, ...]) -> None:
        # One statement per call: a migration string is split at its semicolons, a
        # tuple (a trigger holds semicolons) is its statements.
        for statement in filter(str.strip, migration.split(";") if isinstance(migration, str) else migration):
            db.execute(statement)

    @staticmethod
    def _loaded(record: str) -> dict[str, Any]:
        return json.loads(record)

    # A commit group (`SqlStore._admit_group`) costs a few statements whatever its
    # size, each of which lets the other threads run Python while it runs and waits its
    # turn to come back. One whose members read nothing (no quota applies, no
    # idempotency key) is decided before any, with job numbers taken ahead, and opens
    # its records in one statement, its own transaction. Any other group: the write
    # lock (BEGIN IMMEDIATE), one read of its projects' usage and of what its keys
    # recall, its records, its keys, and the commit.

    def _numbers_unread(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> list[int] | None:
        if any(job.reads_usage or job.idempotency is not None for job, _ in jobs):
            return None
        return self._numbers.take(len(jobs), self._more_numbers) or []  # never None: taken from `job_numbers` when short

    @contextmanager
    def _group_read(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> Iterator[tuple[sqlite3.Connection, GroupRead]]:
        # Taken before the write lock: `_more_numbers` writes on a connection of its own.
        numbers = self._numbers.take(len(jobs), self._more_numbers) or []
        with self._writing() as db:
            yield db, self._read(db, numbers, [job for job, _ in jobs])

    def _write_group(self, db: sqlite3.Connection, group: CommitGroup) -> Callable[[], dict[Slot, Remembered]]:
        _Rows(group).write(db)
        return lambda: {}  # every key decided on is written

    def _write_unread(self, jobs: list[tuple[NewJob, Callable[[int], bool]]], group: CommitGroup) -> dict[Slot, Remembered]:
        rows = _Rows(group)
        if rows.statements() == 1:
            with self._pool.connection() as db:
                rows.write(db)  # one statement: a transaction of its own
                self._checkpointer.committed(db)
        elif rows.statements():
            with self._writing() as db:
                rows.write(db)
        return {}  # no member has a key

    def _wrote(self, count: int) -> None:
        self._checkpointer.wrote(count)

    def _more_numbers(self, count: int) -> range:
        """`count` job numbers never given, taken from `job_numbers` in a write of their
        own (another process sharing the file takes others)."""
        with self._pool.connection() as db:
            ((following,),) = db.execute("UPDATE job_numbers SET next = next + ? RETURNING next", (count,)).fetchall()
        return range(following - count, following)

    def _read(self, db: sqlite3.Connection, numbers: list[int], jobs: list[NewJob]) -> GroupRead:
        """What a group's decisions read, under the write lock: the usage of the
        projects of members that read it, and what their keys recall within their
        windows, in one statement (another per hundred keys past the first hundred)."""
        projects = sorted({job.project for job in jobs if job.reads_usage})
        read_at = time.time()
        since: dict[Slot, float] = {}
        for job in jobs:
            if job.idempotency is not None:
                since.setdefault((job.idempotency.account, key_bytes(job.idempotency.key)), read_at - job.idempotency.window)
        slots = list(since)
        usage: dict[str, int] = {}
        recalled: dict[Slot, Remembered] = {}
        for i in range(0, max(len(slots), 1), _ROWS_PER_STATEMENT):
            chunk = slots[i : i + _ROWS_PER_STATEMENT]
            parts, args = [], []
            if i == 0 and projects:
                # A project's row has no key (NULL); a project may be named "".
                parts.append(f"SELECT project, NULL, gpus, NULL, NULL, NULL FROM project_usage WHERE project IN ({', '.join('?' * len(projects))})")
                args += projects
            if chunk:
                # CROSS JOIN: each key looked up by the primary key (a row-value IN would scan)
                parts.append(
                    f"SELECT ik.account, ik.key, job_id, fingerprint, report, created FROM (VALUES {', '.join(['(?, ?)'] * len(chunk))}) AS k "
                    "CROSS JOIN idempotency_keys AS ik ON ik.account = k.column1 AND ik.key = k.column2"
                )
                args += [value for slot in chunk for value in slot]
            if not parts:
                break
            for account, key, job_id, fingerprint, report, created in db.execute(" UNION ALL ".join(parts), args):
                if key is None:
                    usage[account] = int(job_id)
                elif created >= since[(account, bytes(key))]:  # an expired key is as good as absent
                    recalled[(account, bytes(key))] = Remembered(job_id, bytes(fingerprint), bytes(report))
        return GroupRead(numbers, usage, recalled)

    def close(self, wait: float = COMMITTER_CLOSE_WAIT_S) -> None:
        """Closes the store once the core's writer has written what it was handed,
        waiting at most `wait` seconds for it (a store that stays locked)."""
        self._close_writer(wait)
        self._checkpointer.close()
        self._pool.close()
