"""The transactions every SQL store runs, written once: migrating, admitting a group
(its members made storable first, expired keys pruned after), reading and listing
records, appending a transition, recalling keys. A store supplies its dialect: how
it lends a connection for reading and for writing, how its driver's failures become
the store's own, the few spellings that differ (placeholders, a locking read, the
types a message and a record are kept as), and how it writes a commit group
(`_admit_group`), which is where the two backends' round trips differ.

Must not know a driver: every driver call goes through the connection a dialect
lends, with SQL that both dialects accept."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TRANSITIONS
from jobgate.store.base import (
    PRUNE_BATCH,
    TERMINAL,
    JobNotFound,
    NewJob,
    Pruning,
    Remembered,
    apply_mark,
    check_mark,
    check_room,
    key_bytes,
    list_filter,
    new_id_key,
    now,
    record_json,
    storable,
    stored_message,
)

log = logging.getLogger("jobgate.store")

T = TypeVar("T")

# Ids (or keys) per query of `latest` and `recall`.
IDS_PER_QUERY = 500


# Job numbers a store takes from its database at once, ahead of need, so that most
# commit groups need none read.
NUMBERS_AHEAD = 256


class NumbersAhead:
    """Job numbers a store has taken from its database ahead of need and not given
    yet; each is given once (the database never gives a number twice)."""

    def __init__(self) -> None:
        self._numbers: list[int] = []
        self._lock = threading.Lock()

    def take(self, n: int, more: Callable[[int], Collection[int]] | None = None) -> list[int] | None:
        """`n` numbers. When fewer are at hand: with `more`, `more(count)` takes at least
        `NUMBERS_AHEAD` more from the database first (one caller at a time); without,
        None."""
        with self._lock:
            if len(self._numbers) < n:
                if more is None:
                    return None
                self._numbers += more(max(n - len(self._numbers), NUMBERS_AHEAD))
            taken, self._numbers = self._numbers[:n], self._numbers[n:]
            return taken

    def wanted(self) -> int:
        """How many more numbers would fill it to `NUMBERS_AHEAD`."""
        with self._lock:
            return max(0, NUMBERS_AHEAD - len(self._numbers))

    def keep(self, numbers: Collection[int]) -> None:
        with self._lock:
            self._numbers += numbers


def translated(method: Callable[..., T]) -> Callable[..., T]:
    """A store operation whose driver failures leave as the store's own (`_translate`)."""

    @functools.wraps(method)
    def inner(self: SqlStore, *args: Any, **kwargs: Any) -> T:
        return self._translate(lambda: method(self, *args, **kwargs))

    return inner


class SqlStore:
    """The `JobStore` operations over a dialect; `SqliteStore` and `PostgresStore` are
    its two dialects."""

    # Whether a commit waits for the disk to flush (`JobStore.syncs_commits`).
    syncs_commits: bool = True
    # The dialect's spellings: a bound parameter, and what makes a read lock the
    # record a mark reads.
    MARK = "?"
    LOCKING = ""
    # Deletes idempotency keys older than its first parameter, at most its second.
    PRUNE = ""
    MIGRATIONS: list[Any] = []

    def __init__(self, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_transitions: int = DEFAULT_MAX_TRANSITIONS) -> None:
        self.max_message_bytes, self.max_transitions = max_message_bytes, max_transitions
        self._pruning = Pruning()

    # The dialect: connections, failures, and the values that differ by driver.

    def _reading(self) -> AbstractContextManager[Any]:
        """A connection for reads."""
        raise NotImplementedError

    def _writing(self) -> AbstractContextManager[Any]:
        """A connection in a write transaction, committed when the block ends."""
        raise NotImplementedError

    def _recalling(self) -> AbstractContextManager[Any]:
        """A connection for looking keys up (each admission with a key does, first)."""
        return self._reading()

    def _translate(self, call: Callable[[], T]) -> T:
        """`call()`, its driver's failures raised as StoreFull or StoreUnavailable."""
        raise NotImplementedError

    def _admit_group(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | Remembered | None]:
        """`admit_many` of storable jobs, in one transaction."""
        raise NotImplementedError

    def _log_fields(self) -> dict[str, str]:
        """What names the store in a log line (never a password)."""
        return {}

    def _migrating(self, db: Any) -> None:
        """Called first in the migrating transaction (a lock, when several may migrate)."""

    def _migrate_one(self, db: Any, migration: Any) -> None:
        db.execute(migration)

    @staticmethod
    def _holds(*values: str) -> bool:
        """Whether a column can hold the values (a lookup by one that no column can hold
        finds nothing, rather than failing)."""
        return True

    @staticmethod
    def _loaded(record: Any) -> dict[str, Any]:
        """A stored record as the dict it was written from."""
        raise NotImplementedError

    @staticmethod
    def _message_stored(message: str) -> Any:
        return message

    @staticmethod
    def _message_read(value: Any) -> str:
        return value

    def _any(self, column: str, values: list[Any]) -> tuple[str, list[Any]]:
        """`column` is one of `values`: the clause and its parameters."""
        return f"{column} IN ({', '.join([self.MARK] * len(values))})", list(values)

    # The transactions.

    @translated
    def _migrate(self) -> bytes:
        """Brings the schema up to date; returns the store's job id key."""
        m = self.MARK
        with self._writing() as db:
            self._migrating(db)
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
            for version, migration in enumerate(self.MIGRATIONS, start=1):
                if version not in done:
                    self._migrate_one(db, migration)
                    db.execute(f"INSERT INTO schema_migrations VALUES ({m}, {m})", (version, now()))
            db.execute(f"INSERT INTO job_id_key VALUES (1, {m}) ON CONFLICT DO NOTHING", (new_id_key(),))
            return bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])

    @translated
    def gpus_in_use(self, project: str) -> int:
        if not self._holds(project):
            return 0
        with self._reading() as db:
            row = db.execute(f"SELECT gpus FROM project_usage WHERE project = {self.MARK}", (project,)).fetchone()
        return int(row[0]) if row else 0

    @translated
    def usage(self) -> dict[str, int]:
        with self._reading() as db:
            return {project: int(gpus) for project, gpus in db.execute("SELECT project, gpus FROM project_usage WHERE gpus > 0")}

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | Remembered | None:
        return self.admit_many([(job, decide)])[0]

    @translated
    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | Remembered | None]:
        opened = self._admit_group([(storable(job), decide) for job, decide in items])
        window = self._pruning.due([job for job, _ in items])
        if window is not None:
            self._prune(window)
        return opened

    def _prune(self, window: float) -> None:
        """Deletes keys older than `window`, at most PRUNE_BATCH of them; a failure is
        only logged: an expired key is ignored by every lookup anyway."""
        try:
            with self._writing() as db:
                db.execute(self.PRUNE, (time.time() - window, PRUNE_BATCH))
        except Exception as e:  # noqa: BLE001 - the admissions before it are committed
            log.warning("pruning expired idempotency keys failed", extra={"fields": {**self._log_fields(), "error": str(e)}})

    @translated
    def recall(self, account: str, keys: Collection[str], window: float) -> dict[str, Remembered]:
        unique = list(dict.fromkeys(keys))
        if not self._holds(account):
            return {}
        since = time.time() - window
        out: dict[str, Remembered] = {}
        with self._recalling() as db:
            for i in range(0, len(unique), IDS_PER_QUERY):
                chunk = {key_bytes(k): k for k in unique[i : i + IDS_PER_QUERY]}
                among, args = self._any("key", list(chunk))
                m = self.MARK
                rows = db.execute(f"SELECT key, job_id, fingerprint, report FROM idempotency_keys WHERE account = {m} AND {among} AND created >= {m}", (account, *args, since))
                for key, job_id, fingerprint, report in rows:
                    out[chunk[bytes(key)]] = Remembered(job_id, bytes(fingerprint), bytes(report))
        return out

    def _export(self, db: Any, job_id: str, record: Any) -> dict[str, Any]:
        """A record as exported (job_record.schema.json): its private columns dropped,
        its transitions in order."""
        exported = self._loaded(record)
        for private in ("owner", "project", "gpus"):
            exported.pop(private, None)
        exported["transitions"] = [
            {"ts": ts, "state": state, "message": self._message_read(message), "source": source}
            for ts, state, message, source in db.execute(f"SELECT ts, state, message, source FROM transitions WHERE job_id = {self.MARK} ORDER BY n", (job_id,))
        ]
        return exported

    def _column(self, column: str, job_id: str) -> Any:
        """One column of a record; raises JobNotFound."""
        row = None
        if self._holds(job_id):
            with self._reading() as db:
                row = db.execute(f"SELECT {column} FROM jobs WHERE id = {self.MARK}", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row[0]

    def _get(self, db: Any, job_id: str) -> dict[str, Any]:
        row = db.execute(f"SELECT record FROM jobs WHERE id = {self.MARK}", (job_id,)).fetchone() if self._holds(job_id) else None
        if row is None:
            raise JobNotFound(job_id)
        return self._export(db, job_id, row[0])

    @translated
    def get(self, job_id: str) -> dict[str, Any]:
        with self._reading() as db:
            return self._get(db, job_id)

    @translated
    def document(self, job_id: str) -> bytes:
        return bytes(self._column("document", job_id))

    @translated
    def project(self, job_id: str) -> str:
        return self._column("project", job_id)

    @translated
    def list(
        self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "", projects: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        if not self._holds(state, project, owner):
            return []
        if projects is not None:
            projects = [p for p in projects if self._holds(p)]  # no stored project holds what its column cannot
        where, args = list_filter(self.MARK, state=state, project=project, owner=owner, terminal=terminal, after=after, projects=projects)
        out = []
        with self._reading() as db:
            for job_id, record, seq in db.execute(f"SELECT id, record, seq FROM jobs WHERE {where} ORDER BY seq LIMIT {self.MARK}", (*args, limit)).fetchall():
                exported = self._export(db, job_id, record)
                exported["_seq"] = seq
                out.append(exported)
        return out

    @translated
    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        check_mark(state, source, err_class, backend_ref)
        if not self._holds(job_id):
            raise JobNotFound(job_id)
        message = stored_message(message, self.max_message_bytes)
        m = self.MARK
        with self._writing() as db:
            row = db.execute(f"SELECT record, state, terminal, project, gpus FROM jobs WHERE id = {m}{self.LOCKING}", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            record = self._loaded(row[0])
            if apply_mark(job_id, record, row[1], bool(row[2]), state, source, backend_ref, err_class):
                last = int(db.execute(f"SELECT MAX(n) FROM transitions WHERE job_id = {m}", (job_id,)).fetchone()[0])
                check_room(job_id, last, state, self.max_transitions)
                db.execute(f"INSERT INTO transitions VALUES ({m}, {m}, {m}, {m}, {m}, {m})", (job_id, last + 1, now(), state, self._message_stored(message), source))
                db.execute(f"UPDATE jobs SET record = {m}, state = {m}, terminal = {m} WHERE id = {m}", (record_json(record), state, state in TERMINAL, job_id))
                if state in TERMINAL:  # its GPUs no longer count against the project
                    db.execute(f"UPDATE project_usage SET gpus = gpus - {m} WHERE project = {m}", (row[4], row[3]))
            else:
                db.execute(f"UPDATE jobs SET record = {m} WHERE id = {m}", (record_json(record), job_id))
            # Read in the same transaction: the caller gets what this mark committed.
            return self._get(db, job_id)

    @translated
    def transitions(self, job_id: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        if not self._holds(job_id):
            return []
        m = self.MARK
        with self._reading() as db:
            rows = db.execute(f"SELECT n, ts, state, message, source FROM transitions WHERE job_id = {m} AND n > {m} ORDER BY n", (job_id, after)).fetchall()
        return [(n, {"ts": ts, "state": state, "message": self._message_read(message), "source": source}) for n, ts, state, message, source in rows]

    @translated
    def latest(self, job_ids: list[str]) -> dict[str, int]:
        ids = [i for i in job_ids if self._holds(i)]
        out: dict[str, int] = {}
        with self._reading() as db:
            for i in range(0, len(ids), IDS_PER_QUERY):
                among, args = self._any("job_id", ids[i : i + IDS_PER_QUERY])
                out.update(db.execute(f"SELECT job_id, MAX(n) FROM transitions WHERE {among} GROUP BY job_id", args).fetchall())
        return out

    def close(self) -> None:
        raise NotImplementedError
