"""PostgreSQL, for several service replicas sharing state (psycopg 3). The quota check
and the insert run in one transaction under a per-project advisory lock, so two
replicas never oversubscribe a project; marks lock the job's row."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

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
        seq BIGSERIAL UNIQUE,
        project TEXT NOT NULL,
        owner TEXT NOT NULL,
        gpus BIGINT NOT NULL,
        state TEXT NOT NULL,
        terminal BOOLEAN NOT NULL DEFAULT FALSE,
        record JSONB NOT NULL,
        document BYTEA NOT NULL
    );
    CREATE INDEX jobs_project_open ON jobs (project) WHERE NOT terminal;
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
    # 2: one row per project holding its GPUs in unfinished jobs: the quota is O(1).
    """
    CREATE TABLE project_usage (project TEXT PRIMARY KEY, gpus BIGINT NOT NULL);
    INSERT INTO project_usage SELECT project, SUM(gpus) FROM jobs WHERE NOT terminal GROUP BY project;
    """,
    # 3: job ids unique by construction, across replicas
    """
    CREATE SEQUENCE job_id_seq;
    """,
]


class PostgresStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._migrate()

    def _db(self) -> psycopg.Connection:
        db = getattr(self._local, "db", None)
        if db is None or db.closed:
            db = psycopg.connect(self.url, autocommit=False)
            self._local.db = db
        return db

    def _migrate(self) -> None:
        db = self._db()
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(4242)")  # one migrator at a time
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    db.execute(sql)
                    db.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, now()))

    def gpus_in_use(self, project: str) -> int:
        db = self._db()
        with db.transaction():
            row = db.execute("SELECT gpus FROM project_usage WHERE project = %s", (project,)).fetchone()
            return int(row[0]) if row else 0

    def usage(self) -> dict[str, int]:
        db = self._db()
        with db.transaction():
            return {project: int(gpus) for project, gpus in db.execute("SELECT project, gpus FROM project_usage WHERE gpus > 0")}

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | None:
        return self.admit_many([(job, decide)])[0]

    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | None]:
        """Admits in order in one transaction (one commit for the group), holding the
        advisory lock of every project involved, taken in sorted order (no deadlock)."""
        db = self._db()
        with db.transaction():
            for project in sorted({job.project for job, _ in items}):
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"jobgate.quota:{project}",))
            return [self._open(db, job, decide) for job, decide in items]

    def _open(self, db: psycopg.Connection, job: NewJob, decide: Callable[[int], bool]) -> str | None:
        usage, number = db.execute("SELECT (SELECT gpus FROM project_usage WHERE project = %s), nextval('job_id_seq')", (job.project,)).fetchone()
        if not decide(int(usage or 0)):
            return None
        job_id = job_suffix(job.id_prefix, int(number))
        ts = now()
        # The three writes travel together: one round trip instead of three.
        with db.pipeline():
            db.execute(
                "INSERT INTO project_usage VALUES (%s, %s) ON CONFLICT (project) DO UPDATE SET gpus = project_usage.gpus + excluded.gpus",
                (job.project, job.gpus),
            )
            db.execute(
                "INSERT INTO jobs (id, project, owner, gpus, state, record, document) VALUES (%s, %s, %s, %s, 'PENDING', %s, %s)",
                (job_id, job.project, job.owner, job.gpus, json.dumps(opened_record(job, job_id, ts)), job.document),
            )
            db.execute("INSERT INTO transitions VALUES (%s, 1, %s, 'PENDING', 'record opened at admission', 'agent')", (job_id, ts))
        return job_id

    def _export(self, db: psycopg.Connection, job_id: str, record: dict[str, Any]) -> dict[str, Any]:
        record = dict(record)
        record["transitions"] = [
            {"ts": ts, "state": state, "message": message, "source": source}
            for ts, state, message, source in db.execute("SELECT ts, state, message, source FROM transitions WHERE job_id = %s ORDER BY n", (job_id,))
        ]
        return record

    def get(self, job_id: str) -> dict[str, Any]:
        db = self._db()
        with db.transaction():
            row = db.execute("SELECT record FROM jobs WHERE id = %s", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            return self._export(db, job_id, row[0])

    def document(self, job_id: str) -> bytes:
        db = self._db()
        with db.transaction():
            row = db.execute("SELECT document FROM jobs WHERE id = %s", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return bytes(row[0])

    def list(self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "") -> list[dict[str, Any]]:
        where, args = list_filter("%s", state=state, project=project, owner=owner, terminal=terminal, after=after)
        db = self._db()
        with db.transaction():
            rows = db.execute(f"SELECT id, record, seq FROM jobs WHERE {where} ORDER BY seq LIMIT %s", (*args, limit)).fetchall()
            out = []
            for job_id, record, seq in rows:
                exported = self._export(db, job_id, record)
                exported["_seq"] = seq
                out.append(exported)
        return out

    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        check_mark(state, source, err_class)
        db = self._db()
        with db.transaction():
            row = db.execute("SELECT record, state, terminal, project, gpus FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            record = dict(row[0])
            if apply_mark(job_id, record, row[1], row[2], state, source, backend_ref, err_class):
                n = int(db.execute("SELECT MAX(n) FROM transitions WHERE job_id = %s", (job_id,)).fetchone()[0]) + 1
                db.execute("INSERT INTO transitions VALUES (%s, %s, %s, %s, %s, %s)", (job_id, n, now(), state, redact(message), source))
                db.execute("UPDATE jobs SET record = %s, state = %s, terminal = %s WHERE id = %s", (json.dumps(record), state, state in TERMINAL, job_id))
                if state in TERMINAL:  # its GPUs no longer count against the project
                    db.execute("UPDATE project_usage SET gpus = gpus - %s WHERE project = %s", (row[4], row[3]))
            else:
                db.execute("UPDATE jobs SET record = %s WHERE id = %s", (json.dumps(record), job_id))
        return self.get(job_id)

    def transitions(self, job_id: str, after: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
        db = self._db()
        with db.transaction():
            rows = db.execute("SELECT n, ts, state, message, source FROM transitions WHERE job_id = %s AND n > %s ORDER BY n", (job_id, after)).fetchall()
        for n, ts, state, message, source in rows:
            yield n, {"ts": ts, "state": state, "message": message, "source": source}

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
