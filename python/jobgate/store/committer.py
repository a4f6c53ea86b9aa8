"""Commit groups: the records of concurrent admissions opened in shared transactions
of the store (`JobStore.admit_many`), so that a commit, and the disk flush it may wait
for, is paid per group rather than per job. Any store's: it needs only `admit_many`
and `syncs_commits`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from jobgate.store.base import JobStore, NewJob, Remembered, StoreFull, StoreUnavailable, shutting_down, storable

log = logging.getLogger("jobgate.store")

# The longest a commit group waits for admissions expected to join it (seconds).
MAX_PATIENCE = 0.01
# The longest `close` waits for a commit group under way (seconds): a commit stuck on an
# unreachable store does not hold the process.
COMMITTER_CLOSE_WAIT_S = 30.0


class _Waiting:
    """An admission queued for a commit group: `admit` waits on `done`, held from the
    start, which is released once it is answered (`outcome` or `error` set) or handed
    the lead of the next group (`leads`): one wake-up, where a Future takes a
    condition and its locks."""

    __slots__ = ("job", "decide", "done", "outcome", "error", "leads")

    def __init__(self, job: NewJob, decide: Callable[[int], bool]) -> None:
        self.job, self.decide = job, decide
        self.done = threading.Lock()
        self.done.acquire()
        self.outcome: str | Remembered | None = None
        self.error: BaseException | None = None
        self.leads = False


class GroupCommitter:
    """Opens the records of concurrent admissions in shared transactions: while one
    group commits (and waits for its fsync), the next one gathers, so a disk flush is
    paid per group, not per job. No thread of its own: the admission that finds no
    group under way leads one (it commits the admissions queued with its own, then
    hands the lead to the first that queued meanwhile and answers the others), so an
    admission waits to be woken only when another commits it.

    When the store's commits wait for a disk flush (`store.syncs_commits`) and fewer
    are queued than were about at the last commit (its group and those that queued
    meanwhile), a leader waits for the rest a little: no longer than that commit took,
    nor MAX_PATIENCE, and is woken once, when they are all there; a lone caller never
    waits. A commit that flushes nothing costs less than the wait. Within a group
    admissions run in arrival order, each seeing the GPUs of those before it.

    No admission can fail another: each is made storable before it joins a group
    (`storable`), and when a group's commit fails all the same, its members are
    committed again one by one, so that only the one at fault fails. A store that is
    down or full fails every member at once: retrying them would fail alike."""

    def __init__(self, store: JobStore, max_group: int = 256) -> None:
        self.store, self.max_group = store, max_group
        self._patient = bool(getattr(store, "syncs_commits", True))
        # Admissions about at the last commit, and how long it took (`_hand_over`).
        self._expected, self._patience = 1, 0.0
        self._lock = threading.Lock()
        self._queued: list[_Waiting] = []
        self._leading = False
        # A patient leader waits on `_doorbell` (kept held otherwise), released by the
        # admission that brings the queue to `_awaited`.
        self._awaited, self._doorbell = 0, threading.Lock()
        self._doorbell.acquire()
        # Set once closed and no group is under way (`close` waits for it).
        self._idle = threading.Event()
        # Nothing is queued once closed: every admission queued is committed.
        self._closed = False

    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | Remembered | None:
        """The new job's id, what its idempotency key recalls, or None when refused;
        StoreUnavailable once the committer is closed."""
        waiting = _Waiting(storable(job), decide)  # storable raises Unstorable to this caller alone
        with self._lock:
            if self._closed:
                raise shutting_down()
            leads = not self._leading
            if leads:
                self._leading = True
            else:
                self._queued.append(waiting)
                if self._awaited and len(self._queued) >= self._awaited:
                    self._awaited = 0
                    self._doorbell.release()
        if not leads:
            waiting.done.acquire()
            leads = waiting.leads
        if leads:
            self._lead(waiting)
        if waiting.error is not None:
            raise waiting.error
        return waiting.outcome

    def _lead(self, first: _Waiting) -> None:
        """Gathers a group behind `first`, commits it, hands the lead on, and answers
        the group's other members."""
        group = [first]
        started = time.monotonic()
        try:
            self._gather(group)
            started = time.monotonic()
            self._commit(group)
        except BaseException as e:  # noqa: BLE001 - a failure of the committing itself: every member learns it
            for waiting in group:
                waiting.error = e
        finally:
            self._hand_over(len(group), time.monotonic() - started)
            for waiting in group[1:]:
                waiting.done.release()

    def _gather(self, group: list[_Waiting]) -> None:
        """Adds what is queued to `group`; when fewer than were about the last time,
        waits a little for the rest: the admissions answered by the last group are
        likely on their way back, and one flush shared among more costs less."""
        with self._lock:
            self._take(group)
            awaited = min(self._expected, self.max_group) - len(group)
            patient = self._patient and not self._closed and awaited > 0 and self._patience > 0
            if patient:
                self._awaited = awaited
        if not patient:
            return
        rung = self._doorbell.acquire(timeout=self._patience)
        with self._lock:
            if not rung and not self._awaited:
                self._doorbell.acquire()  # rung as the wait ended: held again for the next
            self._awaited = 0
            self._take(group)

    def _take(self, group: list[_Waiting]) -> None:
        room = self.max_group - len(group)
        group += self._queued[:room]
        del self._queued[:room]

    def _hand_over(self, members: int, took: float) -> None:
        """Hands the lead to the first admission queued, if any; else no group is under way."""
        with self._lock:
            # How many were about: this group and those that queued while it committed.
            self._expected = min(members + len(self._queued), self.max_group)
            self._patience = min(took, MAX_PATIENCE)
            if not self._queued:
                self._leading = False
                if self._closed:
                    self._idle.set()
                return
            following = self._queued.pop(0)
        following.leads = True
        following.done.release()

    def _commit(self, group: list[_Waiting]) -> None:
        """Commits `group`, setting each member's outcome or error."""
        try:
            ids = self.store.admit_many([(waiting.job, waiting.decide) for waiting in group])
        except (StoreUnavailable, StoreFull) as e:
            for waiting in group:
                waiting.error = e
            return
        except BaseException as e:  # noqa: BLE001 - every waiter learns why
            if len(group) == 1:
                group[0].error = e
                return
            log.warning("a commit group failed; committing its members one by one", extra={"fields": {"members": len(group), "error": repr(e)}})
            for waiting in group:
                self._commit([waiting])
            return
        for waiting, job_id in zip(group, ids, strict=True):
            waiting.outcome = job_id

    def pending(self) -> int:
        """Admissions waiting for the next group."""
        return len(self._queued)

    def close(self, wait: float = COMMITTER_CLOSE_WAIT_S) -> None:
        """Commits the admissions already queued (a patient leader stops waiting), then
        refuses any more; waits at most `wait` seconds for a group under way."""
        with self._lock:
            self._closed = True
            if self._awaited:
                self._awaited = 0
                self._doorbell.release()
            if not self._leading:
                return
        self._idle.wait(wait)
