"""The store interface: what admission and the JobService need from any backend, and
what every backend shares: the bounds on what is stored, the errors a caller may
show, the pool of connections, and the shape of an admission's idempotency key (kept
in the transaction that opens its record, so a record and its key exist together or
not at all)."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import blake3
import orjson

from jobgate._core import RECORD_SOURCES, RECORD_STATES, RECORD_TERMINAL, permuted_job_number, redact
from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES

# A record's lifecycle as the core's job-record kind checks it (`kinds/job_record.rs`):
# what the store writes passes the check its export is put to.
STATES: tuple[str, ...] = RECORD_STATES
TERMINAL: tuple[str, ...] = RECORD_TERMINAL
SOURCES: tuple[str, ...] = RECORD_SOURCES
ERR_CLASSES = ("ERR_INFRA", "ERR_PROGRAM")
# GPUs a record holds, at most: a 32-bit count, so that a project's sum of them in a
# 64-bit column can never overflow. The core refuses larger counts; the store clamps
# what reaches it rather than fail an admission (or its whole commit group) on it.
MAX_GPUS = 2**31 - 1
# A backend's handle for a job (a slurm id, a pod name): anything longer is not one.
MAX_BACKEND_REF_BYTES = 1024
# An idempotency key, in UTF-8 bytes: a client's handle for one admission, not a payload.
MAX_IDEMPOTENCY_KEY_BYTES = 128
# A project or an owner, in UTF-8 bytes: a name, and a key of the stores' indexes, which
# PostgreSQL refuses beyond about 2.7 KB (a limit no retry lifts).
MAX_NAME_BYTES = 1024
# Job numbers are permuted within this many bits (12 hex digits in an id); a store that
# has given out every one refuses further admissions rather than repeat an id.
JOB_NUMBER_BITS = 48
# Expired idempotency keys are deleted at most this often (seconds) per store, in a
# transaction of their own; a lookup ignores them meanwhile. Bounded per pass so that
# a backlog never holds the write lock for long.
PRUNE_EVERY = 60.0
PRUNE_BATCH = 10_000


class JobNotFound(LookupError):
    """No record has this id."""


class TerminalState(ValueError):
    """A transition out of a terminal state."""


class RecordFull(ValueError):
    """The record holds limits.max_transitions transitions; only a terminal state may follow."""


class Unstorable(ValueError):
    """A value no backend can hold; `field` names it. Raised before anything is written."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class StoreUnavailable(Exception):
    """The store cannot be reached or is busy; worth retrying. The message says only
    that: addresses and SQL go to the log, never to a caller."""


def shutting_down() -> StoreUnavailable:
    """An admission the store closed before it wrote (the committer, the core's
    writer): this server is stopping, another replica may take it."""
    return StoreUnavailable("the server is shutting down; retry (on another replica)")


class StoreFull(Exception):
    """The store can take nothing more (its disk is full, or every job id is given out);
    nothing was written."""


@dataclass(frozen=True)
class IdempotencyKey:
    """An admission's idempotency key as the store keeps it: per account, with the
    fingerprint of the request that first used it and the response its retries get.
    Written in the transaction that opens the record and charges the quota."""

    account: str
    key: str
    # BLAKE3 of the request (kind, document, package): a retry sends the same.
    fingerprint: bytes
    # Seconds the key is remembered: an older one is as good as absent.
    window: float
    # The admission's report as a replay returns it (JSON bytes); asked for once the
    # document is admitted, inside the transaction, when its report is known.
    report: Callable[[], bytes] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Remembered:
    """What a key recalls: the first admission made with it."""

    job_id: str
    fingerprint: bytes
    report: bytes


@dataclass(frozen=True)
class NewJob:
    """Everything a record is opened with; the store adds the id and the timestamps."""

    id_prefix: str
    project: str
    owner: str
    gpus: int
    image: str
    network_arch: str
    action: str
    platform: str
    storage_tier: str
    results_root: str
    document: bytes
    upload_excludes: list[str] = field(default_factory=list)
    # When set, the record is opened only if the key recalls nothing; else the store
    # returns what it recalls (`Remembered`) and opens nothing.
    idempotency: IdempotencyKey | None = None
    # Whether the admission's `decide` reads the project's usage (a quota applies).
    # When it does not, it is called with 0 and a store may decide before it reads
    # anything: PostgreSQL then commits a group of such admissions in one round trip.
    reads_usage: bool = True


class Entropy:
    """Bytes from the system's CSPRNG (`os.urandom`), fetched `chunk` at a time. Each
    fetch is a system call around which CPython lets other threads take the GIL; a
    job id made inside a commit group's transaction would hand the GIL away and wait
    to take it back, while the group's other admissions wait on the commit. One
    fetch serves a thousand ids. A forked child fetches its own."""

    def __init__(self, chunk: int = 3 * 1024) -> None:
        self._chunk = chunk
        self._lock = threading.Lock()
        self._pool, self._at, self._pid = b"", 0, 0

    def hex(self, n: int) -> str:
        """`n` random bytes as hex."""
        with self._lock:
            if self._at + n > len(self._pool) or self._pid != os.getpid():
                self._pool, self._at, self._pid = os.urandom(max(self._chunk, n)), 0, os.getpid()
            taken = self._pool[self._at : self._at + n]
            self._at += n
        return taken.hex()


_ENTROPY = Entropy()


def new_job_id(prefix: str, number: int, key: bytes) -> str:
    """`<prefix>-<hex>`: the store's sequence number, permuted under the store's key (so
    no other job has it, and nobody learns from their own ids how many jobs others
    admitted), followed by random hex (so ids are not guessable from one another)."""
    if not 0 <= number < 1 << JOB_NUMBER_BITS:
        raise StoreFull(f"the job store has given out every one of its 2^{JOB_NUMBER_BITS} job ids; nothing was written")
    return f"{prefix}-{permuted(number, key):0{JOB_NUMBER_BITS // 4}x}{_ENTROPY.hex(3)}"


def permuted(number: int, key: bytes, bits: int = JOB_NUMBER_BITS) -> int:
    """`number`'s image under a keyed permutation of the integers below 2^`bits` (`bits`
    even): a balanced Feistel network whose round function is BLAKE3 keyed with `key`
    (32 bytes). A bijection whatever the round function, so distinct numbers keep
    distinct images. Computed by the core (`job_ids::permuted`): ten rounds of keyed
    BLAKE3 in Python weighed on every commit group."""
    return permuted_job_number(number, key, bits)


def new_id_key() -> bytes:
    """A store's key for `permuted`, made once with its schema and kept in it."""
    return secrets.token_bytes(blake3.blake3.key_size)


def opened_record(job: NewJob, job_id: str, ts: str) -> dict[str, Any]:
    """The record as admission opens it (its one PENDING transition is stored apart)."""
    return {
        "schema_version": 1,
        "id": job_id,
        "platform": job.platform,
        "backend_ref": None,
        "image": job.image,
        "network_arch": job.network_arch,
        "action": job.action,
        "results_dir": f"{job.results_root.rstrip('/')}/{job_id}",
        "storage_tier": job.storage_tier,
        "upload_excludes": job.upload_excludes,
        "submitted_at": ts,
        "terminal_state": None,
        "redacted": True,
    }


def record_json(record: dict[str, Any]) -> str:
    """A record as stored: its JSON text (orjson's; json's escapes for a string that is
    not UTF-8, a lone surrogate)."""
    try:
        return orjson.dumps(record).decode()
    except orjson.JSONEncodeError:
        return json.dumps(record)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Pruning:
    """When a store last deleted expired idempotency keys: at most every PRUNE_EVERY
    seconds (sooner for a shorter window), and only by a write that uses keys."""

    def __init__(self) -> None:
        self._last = float("-inf")
        self._lock = threading.Lock()

    def due(self, jobs: list[NewJob]) -> float | None:
        """The window to prune `jobs`' keys with when a pass is due (the caller's to
        run: no other caller is told so meanwhile), else None."""
        windows = [job.idempotency.window for job in jobs if job.idempotency is not None]
        if not windows:
            return None
        window = max(windows)
        with self._lock:
            if time.monotonic() - self._last < min(PRUNE_EVERY, window):
                return None
            self._last = time.monotonic()
        return window


def storable(job: NewJob) -> NewJob:
    """`job` as every backend can hold it, or Unstorable naming the field. Checked before
    an admission joins a commit group, so that no value of one can fail the others."""
    for name in ("id_prefix", "project", "owner"):
        if "\x00" in getattr(job, name):
            # Plain columns (PostgreSQL TEXT) cannot hold NUL; the record's JSON can.
            raise Unstorable(name, "contains a NUL character")
    for name in ("project", "owner"):
        size = len(getattr(job, name).encode("utf-8", "surrogatepass"))
        if size > MAX_NAME_BYTES:
            raise Unstorable(name, f"is {size} bytes; a name is at most {MAX_NAME_BYTES}")
    if job.idempotency is not None:
        # Keys are stored as their UTF-8 bytes: a NUL is no problem, a longer key is.
        size = len(key_bytes(job.idempotency.key))
        if size > MAX_IDEMPOTENCY_KEY_BYTES:
            raise Unstorable("idempotency_key", f"is {size} bytes; a key is at most {MAX_IDEMPOTENCY_KEY_BYTES}")
    gpus = min(max(int(job.gpus), 0), MAX_GPUS)
    return job if gpus == job.gpus else dataclasses.replace(job, gpus=gpus)


def stored_message(message: str, limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> str:
    """A transition message as stored: redacted of credentials, then at most `limit`
    bytes of UTF-8, cut at a character boundary and ending in a marker that says how
    many bytes were left out."""
    # Redacting costs time per byte: only a head longer than any cut point is redacted
    # (a credential that straddles the cut still shows enough of itself to match).
    head_chars = 2 * limit + 1024
    head, tail = message[:head_chars], message[head_chars:]
    # The core's own detector: what is stored passes tao.record.secret.
    text = redact(head.encode("utf-8", "replace").decode("utf-8")).encode("utf-8")  # "replace": lone surrogates from argv
    dropped = len(tail.encode("utf-8", "replace"))
    if len(text) <= limit and not dropped:
        return text.decode("utf-8")
    total = len(text) + dropped
    room = limit - len(_cut_marker(total).encode())  # the marker of the longest possible count
    kept = text[:room].decode("utf-8", "ignore")  # "ignore" drops only a split last character
    return kept + _cut_marker(total - len(kept.encode("utf-8")))


def _cut_marker(dropped: int) -> str:
    return f"… [truncated {dropped} bytes]"


def list_filter(mark: str, *, state: str, project: str, owner: str, terminal: bool | None, after: str, projects: Collection[str] | None = None) -> tuple[str, list[Any]]:
    """The WHERE clause of ListJobs and its arguments, with `mark` as the placeholder;
    `projects` (None for every project) bounds the result whatever the other filters ask."""
    clauses, args = [f"seq > {mark}"], [int(after or 0)]
    for column, value in (("state", state), ("project", project), ("owner", owner)):
        if value:
            clauses.append(f"{column} = {mark}")
            args.append(value)
    if projects is not None:
        chosen = sorted(projects)
        clauses.append(f"project IN ({', '.join([mark] * len(chosen))})" if chosen else "0 = 1")
        args.extend(chosen)
    if terminal is not None:
        clauses.append(f"terminal = {mark}")
        args.append(terminal)
    return " AND ".join(clauses), args


def check_mark(state: str, source: str, err_class: str, backend_ref: str = "") -> None:
    """Refuses a transition outside the fixed vocabulary, before any store is touched;
    Unstorable names the field."""
    if state not in STATES:
        raise Unstorable("state", f"{_shown(state)} is not one of {', '.join(STATES)}")
    if source not in SOURCES:
        raise Unstorable("source", f"{_shown(source)} is not one of {', '.join(SOURCES)}")
    if err_class and err_class not in ERR_CLASSES:
        raise Unstorable("err_class", f"{_shown(err_class)} is not one of {', '.join(ERR_CLASSES)}")
    size = len(backend_ref.encode("utf-8", "replace"))
    if size > MAX_BACKEND_REF_BYTES:
        raise Unstorable("backend_ref", f"is {size} bytes; a backend's handle is at most {MAX_BACKEND_REF_BYTES}")


def _shown(value: str) -> str:
    """A caller's value in a message: quoted, and short."""
    return repr(value) if len(value) <= 40 else repr(value[:40]) + f"… ({len(value)} characters)"


def check_room(job_id: str, transitions: int, state: str, max_transitions: int) -> None:
    """A full record still takes its terminal state (else its GPUs would stay held)."""
    if transitions >= max_transitions and state not in TERMINAL:
        raise RecordFull(f"job {job_id} holds {transitions} transitions, the most a record keeps (limits.max_transitions); only a terminal state can still be recorded")


def apply_mark(job_id: str, record: dict[str, Any], current: str, terminal: bool, state: str, source: str, backend_ref: str, err_class: str) -> bool:
    """Updates `record` for a mark; returns whether a transition is appended. A terminal
    job refuses any other state; the same terminal state may only fill in what was missing."""
    if terminal:
        if state != current:
            raise TerminalState(f"job {job_id} is {current}, a terminal state; it cannot become {state}")
        if backend_ref and record.get("backend_ref") is None:
            record["backend_ref"] = backend_ref
        if err_class and record.get("err_class") is None:
            record["err_class"] = err_class
        return False
    if backend_ref:
        record["backend_ref"] = backend_ref
    if state in TERMINAL:
        record["terminal_state"] = state
        record["terminal_write_by"] = source
        if err_class:
            record["err_class"] = err_class
    return True


C = TypeVar("C")


class ConnectionPool(Generic[C]):
    """At most `size` database connections, each lent to one thread for one operation:
    a server's many threads (one per open stream) never hold more than `size`."""

    def __init__(self, connect: Callable[[], C], size: int, usable: Callable[[C], bool], close: Callable[[C], None], wait: float = 30.0) -> None:
        self._connect, self._usable, self._close, self._wait = connect, usable, close, wait
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[C] = []
        self._lock = threading.Lock()
        self.size = size

    @contextmanager
    def connection(self) -> Iterator[C]:
        if not self._slots.acquire(timeout=self._wait):
            raise StoreUnavailable(f"all {self.size} connections to the job store stayed busy for {self._wait:.0f} s")
        try:
            with self._lock:
                db = self._idle.pop() if self._idle else None
            if db is None or not self._usable(db):
                db = self._connect()
            try:
                yield db
            finally:
                if self._usable(db):
                    with self._lock:
                        self._idle.append(db)
                else:
                    self._close(db)
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for db in idle:
            self._close(db)


def key_bytes(key: str) -> bytes:
    """An idempotency key as stored: its UTF-8 bytes (a proto string is valid UTF-8)."""
    return key.encode("utf-8", "surrogatepass")


class Pending(Protocol):
    """A record still being committed (a store's `open_later`)."""

    def wait(self) -> None:
        """Returns once the record is committed; raises StoreFull or StoreUnavailable
        (as the store's operations do) when it cannot be."""
        ...


class JobStore(Protocol):
    # Whether a commit waits for the disk to flush: then a commit group is worth
    # waiting a little for more members.
    syncs_commits: bool

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | Remembered | None:
        """Atomically: reads the project's GPUs in unfinished jobs, calls `decide(in_use)`,
        and opens the record (one PENDING transition) only when it returns True. With
        `job.idempotency`, first looks the key up: when it recalls an admission within
        its window, returns that (`Remembered`) and opens nothing; else the key is
        written with the record it opens (a refused document leaves no key)."""

    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | Remembered | None]:
        """`admit` for several jobs in order, in one transaction (one commit); a job
        sees the keys written by those before it."""

    def recall(self, account: str, keys: Collection[str], window: float) -> dict[str, Remembered]:
        """What each key of `account` recalls, among those used within the last
        `window` seconds (keys that recall nothing are left out)."""

    def gpus_in_use(self, project: str) -> int: ...

    def usage(self) -> dict[str, int]:
        """GPUs held by unfinished jobs, per project (projects holding none may be left out)."""

    def get(self, job_id: str) -> dict[str, Any]:
        """The record as exported (job_record.schema.json); raises JobNotFound."""

    def document(self, job_id: str) -> bytes:
        """The document the job was admitted with, as sent; raises JobNotFound."""

    def project(self, job_id: str) -> str:
        """The project the job was admitted into (what decides who may see it); raises
        JobNotFound."""

    def list(
        self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "", projects: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        """Records in admission order, after the one numbered `after`; with `projects`,
        only records of those projects (None: every project)."""

    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        """Appends a transition (its message as `stored_message` bounds it); raises
        JobNotFound, TerminalState, RecordFull or Unstorable."""

    def transitions(self, job_id: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The job's transitions numbered above `after`, as (number, transition)."""

    def latest(self, job_ids: list[str]) -> dict[str, int]:
        """The number of each job's last transition (unknown ids are left out): one
        query for all the jobs a server's WatchJob streams follow."""

    def close(self, wait: float = 30.0) -> None:
        """Closes the store, waiting at most `wait` seconds for writes it was handed."""
        ...

