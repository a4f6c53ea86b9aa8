"""PostgreSQL, for several service replicas sharing state (psycopg 3). The quota check
and the insert run in one transaction under a per-project advisory lock, so two
replicas never oversubscribe a project; an idempotency key is looked up and written
under an advisory lock of its own, so two replicas sent one key open one record; marks
lock the job's row. Connections come from a small pool; the driver's failures leave as
StoreFull or StoreUnavailable, and what a caller sent is stored whole, NUL characters
included."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

import blake3
import psycopg

from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TRANSITIONS
from jobgate.store.base import (
    PRUNE_BATCH,
    TERMINAL,
    ConnectionPool,
    IdempotencyKey,
    JobNotFound,
    NewJob,
    Pruning,
    Remembered,
    StoreFull,
    StoreUnavailable,
    apply_mark,
    check_mark,
    check_room,
    job_suffix,
    key_bytes,
    list_filter,
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
    # 4: TEXT and JSONB cannot hold NUL (U+0000), which a document or a message may
    # carry: a record is kept as json (its text, where NUL is the escape \\u0000) and a
    # message as its UTF-8 bytes. Nothing queries inside either.
    """
    ALTER TABLE jobs ALTER COLUMN record TYPE json USING record::json;
    ALTER TABLE transitions ALTER COLUMN message TYPE bytea USING convert_to(message, 'UTF8');
    """,
    # 5: idempotency keys, per account: the first admission made with each (its job and
    # the report a retry gets back) and the fingerprint of its request. Keys and reports
    # are bytes (they may hold NUL); `created` is seconds since the epoch.
    """
    CREATE TABLE idempotency_keys (
        account TEXT NOT NULL,
        key BYTEA NOT NULL,
        fingerprint BYTEA NOT NULL,
        job_id TEXT NOT NULL REFERENCES jobs (id),
        report BYTEA NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (account, key)
    );
    CREATE INDEX idempotency_keys_created ON idempotency_keys (created);
    """,
]

# Ids per query of `latest`.
_IDS_PER_QUERY = 500
# The class of the two-number advisory locks that guard idempotency keys (a space of
# its own: the one-number project locks never collide with them).
KEY_LOCKS = 0x6A67_6964  # "jgid"


def key_lock(key: IdempotencyKey) -> int:
    """The advisory lock number of an account's key (two keys sharing one merely wait
    for each other)."""
    digest = blake3.blake3(key.account.encode() + b"\x00" + key_bytes(key.key)).digest(4)
    return int.from_bytes(digest, "little", signed=True)


def _translated(method):
    """The driver's failures as the store's own: a full disk is StoreFull, a server
    that cannot be reached (down, restarting, out of connections) is StoreUnavailable.
    The details, which name the server and the SQL, are logged, never passed on."""

    @functools.wraps(method)
    def inner(self: PostgresStore, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except psycopg.errors.DiskFull as e:
            log.error("job store disk full", extra={"fields": {"error": str(e)}})
            raise StoreFull("the disk holding the job store (PostgreSQL) is full; nothing was written") from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            log.error("job store unavailable", extra={"fields": {"error": str(e)}})
            raise StoreUnavailable("the job store is unavailable; retry shortly") from None

    return inner


def _text(*values: str) -> bool:
    """Whether PostgreSQL TEXT can hold the values: no stored id or name has a NUL, so
    a lookup by one that does finds nothing rather than failing."""
    return not any("\x00" in v for v in values)


class PostgresStore:
    def __init__(
        self,
        url: str,
        *,
        connections: int = 16,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_transitions: int = DEFAULT_MAX_TRANSITIONS,
    ) -> None:
        self.url = url
        self.max_message_bytes, self.max_transitions = max_message_bytes, max_transitions
        self._pool: ConnectionPool[psycopg.Connection] = ConnectionPool(self._connect, connections, usable=lambda db: not db.closed, close=psycopg.Connection.close)
        self._pruning = Pruning()
        self._migrate()

    def _connect(self) -> psycopg.Connection:
        # A server that does not answer must not hold a caller forever.
        options = {} if "connect_timeout" in self.url else {"connect_timeout": 10}
        return psycopg.connect(self.url, autocommit=False, **options)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        with self._pool.connection() as db, db.transaction():
            yield db

    @_translated
    def _migrate(self) -> None:
        with self._transaction() as db:
            db.execute("SELECT pg_advisory_xact_lock(4242)")  # one migrator at a time
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    db.execute(sql)
                    db.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, now()))

    @_translated
    def gpus_in_use(self, project: str) -> int:
        if not _text(project):
            return 0
        with self._transaction() as db:
            row = db.execute("SELECT gpus FROM project_usage WHERE project = %s", (project,)).fetchone()
        return int(row[0]) if row else 0

    @_translated
    def usage(self) -> dict[str, int]:
        with self._transaction() as db:
            return {project: int(gpus) for project, gpus in db.execute("SELECT project, gpus FROM project_usage WHERE gpus > 0")}

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | Remembered | None:
        return self.admit_many([(job, decide)])[0]

    @_translated
    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | Remembered | None]:
        """Admits in order in one transaction (one commit for the group), holding the
        advisory lock of every project involved, then of every idempotency key, each
        kind taken in sorted order: every transaction locks in one order (no deadlock).

        A group costs two round trips whatever its size: the locks, the keys recalled,
        the projects' usage and the ids go in one pipeline (each statement begins after
        the one before it ends, so the reads see every replica that held a lock before
        this one), the decisions are made here, and every write and the commit go in a
        second. Within the group, usage and keys are carried forward as the sequential
        reads would have seen them."""
        jobs = [(storable(job), decide) for job, decide in items]
        keyed = [job.idempotency for job, _ in jobs if job.idempotency is not None and _text(job.idempotency.account)]
        with self._pool.connection() as db, db.pipeline(), db.transaction():
            projects = sorted({job.project for job, _ in jobs})
            db.execute("SELECT pg_advisory_xact_lock(hashtext('jobgate.quota:' || p)) FROM unnest(%s::text[]) WITH ORDINALITY AS t(p, i) ORDER BY i", (projects,))
            locks = sorted({key_lock(job.idempotency) for job, _ in jobs if job.idempotency is not None})
            if locks:
                db.execute("SELECT pg_advisory_xact_lock(%s, k) FROM (SELECT unnest(%s::int4[]) AS k ORDER BY k) AS keys", (KEY_LOCKS, locks))
            recalled = None
            if keyed:
                recalled = db.execute(
                    "SELECT k.account, k.key, ik.job_id, ik.fingerprint, ik.report FROM unnest(%s::text[], %s::bytea[], %s::float8[]) AS k(account, key, since) "
                    "JOIN idempotency_keys ik ON ik.account = k.account AND ik.key = k.key AND ik.created >= k.since",
                    ([k.account for k in keyed], [key_bytes(k.key) for k in keyed], [time.time() - k.window for k in keyed]),
                )
            usage_rows = db.execute("SELECT project, gpus FROM project_usage WHERE project = ANY(%s)", (projects,))
            numbers = db.execute("SELECT nextval('job_id_seq') FROM generate_series(1, %s)", (len(jobs),))
            # Fetching ends the first round trip.
            remembered = {(account, bytes(key)): Remembered(job_id, bytes(fingerprint), bytes(report)) for account, key, job_id, fingerprint, report in (recalled.fetchall() if recalled else [])}
            usage = {project: int(gpus) for project, gpus in usage_rows.fetchall()}
            ids = [int(n) for (n,) in numbers.fetchall()]
            opened: list[str | Remembered | None] = []
            for (job, decide), number in zip(jobs, ids, strict=True):
                opened.append(self._open(db, job, decide, number, usage, remembered))
        window = self._pruning.due([job for job, _ in items])
        if window is not None:
            self._prune(window)
        return opened

    def _open(
        self,
        db: psycopg.Connection,
        job: NewJob,
        decide: Callable[[int], bool],
        number: int,
        usage: dict[str, int],
        remembered: dict[tuple[str, bytes], Remembered],
    ) -> str | Remembered | None:
        """One admission of a group: decided on `usage` and `remembered` as the group
        has left them (both updated here), its writes queued in the pipeline."""
        key = job.idempotency
        slot = (key.account, key_bytes(key.key)) if key is not None else None
        if slot is not None and slot in remembered:
            return remembered[slot]
        if not decide(usage.get(job.project, 0)):
            return None
        usage[job.project] = usage.get(job.project, 0) + job.gpus
        job_id = job_suffix(job.id_prefix, number)
        ts = now()
        db.execute(
            "INSERT INTO project_usage VALUES (%s, %s) ON CONFLICT (project) DO UPDATE SET gpus = project_usage.gpus + excluded.gpus",
            (job.project, job.gpus),
        )
        db.execute(
            "INSERT INTO jobs (id, project, owner, gpus, state, record, document) VALUES (%s, %s, %s, %s, 'PENDING', %s, %s)",
            (job_id, job.project, job.owner, job.gpus, json.dumps(opened_record(job, job_id, ts)), job.document),
        )
        db.execute("INSERT INTO transitions VALUES (%s, 1, %s, 'PENDING', %s, 'agent')", (job_id, ts, b"record opened at admission"))
        if key is not None and slot is not None:
            report = key.report()
            # An expired row for the key is replaced: the key starts afresh.
            db.execute(
                "INSERT INTO idempotency_keys VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (account, key) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, job_id = excluded.job_id, report = excluded.report, created = excluded.created",
                (key.account, slot[1], key.fingerprint, job_id, report, time.time()),
            )
            if _text(key.account):
                remembered[slot] = Remembered(job_id, key.fingerprint, report)
        return job_id

    def _recall(self, db: psycopg.Connection, account: str, keys: list[str], window: float) -> dict[str, Remembered]:
        if not _text(account):
            return {}
        out: dict[str, Remembered] = {}
        for i in range(0, len(keys), _IDS_PER_QUERY):
            chunk = {key_bytes(k): k for k in keys[i : i + _IDS_PER_QUERY]}
            rows = db.execute(
                "SELECT key, job_id, fingerprint, report FROM idempotency_keys WHERE account = %s AND key = ANY(%s) AND created >= %s",
                (account, list(chunk), time.time() - window),
            )
            for key, job_id, fingerprint, report in rows:
                out[chunk[bytes(key)]] = Remembered(job_id, bytes(fingerprint), bytes(report))
        return out

    @_translated
    def recall(self, account: str, keys: Collection[str], window: float) -> dict[str, Remembered]:
        # Every keyed admission looks its key up first: one statement at a time, each
        # its own transaction as it would be in READ COMMITTED anyway, so neither BEGIN
        # nor COMMIT costs a round trip.
        with self._pool.connection() as db:
            db.autocommit = True
            try:
                return self._recall(db, account, list(dict.fromkeys(keys)), window)
            finally:
                if not db.closed:
                    db.autocommit = False

    def _prune(self, window: float) -> None:
        """Deletes keys older than `window`, at most PRUNE_BATCH of them, passing over
        rows another transaction holds; a failure is only logged: an expired key is
        ignored by every lookup anyway."""
        try:
            with self._transaction() as db:
                db.execute(
                    "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(SELECT ctid FROM idempotency_keys WHERE created < %s LIMIT %s FOR UPDATE SKIP LOCKED))",
                    (time.time() - window, PRUNE_BATCH),
                )
        except Exception as e:  # noqa: BLE001 - the admissions before it are committed
            log.warning("pruning expired idempotency keys failed", extra={"fields": {"error": str(e)}})

    def _export(self, db: psycopg.Connection, job_id: str, record: dict[str, Any]) -> dict[str, Any]:
        record = dict(record)
        record["transitions"] = [
            {"ts": ts, "state": state, "message": bytes(message).decode("utf-8"), "source": source}
            for ts, state, message, source in db.execute("SELECT ts, state, message, source FROM transitions WHERE job_id = %s ORDER BY n", (job_id,))
        ]
        return record

    def _get(self, db: psycopg.Connection, job_id: str) -> dict[str, Any]:
        row = db.execute("SELECT record FROM jobs WHERE id = %s", (job_id,)).fetchone() if _text(job_id) else None
        if row is None:
            raise JobNotFound(job_id)
        return self._export(db, job_id, row[0])

    @_translated
    def get(self, job_id: str) -> dict[str, Any]:
        with self._transaction() as db:
            return self._get(db, job_id)

    @_translated
    def document(self, job_id: str) -> bytes:
        row = None
        if _text(job_id):
            with self._transaction() as db:
                row = db.execute("SELECT document FROM jobs WHERE id = %s", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return bytes(row[0])

    @_translated
    def project(self, job_id: str) -> str:
        row = None
        if _text(job_id):
            with self._transaction() as db:
                row = db.execute("SELECT project FROM jobs WHERE id = %s", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row[0]

    @_translated
    def list(
        self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "", projects: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        if not _text(state, project, owner):
            return []
        if projects is not None:
            projects = [p for p in projects if _text(p)]  # no stored project holds a NUL
        where, args = list_filter("%s", state=state, project=project, owner=owner, terminal=terminal, after=after, projects=projects)
        out = []
        with self._transaction() as db:
            for job_id, record, seq in db.execute(f"SELECT id, record, seq FROM jobs WHERE {where} ORDER BY seq LIMIT %s", (*args, limit)).fetchall():
                exported = self._export(db, job_id, record)
                exported["_seq"] = seq
                out.append(exported)
        return out

    @_translated
    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        check_mark(state, source, err_class, backend_ref)
        if not _text(job_id):
            raise JobNotFound(job_id)
        message = stored_message(message, self.max_message_bytes)
        with self._transaction() as db:
            row = db.execute("SELECT record, state, terminal, project, gpus FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            record = dict(row[0])
            if apply_mark(job_id, record, row[1], row[2], state, source, backend_ref, err_class):
                last = int(db.execute("SELECT MAX(n) FROM transitions WHERE job_id = %s", (job_id,)).fetchone()[0])
                check_room(job_id, last, state, self.max_transitions)
                db.execute("INSERT INTO transitions VALUES (%s, %s, %s, %s, %s, %s)", (job_id, last + 1, now(), state, message.encode("utf-8"), source))
                db.execute("UPDATE jobs SET record = %s, state = %s, terminal = %s WHERE id = %s", (json.dumps(record), state, state in TERMINAL, job_id))
                if state in TERMINAL:  # its GPUs no longer count against the project
                    db.execute("UPDATE project_usage SET gpus = gpus - %s WHERE project = %s", (row[4], row[3]))
            else:
                db.execute("UPDATE jobs SET record = %s WHERE id = %s", (json.dumps(record), job_id))
            # Read in the same transaction: the caller gets what this mark committed.
            return self._get(db, job_id)

    @_translated
    def transitions(self, job_id: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        if not _text(job_id):
            return []
        with self._transaction() as db:
            rows = db.execute("SELECT n, ts, state, message, source FROM transitions WHERE job_id = %s AND n > %s ORDER BY n", (job_id, after)).fetchall()
        return [(n, {"ts": ts, "state": state, "message": bytes(message).decode("utf-8"), "source": source}) for n, ts, state, message, source in rows]

    @_translated
    def latest(self, job_ids: list[str]) -> dict[str, int]:
        ids = [i for i in job_ids if _text(i)]
        out: dict[str, int] = {}
        with self._transaction() as db:
            for i in range(0, len(ids), _IDS_PER_QUERY):
                out.update(db.execute("SELECT job_id, MAX(n) FROM transitions WHERE job_id = ANY(%s) GROUP BY job_id", (ids[i : i + _IDS_PER_QUERY],)).fetchall())
        return out

    def close(self) -> None:
        self._pool.close()
