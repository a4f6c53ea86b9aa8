"""The transactions every SQL store runs, written once: migrating, admitting a group
(its members made storable first, decided in order as sequential admissions would
be, expired keys pruned after), reading and listing records, appending a transition,
recalling keys. A store supplies its dialect: how it lends a connection for reading
and for writing, how its driver's failures become the store's own, the few spellings
that differ (placeholders, a locking read, the types a message and a record are kept
as), and, for a commit group, how it takes its write lock and reads what the group's
decisions need (`_group_read`), when it may decide with nothing read
(`_numbers_unread`), and the statements that write a decided group (`_write_group`,
`_write_unread`): where the two backends' round trips differ.

Must not know a driver: every driver call goes through the connection a dialect
lends, with SQL that both dialects accept."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

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
    new_job_id,
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


# An idempotency key as a store keeps it: its account and its key's bytes.
Slot = tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class Opening:
    """An admission its group opens: what the dialect writes for it (its record, its
    first transition, its GPUs charged, and its key when it has one)."""

    job: NewJob
    job_id: str
    ts: str
    slot: Slot | None
    # With a key: the report a retry gets back, and when the key was written.
    report: bytes = b""
    created: float = 0.0


@dataclass(frozen=True, slots=True)
class Lookup:
    """A refused admission whose key is looked up with the writes (nothing was read
    before its group was decided): a retry of an admission the key recalls within its
    window (written at `since` or later) is answered with it."""

    slot: Slot
    since: float


@dataclass(frozen=True, slots=True)
class GroupRead:
    """What a group's decisions read under its write lock: a job number per member,
    the usage of the projects charged, and what the members' keys recall within their
    windows."""

    numbers: list[int]
    usage: dict[str, int]
    recalled: dict[Slot, Remembered]


class CommitGroup:
    """A commit group as its admissions are decided in order: each project's usage and
    the keys recalled, carried forward as sequential admissions would have seen them,
    and the rows (`entries`, in admission order) the dialect writes at once.

    `usage` None: nothing was read, and each member decides on 0. `recalled` None:
    nothing was read, and what a key recalls is learnt with the writes (`outcome`)."""

    def __init__(self, usage: dict[str, int] | None, recalled: dict[Slot, Remembered] | None) -> None:
        self.usage, self.recalled = usage, recalled
        self.entries: list[Opening | Lookup] = []
        # The keys the group writes, as they will recall their admission.
        self.opened: dict[Slot, Remembered] = {}
        # Per member: None (refused), what its key recalled, ("opened", job id, key),
        # ("refused", key) when what the key recalls is learnt with the writes, or
        # ("same", key) for the outcome of the member before it that opened with its key.
        self._outcomes: list[Any] = []

    def openings(self) -> list[Opening]:
        return [e for e in self.entries if isinstance(e, Opening)]

    def recall(self, slot: Slot) -> bool:
        """Whether the member with key `slot` is answered without deciding: its key
        recalled an admission, or a member before it opened with the same key."""
        if self.recalled is not None and slot in self.recalled:
            self._outcomes.append(self.recalled[slot])
        elif slot in self.opened:
            self._outcomes.append(("same", slot))
        else:
            return False
        return True

    def in_use(self, job: NewJob) -> int:
        """The usage `job`'s decision is given."""
        return self.usage.get(job.project, 0) if self.usage is not None and job.reads_usage else 0

    def open(self, job: NewJob, job_id: str, slot: Slot | None) -> None:
        ts = now()
        key = job.idempotency
        if key is not None and slot is not None:
            report = key.report()
            self.entries.append(Opening(job, job_id, ts, slot, report, time.time()))
            self.opened[slot] = Remembered(job_id, key.fingerprint, report)
        else:
            self.entries.append(Opening(job, job_id, ts, None))
        if self.usage is not None:
            self.usage[job.project] = self.usage.get(job.project, 0) + job.gpus
        self._outcomes.append(("opened", job_id, slot))

    def refuse(self, job: NewJob, slot: Slot | None) -> None:
        """A member refused: nothing is written for it; its key, when nothing was read
        first, is looked up with the writes."""
        if slot is None or self.recalled is not None or job.idempotency is None:
            self._outcomes.append(None)
        else:
            self.entries.append(Lookup(slot, time.time() - job.idempotency.window))
            self._outcomes.append(("refused", slot))

    def outcome(self, learnt: dict[Slot, Remembered]) -> list[str | Remembered | None]:
        """Each member's outcome, `learnt` holding what the keys the writes did not
        write recall."""
        out: list[str | Remembered | None] = []
        for outcome in self._outcomes:
            if outcome is None or isinstance(outcome, Remembered):
                out.append(outcome)
            elif outcome[0] == "opened":
                out.append(learnt.get(outcome[2], outcome[1]) if outcome[2] is not None else outcome[1])
            elif outcome[0] == "refused":
                out.append(learnt.get(outcome[1]))
            else:
                out.append(learnt.get(outcome[1]) or self.opened[outcome[1]])
        return out


class Committing:
    """A record the core's writer is opening (a store's `open_later`): `wait` returns
    once it is committed, or raises what `failed` makes of the writer's failure (the
    store's own failures, as its other operations raise them)."""

    __slots__ = ("_failed", "_opening")

    def __init__(self, opening: Any, failed: Callable[[Any, str], NoReturn]) -> None:
        self._opening, self._failed = opening, failed

    def wait(self) -> None:
        failure = self._opening.wait()
        if failure is not None:
            self._failed(*failure)


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
    # The key that permutes job numbers into ids (`_migrate` returns it).
    _id_key: bytes

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

    def _numbers_unread(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> list[int] | None:
        """A job number per member when the group may be decided with nothing read
        first (then `_write_unread` writes it); None when it reads first (`_group_read`)."""
        raise NotImplementedError

    def _group_read(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> AbstractContextManager[tuple[Any, GroupRead]]:
        """A connection in the group's write transaction, holding the locks its
        decisions need, and what they read; committed when the block ends."""
        raise NotImplementedError

    def _write_group(self, db: Any, group: CommitGroup) -> Callable[[], dict[Slot, Remembered]]:
        """Writes a group decided on what `_group_read` read, in its transaction; returns
        what gives, once committed, what the keys not written recall."""
        raise NotImplementedError

    def _write_unread(self, jobs: list[tuple[NewJob, Callable[[int], bool]]], group: CommitGroup) -> dict[Slot, Remembered]:
        """Writes a group decided with nothing read (it has entries), committed when it
        returns; returns what the keys not written recall."""
        raise NotImplementedError

    def _wrote(self, count: int) -> None:
        """Called after a group of `count` admissions committed."""

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

    def _admit_group(self, jobs: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | Remembered | None]:
        """Admits storable jobs in order in one transaction (one commit for the group):
        each decision sees the GPUs of the records opened before it, and each key the
        keys written before it. A group the dialect may decide with nothing read first
        is decided at once and written by `_write_unread`; any other takes the write
        lock and reads what its decisions need (`_group_read`), then is decided and
        written (`_write_group`) in that transaction."""
        numbers = self._numbers_unread(jobs)
        if numbers is not None:
            group = self._decided(jobs, numbers, None)
            learnt = self._write_unread(jobs, group) if group.entries else {}
        else:
            with self._group_read(jobs) as (db, read):
                group = self._decided(jobs, read.numbers, read)
                written = self._write_group(db, group)
            learnt = written()
        self._wrote(len(jobs))
        return group.outcome(learnt)

    def _decided(self, jobs: list[tuple[NewJob, Callable[[int], bool]]], numbers: list[int], read: GroupRead | None) -> CommitGroup:
        group = CommitGroup(read.usage, read.recalled) if read is not None else CommitGroup(None, None)
        for (job, decide), number in zip(jobs, numbers, strict=True):
            self._open(job, decide, number, group)
        return group

    def _open(self, job: NewJob, decide: Callable[[int], bool], number: int, group: CommitGroup) -> None:
        """One admission of a group, decided on what the group read and opened before
        it; its rows are written with the group's."""
        key = job.idempotency
        slot = (key.account, key_bytes(key.key)) if key is not None else None
        if slot is not None and group.recall(slot):
            return
        if not decide(group.in_use(job)):
            group.refuse(job, slot)
        else:
            group.open(job, new_job_id(job.id_prefix, number, self._id_key), slot)  # a number taken for this store alone: unique

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

    # Records opened beside the calls: the core's writer a dialect made (None without
    # one; then every record goes through `admit_many`).
    _writer: Any = None

    @property
    def opens_later(self) -> bool:
        """Whether `open_later` may be called: the store has the core's writer."""
        return self._writer is not None

    def _more_numbers(self, count: int) -> list[int]:
        """At least `count` job numbers, taken from the database."""
        raise NotImplementedError

    def _failed(self, code: Any, message: str) -> NoReturn:
        """Raises what the core writer's failure (the database's code and message) is
        to the store's callers, as `_translate` raises the driver's."""
        raise NotImplementedError

    def _hand_to_writer(self, job: NewJob, job_id: str) -> Any:
        """Submits `job`'s record, its id `job_id`, to the core's writer; its opening."""
        raise NotImplementedError

    def open_later(self, job: NewJob) -> tuple[str, Committing]:
        """Opens the record of an admission that reads nothing first (no quota applies,
        no idempotency key) on the core's writer (`opens_later`): its job id at once,
        and what to wait on before the admission is answered (`Committing.wait`). The
        writer opens the records queued meanwhile in one transaction."""
        job = storable(job)
        numbers = self._translate(lambda: self._numbers.take(1, self._more_numbers))
        assert numbers, "numbers are taken from the database when short"
        job_id = new_job_id(job.id_prefix, numbers[0], self._id_key)
        return job_id, Committing(self._hand_to_writer(job, job_id), self._failed)

    def _close_writer(self, wait: float) -> None:
        """Closes the core's writer once it has written what it was handed, waiting at
        most `wait` seconds for it (a store that stays locked, a server that stopped
        answering)."""
        if self._writer is not None and not self._writer.close(wait):
            log.error("the job store's writer did not finish in time; closing without it", extra={"fields": {**self._log_fields(), "waited_s": wait}})

    def close(self, wait: float = 30.0) -> None:
        raise NotImplementedError
