"""PostgreSQL, for several service replicas sharing state (psycopg 3). The quota check
and the insert run in one transaction under a per-project advisory lock, so two
replicas never oversubscribe a project; an idempotency key is looked up and written
under an advisory lock of its own, so two replicas sent one key open one record; marks
lock the job's row. Connections come from a small pool; the driver's failures leave as
StoreFull or StoreUnavailable, and what a caller sent is stored whole, NUL characters
included. Only the dialect is here: the transactions are `SqlStore`'s."""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import blake3
import orjson
import psycopg

import jobgate._core
from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TRANSITIONS
from jobgate.store.base import (
    ConnectionPool,
    IdempotencyKey,
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
from jobgate.store.skeleton import CommitGroup, GroupRead, Lookup, NumbersAhead, Slot, SqlStore, T

log = logging.getLogger("jobgate.store")

# The class of the two-number advisory locks that guard idempotency keys (a space of
# its own: the one-number project locks never collide with them).
KEY_LOCKS = 0x6A67_6964  # "jgid"

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
    # 6: the key that permutes job numbers into ids, one row shared by every replica
    # (written at open when missing, under the migration lock).
    """
    CREATE TABLE job_id_key (one INTEGER PRIMARY KEY CHECK (one = 1), key BYTEA NOT NULL);
    """,
    # 7: every write of a commit group as one function, so that a group that reads
    # nothing first is one statement in autocommit: its locks, its writes and its
    # commit in one message and one answer. It takes the advisory locks of the group's
    # projects, then of its idempotency keys (a row with `k`), in the order given
    # (none when the transaction holds them already); then, in a statement of its own
    # (a volatile function's statements each take a snapshot, which sees every replica
    # that held a lock before this one), it writes the group: a key unless its row is
    # still within its window (an expired row is replaced: the key starts afresh), a
    # record only with its key or without one, in admission order (their seq), first
    # transitions, the usage charged per project (foreign keys checked at the end of
    # the statement, when the jobs are in). A row without an id (a refused admission's)
    # only looks its key up. Returns, as JSON, what each key not written recalls: under
    # the key's lock, the snapshot holds every admission made with it before.
    f"""
    CREATE FUNCTION jobgate_open_group(group_locks json, group_rows json) RETURNS text LANGUAGE plpgsql AS $body$
    DECLARE recalled text;
    BEGIN
        PERFORM CASE WHEN t.k IS NULL THEN pg_advisory_xact_lock(hashtext('jobgate.quota:' || t.p)) ELSE pg_advisory_xact_lock({KEY_LOCKS}, t.k) END
        FROM ROWS FROM (json_to_recordset(group_locks) AS (p text, k int4)) WITH ORDINALITY AS t(p, k, i) ORDER BY t.i;
        WITH given AS MATERIALIZED (SELECT * FROM ROWS FROM (json_to_recordset(group_rows) AS
            (id text, project text, owner text, gpus int8, ts text, record text, document text, account text, key text, fingerprint text, report text, created float8, since float8))
            WITH ORDINALITY AS t(id, project, owner, gpus, ts, record, document, account, key, fingerprint, report, created, since, i)),
        keys_written AS (INSERT INTO idempotency_keys AS ik (account, key, fingerprint, job_id, report, created)
            SELECT account, decode(key, 'hex'), decode(fingerprint, 'hex'), id, decode(report, 'base64'), created FROM given WHERE id IS NOT NULL AND key IS NOT NULL ORDER BY i
            ON CONFLICT (account, key) DO UPDATE SET fingerprint = excluded.fingerprint, job_id = excluded.job_id, report = excluded.report, created = excluded.created
            WHERE ik.created < (SELECT g.since FROM given AS g WHERE g.id = excluded.job_id) RETURNING job_id),
        opened AS (SELECT * FROM given WHERE key IS NULL OR id IN (SELECT job_id FROM keys_written)),
        records AS (INSERT INTO jobs (id, project, owner, gpus, state, record, document)
            SELECT id, project, owner, gpus, 'PENDING', record::json, decode(document, 'base64') FROM opened ORDER BY i),
        first_transitions AS (INSERT INTO transitions (job_id, n, ts, state, message, source)
            SELECT id, 1, ts, 'PENDING', convert_to('record opened at admission', 'UTF8'), 'agent' FROM opened ORDER BY i),
        charged AS (INSERT INTO project_usage (project, gpus) SELECT project, sum(gpus) FROM opened GROUP BY project ORDER BY project
            ON CONFLICT (project) DO UPDATE SET gpus = project_usage.gpus + excluded.gpus)
        SELECT (SELECT json_agg(json_build_array(g.account, g.key, ik.job_id, encode(ik.fingerprint, 'hex'), encode(ik.report, 'hex')))
            FROM given AS g, LATERAL (SELECT * FROM idempotency_keys WHERE account = g.account AND key = decode(g.key, 'hex') AND created >= g.since LIMIT 1) AS ik
            WHERE g.key IS NOT NULL AND (g.id IS NULL OR g.id NOT IN (SELECT job_id FROM keys_written)))::text INTO recalled;
        RETURN recalled;
    END
    $body$;
    """,
]



# A commit group's statements take their rows as one JSON text each (orjson builds it;
# bytes travel as hex or base64), so that a group costs the driver a few parameters
# whatever its size. Each is prepared on a connection at its first use there (planned
# once per connection, not per group) by psycopg, which prepares every statement of the
# store: psycopg deallocates all of a connection's prepared statements when one of its
# transactions rolls back (a refused mark, any failed statement) and prepares them again
# when next used, which it can do only for statements it prepared itself.
#
# The first takes the advisory locks of its projects, then of its idempotency keys (a
# row with `k`), in the order given.
_LOCKS = (
    f"SELECT CASE WHEN t.k IS NULL THEN pg_advisory_xact_lock(hashtext('jobgate.quota:' || t.p)) ELSE pg_advisory_xact_lock({KEY_LOCKS}, t.k) END "
    "FROM ROWS FROM (json_to_recordset(%s::json) AS (p text, k int4)) WITH ORDINALITY AS t(p, k, i) ORDER BY t.i"
)
# The second, a statement of its own so that its snapshot sees every replica that held
# a lock before this one: the group's job numbers, its projects' usage and what its
# keys recall within their windows, as one JSON object (each key looked up by its
# index, however many the table holds).
_READ = (
    "SELECT json_build_object("
    "'ids', ARRAY(SELECT nextval('job_id_seq') FROM generate_series(1, %s::int)), "
    "'usage', (SELECT json_agg(json_build_array(project, gpus)) FROM project_usage WHERE project = ANY(ARRAY(SELECT json_array_elements_text(%s::json)))), "
    "'recalled', (SELECT json_agg(json_build_array(k.account, k.key, ik.job_id, encode(ik.fingerprint, 'hex'), encode(ik.report, 'hex'))) "
    "FROM json_to_recordset(%s::json) AS k(account text, key text, since float8), "
    "LATERAL (SELECT * FROM idempotency_keys WHERE account = k.account AND key = decode(k.key, 'hex') AND created >= k.since LIMIT 1) AS ik))::text"
)
# The last: every write of the group, and what its keys not written recall, as JSON
# (`jobgate_open_group`, migration 7), taking the locks given first. After `_READ`
# recalled the group's keys, every key is written.
_OPEN = "SELECT jobgate_open_group(%s::json, %s::json)"
# The same, as the core's writer prepares it (`PostgresWriter`): a batch of records
# opened beside the calls, none with a key.
_OPEN_LATER = "SELECT jobgate_open_group($1::json, $2::json)"
# The SQLSTATE of a record the writer closed before writing (postgres_writer.rs: a
# class of jobgate's own, which PostgreSQL never uses).
_UNWRITTEN = "JG000"


def loaded_libpq() -> str | None:
    """The path of the one libpq this process has loaded (psycopg's), which the core's
    writer calls too; None when there is not exactly one (the writer is then not used)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {fields[5].strip() for fields in (line.split(None, 5) for line in maps) if len(fields) == 6}
    except OSError:
        return None
    found = [path for path in paths if os.path.basename(path).startswith("libpq.so") or os.path.basename(path).startswith("libpq-")]
    return found[0] if len(found) == 1 else None


def _store_failure(error: type[psycopg.Error], detail: str) -> StoreFull | StoreUnavailable | None:
    """What a failure of the driver's class `error` is to the store's callers, whether
    the driver raised it or the core's writer met its SQLSTATE: a full disk is
    StoreFull; a server that cannot be reached (down, restarting, out of connections)
    or is read-only (a standby, a primary that failed over) is StoreUnavailable;
    anything else None (raised as it is). The `detail`, which names the server and the
    SQL, is logged, never passed on."""
    if issubclass(error, psycopg.errors.DiskFull):
        log.error("job store disk full", extra={"fields": {"error": detail}})
        return StoreFull("the disk holding the job store (PostgreSQL) is full; nothing was written")
    if issubclass(error, (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.ReadOnlySqlTransaction)):
        log.error("job store unavailable", extra={"fields": {"error": detail}})
        return StoreUnavailable("the job store is unavailable; retry shortly")
    return None


def _opening_row(job: NewJob, job_id: str, ts: str) -> dict[str, Any]:
    """An opened record's row as `jobgate_open_group` reads it (without a key)."""
    return {
        "id": job_id,
        "project": job.project,
        "owner": job.owner,
        "gpus": job.gpus,
        "ts": ts,
        "record": record_json(opened_record(job, job_id, ts)),
        "document": base64.b64encode(job.document).decode("ascii"),
    }


def _rows(group: CommitGroup) -> str:
    """A decided group's rows as `_OPEN` takes them, in admission order: each opening
    with its key, and each key a refused member's lookup sends."""
    rows: list[dict[str, Any]] = []
    for entry in group.entries:
        if isinstance(entry, Lookup):
            rows.append({"account": entry.slot[0], "key": entry.slot[1].hex(), "since": entry.since})
            continue
        job = entry.job
        row = _opening_row(job, entry.job_id, entry.ts)
        key = job.idempotency
        if key is not None and entry.slot is not None:
            row.update(
                account=key.account,
                key=entry.slot[1].hex(),
                fingerprint=key.fingerprint.hex(),
                report=base64.b64encode(entry.report).decode("ascii"),
                created=entry.created,
                since=entry.created - key.window,
            )
        rows.append(row)
    return orjson.dumps(rows).decode()


def _recalled(rows: list[list[str]] | None) -> dict[Slot, Remembered]:
    """What keys recall, as `_READ` and `_OPEN` return it (parsed JSON, bytes as hex)."""
    return {
        (account, bytes.fromhex(key)): Remembered(job_id, bytes.fromhex(fingerprint), bytes.fromhex(report))
        for account, key, job_id, fingerprint, report in rows or ()
    }


def key_lock(key: IdempotencyKey) -> int:
    """The advisory lock number of an account's key (two keys sharing one merely wait
    for each other)."""
    digest = blake3.blake3(key.account.encode() + b"\x00" + key_bytes(key.key)).digest(4)
    return int.from_bytes(digest, "little", signed=True)


@contextmanager
def _pipelined(db: psycopg.Connection) -> Iterator[psycopg.Pipeline]:
    """`db` in pipeline mode: statements are sent without waiting for their results,
    which come back together at each sync (one round trip), the transaction begun and
    committed by them: a commit group in one or two round trips. Whatever goes wrong,
    the transaction is rolled back and the connection returned as it was lent (not in
    autocommit)."""
    db.autocommit = True
    try:
        with db.pipeline() as pipeline:
            yield pipeline
    finally:
        if not db.closed:
            try:
                if db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    db.execute("ROLLBACK")
                db.autocommit = False
            except psycopg.Error:
                db.close()  # neither rolled back nor usable: the pool drops it


@contextmanager
def _autocommitted(db: psycopg.Connection) -> Iterator[None]:
    """`db` in autocommit, each statement a transaction of its own; returned as it was
    lent (not in autocommit) whatever goes wrong."""
    db.autocommit = True
    try:
        yield
    finally:
        if not db.closed:
            try:
                db.autocommit = False
            except psycopg.Error:
                db.close()  # not usable: the pool drops it


def _value(cursor: psycopg.Cursor | None) -> Any:
    """The one value a statement returned."""
    row = cursor.fetchone() if cursor is not None else None
    return row[0] if row else None


# What every connection of the store is opened with unless its URL says otherwise: a
# server that stops answering must not hold a caller, or a stopping server, for long.
# `connect_timeout` bounds opening a connection; `tcp_user_timeout` (ms) a statement
# whose bytes the server no longer acknowledges (its host gone, the network cut): the
# kernel gives up after 30 s, where its retransmissions would go on for about 15
# minutes, and the call fails UNAVAILABLE. Keepalives (after 10 s idle, every 5 s) find
# a connection whose server went away while it waited for an answer or sat in the pool.
CONNECTION_DEFAULTS = {"connect_timeout": 10, "tcp_user_timeout": 30_000, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def connection_options(url: str) -> dict[str, Any]:
    """The CONNECTION_DEFAULTS the URL does not set itself; none when it names a libpq
    service (`service=`, or PGSERVICE), whose file the driver reads after us and whose
    settings would otherwise lose to ours."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    if "service" in given or os.environ.get("PGSERVICE"):
        return {}
    return {name: value for name, value in CONNECTION_DEFAULTS.items() if name not in given}


class PostgresStore(SqlStore):
    """The PostgreSQL dialect of the store's transactions (`SqlStore`)."""

    # A commit returns once its WAL is flushed (synchronous_commit).
    syncs_commits = True
    MIGRATIONS = MIGRATIONS
    MARK = "%s"
    LOCKING = " FOR UPDATE"
    # Passing over rows another transaction holds.
    PRUNE = "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(SELECT ctid FROM idempotency_keys WHERE created < %s LIMIT %s FOR UPDATE SKIP LOCKED))"

    def __init__(
        self,
        url: str,
        *,
        connections: int = 16,
        core_writer: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_transitions: int = DEFAULT_MAX_TRANSITIONS,
    ) -> None:
        self.url = url
        self._options = connection_options(url)
        super().__init__(max_message_bytes=max_message_bytes, max_transitions=max_transitions)
        self._pool: ConnectionPool[psycopg.Connection] = ConnectionPool(self._connect, connections, usable=lambda db: not db.closed, close=psycopg.Connection.close)
        # Job numbers taken ahead from the sequence (by groups that read), not given yet.
        self._numbers = NumbersAhead()
        self._id_key = self._migrate()
        # With `core_writer` False, every record goes through `admit_many`.
        self._writer = self._core_writer() if core_writer else None

    def _core_writer(self) -> Any | None:
        """The core's writer on this database, on a connection of its own opened as the
        pool's are, or None where it cannot call psycopg's libpq (then every record is
        opened here)."""
        libpq = loaded_libpq()
        try:
            if libpq is None:
                raise RuntimeError("not exactly one libpq is loaded")
            # UTF-8 whatever the URL or the database says: the rows are sent as such.
            conninfo = psycopg.conninfo.make_conninfo(self.url, **self._options, client_encoding="UTF8")
            return jobgate._core.PostgresWriter(conninfo, _OPEN_LATER, libpq)
        except (RuntimeError, ValueError) as e:
            log.info("the job store opens its records without the core's writer", extra={"fields": {"reason": str(e)}})
            return None

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=False, **self._options)

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection, dropped should the statements psycopg prepared on it
        vanish from its session behind psycopg's back (something reset the session):
        a new connection prepares them afresh."""
        with self._pool.connection() as db:
            try:
                yield db
            except psycopg.errors.InvalidSqlStatementName:
                db.close()
                raise

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        with self._connection() as db, db.transaction():
            yield db

    _reading = _writing = _transaction

    @contextmanager
    def _recalling(self) -> Iterator[psycopg.Connection]:
        # Every keyed admission looks its key up first: one statement at a time, each
        # its own transaction as it would be in READ COMMITTED anyway, so neither BEGIN
        # nor COMMIT costs a round trip.
        with self._connection() as db:
            db.autocommit = True
            try:
                yield db
            finally:
                if not db.closed:
                    db.autocommit = False

    def _translate(self, call: Callable[[], T]) -> T:
        """The driver's failures as the store's own (`_store_failure`); any other is
        raised as it is."""
        try:
            try:
                return call()
            except psycopg.errors.InvalidSqlStatementName as e:
                # The call failed before any commit, on a connection now dropped
                # (`_connection`): it runs once more, on another.
                log.warning("prepared statements vanished from a job store connection; retrying on another", extra={"fields": {"error": str(e)}})
                return call()
        except psycopg.Error as e:
            failure = _store_failure(type(e), str(e))
            if failure is None:
                raise
        raise failure  # outside the handler: the driver's error is not chained

    def _migrating(self, db: psycopg.Connection) -> None:
        db.execute("SELECT pg_advisory_xact_lock(4242)")  # one migrator at a time

    @staticmethod
    def _holds(*values: str) -> bool:
        """TEXT cannot hold NUL: no stored id or name has one."""
        return not any("\x00" in v for v in values)

    @staticmethod
    def _loaded(record: dict[str, Any]) -> dict[str, Any]:
        return dict(record)  # a json column, parsed by the driver

    @staticmethod
    def _message_stored(message: str) -> bytes:
        return message.encode("utf-8")

    @staticmethod
    def _message_read(value: bytes) -> str:
        return bytes(value).decode("utf-8")

    def _any(self, column: str, values: list[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(%s)", [list(values)]

    # A commit group (`SqlStore._admit_group`) holds the advisory lock of every project
    # involved, then of every idempotency key, each kind taken in sorted order: every
    # transaction locks in one order (no deadlock). A group whose admissions read no
    # usage (no quota applies) and for which job numbers are at hand costs one
    # statement, in autocommit: they are decided first, then `jobgate_open_group` takes
    # the locks and writes every record with its key unless the key recalls an
    # admission (what it recalls comes back instead), and the statement's transaction
    # commits. Any other group costs two round trips: the locks, then one read of the
    # keys recalled, the projects' usage and job numbers (a statement of its own, so
    # that its snapshot sees every replica that held a lock before this one); then the
    # decisions, and the writes and the commit.

    @staticmethod
    def _locks(jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> str:
        """The group's advisory locks, as `_LOCKS` and `_OPEN` take them."""
        projects = sorted({job.project for job, _ in jobs})
        locks = sorted({key_lock(job.idempotency) for job, _ in jobs if job.idempotency is not None})
        return orjson.dumps([{"p": p} for p in projects] + [{"k": k} for k in locks]).decode()

    def _numbers_unread(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> list[int] | None:
        return None if any(job.reads_usage for job, _ in jobs) else self._numbers.take(len(jobs))

    def _write_unread(self, jobs: list[tuple[NewJob, Callable[[int], bool]]], group: CommitGroup) -> dict[Slot, Remembered]:
        with self._connection() as db, _autocommitted(db):  # one statement: its own transaction, durable when it returns
            return _recalled(orjson.loads(_value(db.execute(_OPEN, (self._locks(jobs), _rows(group)), prepare=True)) or "null"))

    @contextmanager
    def _group_read(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> Iterator[tuple[psycopg.Connection, GroupRead]]:
        projects = sorted({job.project for job, _ in jobs})
        keyed = [job.idempotency for job, _ in jobs if job.idempotency is not None and self._holds(job.idempotency.account)]
        since = time.time()
        recall = orjson.dumps([{"account": k.account, "key": key_bytes(k.key).hex(), "since": since - k.window} for k in keyed]).decode()
        ahead = self._numbers.wanted()
        with self._connection() as db, _pipelined(db) as pipeline:
            db.execute("BEGIN", prepare=False)
            db.execute(_LOCKS, (self._locks(jobs),), prepare=True)
            reading = db.execute(_READ, (len(jobs) + ahead, orjson.dumps(projects).decode(), recall), prepare=True)
            pipeline.sync()
            read = orjson.loads(_value(reading))
            numbers, spare = read["ids"][: len(jobs)], read["ids"][len(jobs) :]
            usage = {project: int(gpus) for project, gpus in read["usage"] or ()}
            yield db, GroupRead(numbers, usage, _recalled(read["recalled"]))
            db.execute("COMMIT", prepare=False)  # with the writes: the other round trip, durable when it returns
        self._numbers.keep(spare)

    def _write_group(self, db: psycopg.Connection, group: CommitGroup) -> Callable[[], dict[Slot, Remembered]]:
        # Pipelined: its result is read once the commit came back (`_group_read`).
        written = db.execute(_OPEN, ("[]", _rows(group)), prepare=True) if group.entries else None
        return lambda: _recalled(orjson.loads(_value(written) or "null"))

    def _more_numbers(self, count: int) -> list[int]:
        with self._connection() as db, _autocommitted(db):
            return [n for (n,) in db.execute("SELECT nextval('job_id_seq') FROM generate_series(1, %s::int)", (count,), prepare=True)]

    def _failed(self, code: str, message: str) -> NoReturn:
        """Raises what the writer's failure (its SQLSTATE) is to the store's callers, as
        `_translate` classes the driver's: StoreFull, StoreUnavailable (a read-only
        server, and the writer closed first, JG000, among them), or psycopg's error for
        the code; the details are logged."""
        if code == _UNWRITTEN:
            raise shutting_down()
        try:
            error = psycopg.errors.lookup(code)
        except KeyError:
            error = psycopg.DatabaseError
        raise _store_failure(error, f"{message} (SQLSTATE {code})") or error(message)

    def _hand_to_writer(self, job: NewJob, job_id: str) -> Any:
        return self._writer.submit([(job.project, orjson.dumps(_opening_row(job, job_id, now())))])

    def close(self, wait: float = 30.0) -> None:
        """Closes the store once the core's writer has written what it was handed,
        waiting at most `wait` seconds for it (a server that stopped answering)."""
        self._close_writer(wait)
        self._pool.close()
