"""The load: gRPC clients in one or more processes, each with its share of the
connections, of the calls in flight (closed loop) or of the schedule (open loop).
Unary calls go through gRPC's synchronous API, each call's completion sending the
next; AdmitStreams through grpc.aio.

Closed loop: each of `concurrency` slots sends a call, waits for it, sends the next;
latency runs from the send. Open loop: calls are due at a fixed rate, whatever
the server does, and latency runs from the time a call was due: a server that falls
behind shows its queue in the latencies instead of slowing the load down (the
coordinated omission a closed loop hides). Unary calls in an open loop are sent as
they fall due, without limit; AdmitStream's messages wait for one of the
`concurrency` streams, and that wait is part of their latency.

Each connection is a channel of its own TCP connection (a local subchannel pool:
gRPC would otherwise carry channels to one address on one connection), and unary
calls take the connections in turn: `serve --workers N` shares connections among its
workers, not calls, so only calls on several connections reach several workers.

A ramp (`Ramp`, ghz's step load schedule) is an open loop whose rate changes by a
step every so many seconds of the measured run, held once it reaches its end; the
warm-up runs at the starting rate. Every call belongs to the step it was due in.

Processes are started with `spawn` (gRPC's runtime does not survive `fork`) and
begin together at a shared monotonic instant; their recordings are merged after.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import resource
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

from jobgate.bench.calls import METHODS
from jobgate.bench.results import Recorder

ADMIT, ADMIT_BATCH, ADMIT_STREAM, HEALTH_CHECK = METHODS["admit"], METHODS["admit-batch"], METHODS["admit-stream"], METHODS["empty"]
START_DELAY = 0.3  # seconds for every process to connect before the shared start
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Ramp:
    """`start` calls/s, then `step` more (fewer when negative) every `every` seconds
    of the measured run; held at `end`, when given, once reached."""

    start: float
    step: float
    every: float
    end: float | None = None

    def steps(self) -> int | None:
        """How many rates the ramp takes; None when it has no end."""
        if self.end is None:
            return None
        return math.ceil(round((self.end - self.start) / self.step, 9)) + 1

    def index(self, t: float) -> int:
        """The step of an instant `t` seconds into the measured run (a warm-up call: 0)."""
        k = int((t + 1e-9) // self.every) if t > 0 else 0  # a call due on a step's start is in it
        n = self.steps()
        return k if n is None else min(k, n - 1)

    def rate(self, k: int) -> float:
        r = self.start + k * self.step
        if self.end is not None:
            r = min(r, self.end) if self.step > 0 else max(r, self.end)
        return r

    def span(self, k: int) -> tuple[float, float]:
        """Where step `k` runs, in seconds of the measured run; the last step of a ramp
        with an end runs on for as long as the run does."""
        n = self.steps()
        return k * self.every, (math.inf if n is not None and k == n - 1 else (k + 1) * self.every)

    def schedule(self, origin: float, measured_from: float):
        """Due times of the whole load (every process's), from `origin`: the warm-up at
        the starting rate, then each step from its own start."""
        for j in itertools.count():
            due = origin + j / self.start
            if due >= measured_from:
                break
            yield due
        for k in itertools.count():
            low, high = self.span(k)
            rate = self.rate(k)
            for j in itertools.count():
                due = low + j / rate
                if due >= high:
                    break
                yield measured_from + due


@dataclass(frozen=True)
class Plan:
    """A run, as every process receives it. `requests` are encoded request messages,
    cycled; `documents` how many documents each carries."""

    server: str
    call: str
    requests: tuple[bytes, ...]
    documents: tuple[int, ...]
    concurrency: int
    rps: float | None
    total: int | None
    duration: float | None
    warmup: float
    connections: int
    procs: int
    timeout: float
    metadata: tuple[tuple[str, str | bytes], ...] = ()
    ramp: Ramp | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None


@dataclass(frozen=True)
class Share:
    """One process's part of a plan."""

    index: int
    connections: int
    concurrency: int
    total: int | None


def shares(plan: Plan) -> list[Share]:
    """The plan cut over its processes: connections, slots and calls as even as they go.
    A process opens one connection at least, and no more than its streams carry."""

    def part(n: int, i: int) -> int:
        return n // plan.procs + (1 if i < n % plan.procs else 0)

    out = []
    for i in range(plan.procs):
        slots, connections = max(1, part(plan.concurrency, i)), max(1, part(plan.connections, i))
        if plan.call == "admit-stream":
            connections = min(connections, slots)
        out.append(Share(i, connections, slots, None if plan.total is None else part(plan.total, i)))
    return out


def run(plan: Plan) -> tuple[list[dict[str, Any]], float, float]:
    """Runs the plan; returns each process's recording, the measured start and the
    measured end (monotonic seconds)."""
    start = time.monotonic() + START_DELAY + (0.7 if plan.procs > 1 else 0)
    if plan.procs == 1:
        parts = [run_share(plan, shares(plan)[0], start)]
    else:
        with ProcessPoolExecutor(max_workers=plan.procs, mp_context=get_context("spawn")) as pool:
            parts = list(pool.map(run_share, itertools.repeat(plan), shares(plan), itertools.repeat(start)))
    measured_from = start + plan.warmup
    end = max([p["last"] for p in parts] + [measured_from + (plan.duration or 0)])
    return parts, measured_from, end


def run_share(plan: Plan, share: Share, start: float) -> dict[str, Any]:
    """One process's part: its own event loop, channels and recorder; with the CPU
    time the process spent on it (every thread, the kernel's share included) and the
    calls it sent (warm-up included), to tell what a call costs the client."""
    client = _Client(plan, share, start)
    before = _cpu()
    part = client.run()
    part["cpu_s"], part["sent"] = _cpu() - before, client.sent
    return part


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Client:
    def __init__(self, plan: Plan, share: Share, start: float) -> None:
        self.plan, self.share, self.start = plan, share, start
        self.measure_from = start + plan.warmup
        self.recorder = Recorder(self.measure_from, plan.ramp, self._reports)
        self.requests = itertools.cycle(zip(plan.requests, plan.documents, strict=True))
        self.left = share.total  # measured calls still to send, when counted
        self.sent = 0

    # ---- what a call is

    def _reports(self, answer: bytes) -> list:
        """The reports in an answer (decoded once per distinct answer, by the recorder)."""
        from jobgate.v1 import admission_pb2

        call = self.plan.call
        if call == "empty":
            return []
        if call == "admit-batch":
            return [r.report for r in admission_pb2.AdmitBatchResponse.FromString(answer).results]
        response = (admission_pb2.AdmitStreamResponse if call == "admit-stream" else admission_pb2.AdmitResponse).FromString(answer)
        return [response.report]

    def _channels(self, api):
        """The share's channels, from `api`: grpc (unary calls) or grpc.aio (streams)."""
        import grpc

        # No transparent retries: a call retried inside gRPC would be timed and counted
        # as one, and the retry machinery costs every call some CPU. gRPC's minimal stack
        # leaves out the filters a load generator does not use (idle timer, message size
        # checks), channelz counts nothing, and no BDP pings are sent for the server to
        # answer: h2load sends none either. Deadlines are kept.
        options = [
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            ("grpc.enable_retries", 0),
            ("grpc.minimal_stack", 1),
            ("grpc.enable_channelz", 0),
            ("grpc.http2.bdp_probe", 0),
        ]
        if self.plan.ca is None:
            return [api.insecure_channel(self.plan.server, options=options) for _ in range(self.share.connections)]
        credentials = grpc.ssl_channel_credentials(self.plan.ca, self.plan.key, self.plan.cert)
        return [api.secure_channel(self.plan.server, credentials, options=options) for _ in range(self.share.connections)]

    # ---- pacing

    def _take(self, now: float) -> bool:
        """Whether a slot sends another call at `now` (warm-up calls are free)."""
        if now < self.measure_from:
            return True
        if self.left is not None:
            if self.left <= 0:
                return False
            self.left -= 1
            return True
        return now < self.measure_from + (self.plan.duration or 0)

    def _global(self):
        if self.plan.ramp is not None:
            yield from self.plan.ramp.schedule(self.start, self.measure_from)
            return
        period = 1.0 / self.plan.rps
        for k in itertools.count():
            yield self.start + k * period

    def _schedule(self):
        """Due times of this process's calls in an open loop: every `procs`-th slot
        of the global schedule, from the start, warm-up included."""
        procs, index = self.plan.procs, self.share.index
        for k, due in enumerate(self._global()):
            if k % procs != index:
                continue
            if due >= self.measure_from:
                if self.left is not None:
                    if self.left <= 0:
                        return
                    self.left -= 1
                elif due >= self.measure_from + (self.plan.duration or 0):
                    return
            yield due

    async def _until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    # ---- the run

    def run(self) -> dict[str, Any]:
        if self.plan.call == "admit-stream":
            asyncio.run(self._run_streams())
        else:
            self._run_unary()
        return self.recorder.export()

    def _run_unary(self) -> None:
        import grpc

        channels = self._channels(grpc)
        try:
            for channel in channels:
                grpc.channel_ready_future(channel).result(CONNECT_TIMEOUT)
            method = {"admit": ADMIT, "admit-batch": ADMIT_BATCH, "empty": HEALTH_CHECK}[self.plan.call]
            # Answers stay bytes: the recorder decodes each distinct one once. A
            # registered method is looked up once per channel, not once per call, as
            # generated stubs do.
            calls = [c.unary_unary(method, request_serializer=None, response_deserializer=None, _registered_method=True).future for c in channels]
            _Unary(self, calls, grpc).run()
        finally:
            for channel in channels:
                channel.close()

    async def _run_streams(self) -> None:
        import grpc

        channels = self._channels(grpc.aio)
        # Built once: a metadata tuple given per call is copied into a new Metadata
        # object by every call.
        self.metadata = grpc.aio.Metadata.from_tuple(self.plan.metadata)
        try:
            for channel in channels:
                await asyncio.wait_for(channel.channel_ready(), CONNECT_TIMEOUT)
            calls = [c.stream_stream(ADMIT_STREAM, request_serializer=None, response_deserializer=None, _registered_method=True) for c in channels]
            await self._streams(calls, grpc)
        finally:
            for channel in channels:
                await channel.close()

    async def _streams(self, calls: list, grpc) -> None:
        """`concurrency` AdmitStreams; each sends a message, reads its answer, and
        takes the next (closed loop) or the next one due (open loop)."""
        due: asyncio.Queue | None = asyncio.Queue() if self.plan.rps is not None else None

        async def slot(call) -> None:
            stream = call(metadata=self.metadata)
            try:
                while True:
                    if due is None:
                        begun = time.monotonic()  # one instant, as for unary calls
                        if not self._take(begun):
                            break
                    else:
                        begun = await due.get()
                        if begun is None:
                            break
                    request, documents = next(self.requests)
                    self.sent += 1
                    try:
                        await stream.write(request)
                        response = await asyncio.wait_for(stream.read(), self.plan.timeout)
                    except grpc.aio.AioRpcError as e:
                        self.recorder.failed(begun, time.monotonic(), e.code().name, e.details() or "")
                        stream = call(metadata=self.metadata)  # the stream ended: open another
                        continue
                    except TimeoutError:
                        self.recorder.failed(begun, time.monotonic(), "DEADLINE_EXCEEDED", "no answer within the deadline")
                        stream.cancel()
                        stream = call(metadata=self.metadata)
                        continue
                    if response is grpc.aio.EOF:
                        self.recorder.failed(begun, time.monotonic(), "UNKNOWN", "the stream ended")
                        stream = call(metadata=self.metadata)
                        continue
                    self.recorder.answered(begun, time.monotonic(), response, documents)
            finally:
                try:  # end it cleanly: no more messages, and the server's OK
                    await stream.done_writing()
                    await asyncio.wait_for(stream.read(), CONNECT_TIMEOUT)
                except Exception:  # noqa: BLE001 - already ended or broken: drop it
                    stream.cancel()

        await self._until(self.start)
        slots = [asyncio.create_task(slot(calls[i % len(calls)])) for i in range(self.share.concurrency)]
        if due is not None:
            for when in self._schedule():
                await self._until(when)
                due.put_nowait(when)
            for _ in slots:
                due.put_nowait(None)
        await asyncio.gather(*slots)


class _Unary:
    """Unary calls with gRPC's synchronous API: each call a future whose completion,
    on the channel's own thread, records it and, in a closed loop, sends the next.
    No event loop stands between a call's answer and the next call: per call, the
    client spends less CPU than with grpc.aio, CPU the server it measures would
    otherwise lose on a busy machine (BENCHMARKS.md, client).

    Completions of one channel come on one thread, of several on several: what they
    share (the recorder, the requests, the counts) is taken under a lock."""

    def __init__(self, client: _Client, calls: list, grpc) -> None:
        self.client, self.plan = client, client.plan
        self.turns = itertools.cycle(calls)  # each call takes the next connection
        self.error = grpc.RpcError
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.outstanding = 0  # slots still sending (closed loop), calls unanswered (open loop)
        self.local = threading.local()
        self.broken: BaseException | None = None  # raised in a completion: the run stops with it

    def run(self) -> None:
        client = self.client
        _sleep_until(client.start)
        if self.plan.rps is None:
            self.outstanding = client.share.concurrency
            for _ in range(client.share.concurrency):
                self._next()
        else:
            self._open()
        self.finished.wait()
        if self.broken is not None:
            raise self.broken

    def _send(self, begun: float, done) -> None:
        """One call, due or begun at `begun`; `done(begun, documents, future)` on its end."""
        with self.lock:
            request, documents = next(self.client.requests)
            self.client.sent += 1
            call = next(self.turns)
        future = call(request, metadata=self.plan.metadata, timeout=self.plan.timeout)
        future.add_done_callback(functools.partial(done, begun, documents))

    def _record(self, begun: float, documents: int, future) -> None:
        end = time.monotonic()
        try:
            answer = future.result()
        except self.error as e:
            with self.lock:
                self.client.recorder.failed(begun, end, e.code().name, e.details() or "")
            return
        with self.lock:
            self.client.recorder.answered(begun, end, answer, documents)

    # ---- closed loop

    def _next(self) -> None:
        """A slot's next call, unless the run is over. A call that ends before its
        callback is added (a refusal, a dead connection) runs the callback at once,
        on this thread: those are queued and sent from the loop here, not by
        recursion."""
        local = self.local
        local.queued = getattr(local, "queued", 0) + 1
        if getattr(local, "sending", False):
            return
        local.sending = True
        try:
            while local.queued:
                local.queued -= 1
                with self.lock:
                    # One instant decides whether the call is measured and starts its
                    # latency: a call let through as warm-up is never counted as measured.
                    now = time.monotonic()
                    if not self.client._take(now):
                        self.outstanding -= 1
                        if self.outstanding == 0:
                            self.finished.set()
                        continue
                self._send(now, self._closed_done)
        finally:
            local.sending = False

    def _closed_done(self, begun: float, documents: int, future) -> None:
        try:
            self._record(begun, documents, future)
            if self.broken is None:
                self._next()
        except Exception as e:  # noqa: BLE001 - gRPC would log it and drop the slot: the run would never end
            self._break(e)

    # ---- open loop

    def _open(self) -> None:
        """Calls sent as they fall due, whatever is in flight."""
        with self.lock:
            self.outstanding = 1  # the schedule itself, until it ends
        for due in self.client._schedule():
            _sleep_until(due)
            with self.lock:
                self.outstanding += 1
            self._send(due, self._open_done)
        self._open_ended()

    def _open_done(self, begun: float, documents: int, future) -> None:
        try:
            self._record(begun, documents, future)
            self._open_ended()
        except Exception as e:  # noqa: BLE001 - as in the closed loop
            self._break(e)

    def _break(self, e: Exception) -> None:
        if self.broken is None:
            self.broken = e
        self.finished.set()

    def _open_ended(self) -> None:
        with self.lock:
            self.outstanding -= 1
            if self.outstanding == 0:
                self.finished.set()


def _sleep_until(when: float) -> None:
    delay = when - time.monotonic()
    if delay > 0:
        threading.Event().wait(delay)
