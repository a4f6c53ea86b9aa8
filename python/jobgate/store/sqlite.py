"""SQLite, the embedded default: one file in WAL mode, versioned migrations, and one
write transaction (BEGIN IMMEDIATE) per admission, so quota checks and inserts are
atomic across threads and processes."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jobgate.store.base import (
    TERMINAL,
    JobNotFound,
    NewJob,
    apply_mark,
    check_mark,
    job_suffix,
    list_filter,
    now,
    opened_record,
    redact,
)

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
]


class SqliteStore:
    def __init__(self, directory: str | Path, synchronous: str = "normal") -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be normal or full, not {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "jobs.sqlite3"
        self._local = threading.local()
        self._migrate()

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA busy_timeout=30000")
            self._local.db = db
        return db

    def _migrate(self) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    for statement in filter(str.strip, sql.split(";")):
                        db.execute(statement)
                    db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now()))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def gpus_in_use(self, project: str) -> int:
        row = self._db().execute("SELECT gpus FROM project_usage WHERE project = ?", (project,)).fetchone()
        return int(row[0]) if row else 0

    def usage(self) -> dict[str, int]:
        return {project: int(gpus) for project, gpus in self._db().execute("SELECT project, gpus FROM project_usage WHERE gpus > 0")}

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | None:
        return self.admit_many([(job, decide)])[0]

    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | None]:
        """Admits in order in one write transaction (one fsync for the group): each
        decision sees the GPUs of the records opened before it."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            ids = [self._open(db, job, decide) for job, decide in items]
            db.execute("COMMIT")
            return ids
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _open(self, db: sqlite3.Connection, job: NewJob, decide: Callable[[int], bool]) -> str | None:
        row = db.execute("SELECT gpus FROM project_usage WHERE project = ?", (job.project,)).fetchone()
        if not decide(int(row[0]) if row else 0):
            return None
        seq = int(db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0])
        job_id = job_suffix(job.id_prefix, seq)  # seq is taken inside the write transaction: unique
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
        return job_id

    def _export(self, db: sqlite3.Connection, row: tuple) -> dict[str, Any]:
        job_id, record_json = row
        record = json.loads(record_json)
        for private in ("owner", "project", "gpus"):
            record.pop(private, None)
        record["transitions"] = [
            {"ts": ts, "state": state, "message": message, "source": source}
            for ts, state, message, source in db.execute("SELECT ts, state, message, source FROM transitions WHERE job_id = ? ORDER BY n", (job_id,))
        ]
        return record

    def get(self, job_id: str) -> dict[str, Any]:
        db = self._db()
        row = db.execute("SELECT id, record FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return self._export(db, row)

    def document(self, job_id: str) -> bytes:
        row = self._db().execute("SELECT document FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return bytes(row[0])

    def list(self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "") -> list[dict[str, Any]]:
        where, args = list_filter("?", state=state, project=project, owner=owner, terminal=terminal, after=after)
        db = self._db()
        rows = db.execute(f"SELECT id, record, seq FROM jobs WHERE {where} ORDER BY seq LIMIT ?", (*args, limit)).fetchall()
        out = []
        for job_id, record, seq in rows:
            exported = self._export(db, (job_id, record))
            exported["_seq"] = seq
            out.append(exported)
        return out

    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        check_mark(state, source, err_class)
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT record, state, terminal, project, gpus FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            record = json.loads(row[0])
            if apply_mark(job_id, record, row[1], bool(row[2]), state, source, backend_ref, err_class):
                n = int(db.execute("SELECT MAX(n) FROM transitions WHERE job_id = ?", (job_id,)).fetchone()[0]) + 1
                db.execute("INSERT INTO transitions VALUES (?, ?, ?, ?, ?, ?)", (job_id, n, now(), state, redact(message), source))
                db.execute("UPDATE jobs SET record = ?, state = ?, terminal = ? WHERE id = ?", (json.dumps(record), state, int(state in TERMINAL), job_id))
                if state in TERMINAL:  # its GPUs no longer count against the project
                    db.execute("UPDATE project_usage SET gpus = gpus - ? WHERE project = ?", (row[4], row[3]))
            else:
                db.execute("UPDATE jobs SET record = ? WHERE id = ?", (json.dumps(record), job_id))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return self.get(job_id)

    def transitions(self, job_id: str, after: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
        db = self._db()
        for n, ts, state, message, source in db.execute("SELECT n, ts, state, message, source FROM transitions WHERE job_id = ? AND n > ? ORDER BY n", (job_id, after)):
            yield n, {"ts": ts, "state": state, "message": message, "source": source}

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
