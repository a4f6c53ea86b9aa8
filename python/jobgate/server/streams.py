"""Long-lived calls: how many streams may be open, waking WatchJob streams when their
job moves, and ending every stream promptly when the server stops.

A stream served by the sync gRPC server holds one servicer thread for as long as it
is open. `StreamGuard` counts every blocking stream (WatchJob, AdmitStream, server
reflection) per account and in all, and refuses one beyond either limit with
RESOURCE_EXHAUSTED; the server gives streams their own threads, so unary calls and
health checks are served whatever the streams do. `Watches` lets WatchJob streams
sleep until a transition is written, instead of each polling the store.

Must not judge documents or touch the store's tables: it reads the store only through
its interface.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from jobgate.server import errors
from jobgate.server.shapes import behavior_of, shaped_as
from jobgate.store import JobStore
from jobgate.store.base import StoreFull, StoreUnavailable

log = logging.getLogger("jobgate.server")

UNAUTHENTICATED = "<unauthenticated>"  # the bucket of streams that carry no known identity
SHUTTING_DOWN = "the server is shutting down; reconnect (to another replica) and retry"


class _Stream:
    """One open stream: whether it waits on its client, and whether it must end."""

    def __init__(self, account: str, context: grpc.ServicerContext) -> None:
        self.account, self.context = account, context
        self.reading = False
        self.closing = False
        self.released = False


class StreamGuard:
    """The stream limits, applied to every stream whose handler blocks a thread; each
    method's handler wrapped once, as it is registered (`wrap`, `handlers.Registrar`)."""

    def __init__(self, max_streams: int, per_account: int, identify: Callable[[grpc.ServicerContext], str | None]) -> None:
        self.max_streams, self.per_account, self._identify = max_streams, per_account, identify
        self._lock = threading.Lock()
        self._open: set[_Stream] = set()
        self._per_account: dict[str, int] = {}
        self._closing = False

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` of `method` ("/package.Service/Method"): a stream that holds a
        thread counted against the limits; a unary call as it is."""
        if not (handler.request_streaming or handler.response_streaming):
            return handler
        behavior = behavior_of(handler)
        if getattr(behavior, "experimental_non_blocking", False):
            return handler  # holds no thread while open (the health service's Watch)
        method = method.rsplit("/", 1)[-1]
        if handler.response_streaming:
            return shaped_as(handler, self._streaming(behavior, method, reads=bool(handler.request_streaming)))
        return shaped_as(handler, self._unary(behavior, method))

    def _streaming(self, behavior, method: str, *, reads: bool):
        def run(request, context):
            stream = self._enter(context, method)
            try:
                yield from behavior(self._requests(stream, request) if reads else request, context)
            finally:
                self._leave(stream)

        return run

    def _unary(self, behavior, method: str):
        def run(request_iterator, context):
            stream = self._enter(context, method)
            try:
                return behavior(self._requests(stream, request_iterator), context)
            finally:
                self._leave(stream)

        return run

    # ---- counting

    def _enter(self, context: grpc.ServicerContext, method: str) -> _Stream:
        account = self._identify(context) or UNAUTHENTICATED
        stream = _Stream(account, context)
        with self._lock:
            if self._closing:
                errors.abort(context, grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN, errors.SHUTTING_DOWN)
            held = self._per_account.get(account, 0)
            if held >= self.per_account:
                errors.quota_exceeded(
                    context,
                    f"{method}: account {account!r} already holds {held} open streams, the most one account may (server.max_streams_per_account); close one and retry",
                    errors.TOO_MANY_STREAMS,
                    "server.max_streams_per_account",
                    {"account": account},
                )
            if len(self._open) >= self.max_streams:
                errors.quota_exceeded(context, f"{method}: the server already holds {len(self._open)} open streams, the most it serves at once (server.max_streams); retry later", errors.TOO_MANY_STREAMS, "server.max_streams")
            self._open.add(stream)
            self._per_account[account] = held + 1
        # A client that goes away ends the call before the handler may notice.
        if not context.add_callback(lambda: self._leave(stream)):
            self._leave(stream)
        return stream

    def _leave(self, stream: _Stream) -> None:
        with self._lock:
            if stream.released:
                return
            stream.released = True
            self._open.discard(stream)
            left = self._per_account[stream.account] - 1
            if left:
                self._per_account[stream.account] = left
            else:
                del self._per_account[stream.account]

    def open_streams(self) -> int:
        with self._lock:
            return len(self._open)

    # ---- shutdown

    def _requests(self, stream: _Stream, requests: Iterator[Any]) -> Iterator[Any]:
        """The client's messages, marking when the handler waits for the next one: a
        stream that waits on its client at shutdown holds nothing and is ended at once."""
        while True:
            with self._lock:
                if stream.closing:
                    errors.abort(stream.context, grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN, errors.SHUTTING_DOWN)
                stream.reading = True
            try:
                request = next(requests)
            except StopIteration:
                return
            finally:
                with self._lock:
                    stream.reading = False
                    closing = stream.closing
            if closing:  # cancelled while this message arrived: it is not handled
                errors.abort(stream.context, grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN, errors.SHUTTING_DOWN)
            yield request

    def close(self) -> None:
        """Ends the streams: those waiting on their client now (cancelled), the others
        as soon as they answer what they hold (UNAVAILABLE); new ones are refused."""
        with self._lock:
            self._closing = True
            waiting = []
            for stream in self._open:
                stream.closing = True
                if stream.reading:
                    waiting.append(stream.context)
        for context in waiting:
            context.cancel()


class _Job:
    """The watchers of one job and the number of its last transition known here."""

    def __init__(self, lock: threading.Lock) -> None:
        self.changed = threading.Condition(lock)
        self.latest = 0
        self.watchers = 0


class Watch:
    """One WatchJob stream's place in `Watches`."""

    def __init__(self, watches: Watches, job_id: str, job: _Job) -> None:
        self._watches, self.job_id, self._job = watches, job_id, job
        self.cancelled = False

    def wait_beyond(self, seen: int) -> bool:
        """Sleeps until the job has a transition numbered above `seen`: True; False when
        the watch must end instead (the call ended, or the server is stopping)."""
        with self._job.changed:
            while self._job.latest <= seen and not self.cancelled and not self._watches.closed:
                self._job.changed.wait()
            return not (self.cancelled or self._watches.closed)

    def cancel(self) -> None:
        with self._job.changed:
            self.cancelled = True
            self._job.changed.notify_all()

    def end(self) -> None:
        self._watches._forget(self.job_id, self._job)


class Watches:
    """Wakes WatchJob streams when their job gets a transition: at once for marks made
    through this server (`notify`), within `interval` seconds for marks made anywhere
    else (other replicas, `jobgate jobs mark`), found by one shared poll of the store
    for all the jobs watched here."""

    def __init__(self, store: JobStore, interval: float) -> None:
        self._store, self._interval = store, interval
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self.closed = False
        self._stopped = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._poll, name="jobgate-watch", daemon=True)
        self._thread.start()

    def watch(self, job_id: str, context: grpc.ServicerContext) -> Watch:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                job = self._jobs[job_id] = _Job(self._lock)
            job.watchers += 1
        watch = Watch(self, job_id, job)
        if not context.add_callback(watch.cancel):
            watch.cancel()
        return watch

    def _forget(self, job_id: str, job: _Job) -> None:
        with self._lock:
            job.watchers -= 1
            if job.watchers == 0 and self._jobs.get(job_id) is job:
                del self._jobs[job_id]

    def notify(self, job_id: str, latest: int) -> None:
        """The job's last transition is now number `latest`."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and latest > job.latest:
                job.latest = latest
                job.changed.notify_all()

    def _poll(self) -> None:
        while not self._stopped.wait(self._interval):
            with self._lock:
                watched = list(self._jobs)
            if not watched:
                continue
            try:
                latest = self._store.latest(watched)
            except (StoreUnavailable, StoreFull) as e:
                if not self._failing:  # once per outage, not once per poll
                    log.warning("watch poll failed; retrying", extra={"fields": {"error": str(e)}})
                self._failing = True
                continue
            except Exception:  # noqa: BLE001 - the poll thread must outlive any one failure
                log.exception("watch poll failed; retrying")
                continue
            self._failing = False
            for job_id, n in latest.items():
                self.notify(job_id, int(n))

    def close(self) -> None:
        """Wakes every watcher to end its stream, and stops the poll."""
        self._stopped.set()
        with self._lock:
            self.closed = True
            for job in self._jobs.values():
                job.changed.notify_all()
