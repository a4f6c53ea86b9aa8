"""SQLite, the embedded default: one file in WAL mode, versioned migrations, and one
write transaction (BEGIN IMMEDIATE) per admission group, so quota checks, inserts and
idempotency keys are atomic across threads and processes: a key is looked up and
written under the same write lock. Connections come from a small pool; the driver's
failures leave as StoreFull or StoreUnavailable."""

from __future__ import annotations

import errno
import functools
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TRANSITIONS
from jobgate.store.base import (
    PRUNE_BATCH,
    TERMINAL,
    ConnectionPool,
    JobNotFound,
    NewJob,
    Pruning,
    Remembered,
    StoreFull,
    StoreUnavailable,
    apply_mark,
    check_mark,
    check_room,
    key_bytes,
    list_filter,
    new_id_key,
    new_job_id,
    now,
    opened_record,
    storable,
    stored_message,
)

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
]

# Ids per query of `latest`, well under SQLite's limit on bound parameters.
_IDS_PER_QUERY = 500


def _translated(method):
    """The driver's failures as the store's own: a full disk is StoreFull, a database
    that cannot be opened or stays locked is StoreUnavailable; the details are logged."""

    @functools.wraps(method)
    def inner(self: SqliteStore, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            primary = (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF
            if primary == sqlite3.SQLITE_FULL:
                log.error("job store disk full", extra={"fields": {"store": str(self.path), "error": str(e)}})
                raise StoreFull("the disk holding the job store (store.path) is full; nothing was written") from None
            if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PROTOCOL):
                log.error("job store unavailable", extra={"fields": {"store": str(self.path), "error": str(e)}})
                raise StoreUnavailable("the job store is unavailable; retry shortly") from None
            raise
        except OSError as e:
            if e.errno == errno.ENOSPC:
                log.error("job store disk full", extra={"fields": {"store": str(self.path), "error": str(e)}})
                raise StoreFull("the disk holding the job store (store.path) is full; nothing was written") from None
            raise

    return inner


class SqliteStore:
    def __init__(
        self,
        directory: str | Path,
        synchronous: str = "normal",
        *,
        connections: int = 16,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_transitions: int = DEFAULT_MAX_TRANSITIONS,
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be normal or full, not {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "jobs.sqlite3"
        self.max_message_bytes, self.max_transitions = max_message_bytes, max_transitions
        self._pool: ConnectionPool[sqlite3.Connection] = ConnectionPool(self._connect, connections, usable=lambda db: True, close=sqlite3.Connection.close)
        self._pruning = Pruning()
        self._id_key = self._migrate()

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
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        db.execute("PRAGMA busy_timeout=30000")
        return db

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

    @_translated
    def _migrate(self) -> bytes:
        """Brings the schema up to date; returns the store's job id key."""
        with self._writing() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    for statement in filter(str.strip, sql.split(";")):
                        db.execute(statement)
                    db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now()))
            db.execute("INSERT OR IGNORE INTO job_id_key VALUES (1, ?)", (new_id_key(),))
            return bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])

    @_translated
    def gpus_in_use(self, project: str) -> int:
        with self._reading() as db:
            row = db.execute("SELECT gpus FROM project_usage WHERE project = ?", (project,)).fetchone()
        return int(row[0]) if row else 0

    @_translated
    def usage(self) -> dict[str, int]:
        with self._reading() as db:
            return {project: int(gpus) for project, gpus in db.execute("SELECT project, gpus FROM project_usage WHERE gpus > 0")}

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | Remembered | None:
        return self.admit_many([(job, decide)])[0]

    @_translated
    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | Remembered | None]:
        """Admits in order in one write transaction (one fsync for the group): each
        decision sees the GPUs of the records opened before it, and each key the keys
        written before it."""
        with self._writing() as db:
            opened = [self._open(db, job, decide) for job, decide in items]
        window = self._pruning.due([job for job, _ in items])
        if window is not None:
            self._prune(window)
        return opened

    def _open(self, db: sqlite3.Connection, job: NewJob, decide: Callable[[int], bool]) -> str | Remembered | None:
        job = storable(job)
        key = job.idempotency
        if key is not None:
            # Under the write lock: no other writer can use the key between here and
            # the commit that writes it.
            earlier = self._recall(db, key.account, [key.key], key.window)
            if earlier:
                return next(iter(earlier.values()))
        row = db.execute("SELECT gpus FROM project_usage WHERE project = ?", (job.project,)).fetchone()
        if not decide(int(row[0]) if row else 0):
            return None
        seq = int(db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0])
        job_id = new_job_id(job.id_prefix, seq, self._id_key)  # seq is taken inside the write transaction: unique
        db.execute(
            "INSERT INTO project_usage VALUES (?, ?) ON CONFLICT (project) DO UPDATE SET gpus = gpus + excluded.gpus",
            (job.project, job.gpus),
        )
        ts = now()
        record = opened_record(job, job_id, ts) | {"owner": job.owner, "project": job.project, "gpus": job.gpus}
        db.execute(
            "INSERT INTO jobs (id, seq, project, owner, gpus, state, terminal, record, document) VALUES (?, ?, ?, ?, ?, 'PENDING', 0, ?, ?)",
            (job_id, seq, job.project, job.owner, job.gpus, json.dumps(record), job.document),
        )
        db.execute("INSERT INTO transitions VALUES (?, 1, ?, 'PENDING', 'record opened at admission', 'agent')", (job_id, ts))
        if key is not None:
            # An expired row for the key is replaced: the key starts afresh.
            db.execute(
                "INSERT INTO idempotency_keys VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (account, key) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, job_id = excluded.job_id, report = excluded.report, created = excluded.created",
                (key.account, key_bytes(key.key), key.fingerprint, job_id, key.report(), time.time()),
            )
        return job_id

    def _recall(self, db: sqlite3.Connection, account: str, keys: list[str], window: float) -> dict[str, Remembered]:
        since = time.time() - window
        out: dict[str, Remembered] = {}
        for i in range(0, len(keys), _IDS_PER_QUERY):
            chunk = {key_bytes(k): k for k in keys[i : i + _IDS_PER_QUERY]}
            marks = ", ".join("?" * len(chunk))
            rows = db.execute(f"SELECT key, job_id, fingerprint, report FROM idempotency_keys WHERE account = ? AND key IN ({marks}) AND created >= ?", (account, *chunk, since))
            for key, job_id, fingerprint, report in rows:
                out[chunk[bytes(key)]] = Remembered(job_id, bytes(fingerprint), bytes(report))
        return out

    @_translated
    def recall(self, account: str, keys: Collection[str], window: float) -> dict[str, Remembered]:
        with self._reading() as db:
            return self._recall(db, account, list(dict.fromkeys(keys)), window)

    def _prune(self, window: float) -> None:
        """Deletes keys older than `window`, at most PRUNE_BATCH of them; a failure is
        only logged: an expired key is ignored by every lookup anyway."""
        try:
            with self._writing() as db:
                db.execute(
                    "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys WHERE created < ? LIMIT ?)",
                    (time.time() - window, PRUNE_BATCH),
                )
        except Exception as e:  # noqa: BLE001 - the admissions before it are committed
            log.warning("pruning expired idempotency keys failed", extra={"fields": {"store": str(self.path), "error": str(e)}})

    def _export(self, db: sqlite3.Connection, job_id: str, record_json: str) -> dict[str, Any]:
        record = json.loads(record_json)
        for private in ("owner", "project", "gpus"):
            record.pop(private, None)
        record["transitions"] = [
            {"ts": ts, "state": state, "message": message, "source": source}
            for ts, state, message, source in db.execute("SELECT ts, state, message, source FROM transitions WHERE job_id = ? ORDER BY n", (job_id,))
        ]
        return record

    def _get(self, db: sqlite3.Connection, job_id: str) -> dict[str, Any]:
        row = db.execute("SELECT record FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return self._export(db, job_id, row[0])

    @_translated
    def get(self, job_id: str) -> dict[str, Any]:
        with self._reading() as db:
            return self._get(db, job_id)

    @_translated
    def document(self, job_id: str) -> bytes:
        with self._reading() as db:
            row = db.execute("SELECT document FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return bytes(row[0])

    @_translated
    def project(self, job_id: str) -> str:
        with self._reading() as db:
            row = db.execute("SELECT project FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row[0]

    @_translated
    def list(
        self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "", projects: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        where, args = list_filter("?", state=state, project=project, owner=owner, terminal=terminal, after=after, projects=projects)
        out = []
        with self._reading() as db:
            for job_id, record, seq in db.execute(f"SELECT id, record, seq FROM jobs WHERE {where} ORDER BY seq LIMIT ?", (*args, limit)).fetchall():
                exported = self._export(db, job_id, record)
                exported["_seq"] = seq
                out.append(exported)
        return out

    @_translated
    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        check_mark(state, source, err_class, backend_ref)
        message = stored_message(message, self.max_message_bytes)
        with self._writing() as db:
            row = db.execute("SELECT record, state, terminal, project, gpus FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            record = json.loads(row[0])
            if apply_mark(job_id, record, row[1], bool(row[2]), state, source, backend_ref, err_class):
                last = int(db.execute("SELECT MAX(n) FROM transitions WHERE job_id = ?", (job_id,)).fetchone()[0])
                check_room(job_id, last, state, self.max_transitions)
                db.execute("INSERT INTO transitions VALUES (?, ?, ?, ?, ?, ?)", (job_id, last + 1, now(), state, message, source))
                db.execute("UPDATE jobs SET record = ?, state = ?, terminal = ? WHERE id = ?", (json.dumps(record), state, int(state in TERMINAL), job_id))
                if state in TERMINAL:  # its GPUs no longer count against the project
                    db.execute("UPDATE project_usage SET gpus = gpus - ? WHERE project = ?", (row[4], row[3]))
            else:
                db.execute("UPDATE jobs SET record = ? WHERE id = ?", (json.dumps(record), job_id))
            # Read in the same transaction: the caller gets what this mark committed.
            return self._get(db, job_id)

    @_translated
    def transitions(self, job_id: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        with self._reading() as db:
            rows = db.execute("SELECT n, ts, state, message, source FROM transitions WHERE job_id = ? AND n > ? ORDER BY n", (job_id, after)).fetchall()
        return [(n, {"ts": ts, "state": state, "message": message, "source": source}) for n, ts, state, message, source in rows]

    @_translated
    def latest(self, job_ids: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._reading() as db:
            for i in range(0, len(job_ids), _IDS_PER_QUERY):
                chunk = job_ids[i : i + _IDS_PER_QUERY]
                marks = ", ".join("?" * len(chunk))
                out.update(db.execute(f"SELECT job_id, MAX(n) FROM transitions WHERE job_id IN ({marks}) GROUP BY job_id", chunk).fetchall())
        return out

    def close(self) -> None:
        self._pool.close()
