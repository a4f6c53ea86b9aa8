"""Streams cannot starve the server: WatchJob and AdmitStream calls are limited per
account and in all, refused beyond with RESOURCE_EXHAUSTED, while unary calls and
health checks are served; WatchJob streams sleep on one shared notifier instead of
polling the store each; every stream ends promptly when the server stops."""

from __future__ import annotations

import json
import queue
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobgate.server.auth import token_hash
from jobgate.store import open_store
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from tests.helpers import sample
from tests.server.helpers import ACCOUNTS, TOKEN, Running, bearer, config_for

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
BOB = "bob-token-for-streams"
CAROL = "carol-token-for-streams"


def limited(tmp_path, **server) -> Running:
    """A server with small stream limits and few unary threads, and three submitters."""
    accounts = {**ACCOUNTS, **{name: {"token": token_hash(token), "projects": ["my-lab"], "roles": ["submitter"]} for name, token in (("bob", BOB), ("carol", CAROL))}}
    return Running(config_for(tmp_path, accounts, **{"max_streams": 6, "max_streams_per_account": 3, "threads": 2, **server}))


def admit(r: Running) -> str:
    return r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC)), metadata=r.auth, timeout=30).job_id


def watch(r: Running, job_id: str, token: str = TOKEN):
    """An open WatchJob stream, once its first transition (the history) has arrived."""
    call = r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=bearer(token))
    assert next(call).state == "PENDING"
    return call


class Requests:
    """The client side of an AdmitStream: messages are sent when put."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()

    def put(self, request) -> None:
        self._queue.put(request)

    def end(self) -> None:
        self._queue.put(None)

    def __iter__(self):
        while (item := self._queue.get()) is not None:
            yield item


def admit_stream(r: Running, token: str = TOKEN):
    """An open AdmitStream that has answered one dry run, then waits on its client."""
    requests = Requests()
    call = r.admission.AdmitStream(iter(requests), metadata=bearer(token))
    requests.put(admission_pb2.AdmitStreamRequest(request_id="first", document=admission_pb2.Document(raw=JOBSPEC), dry_run=True))
    assert next(call).request_id == "first"
    return call, requests


def refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        next(call)
    return e.value


def unary_calls_are_served(r: Running, job_id: str) -> None:
    health = health_pb2_grpc.HealthStub(r.channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=30).status == health_pb2.HealthCheckResponse.SERVING
    assert admit(r)
    assert r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=r.auth, timeout=30).job.id == job_id
    assert r.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=r.auth, timeout=30).jobs
    assert r.admission.RecipeStatus(admission_pb2.RecipeStatusRequest(lock=b"{}"), metadata=r.auth, timeout=30).status == "malformed"


def test_streams_beyond_the_limits_are_refused_and_unary_calls_are_served(tmp_path):
    r = limited(tmp_path)
    try:
        job_id = admit(r)
        # alice: two watches and an idle AdmitStream reach her limit of 3
        held = [watch(r, job_id), watch(r, job_id), admit_stream(r)[0]]
        for call in (r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=r.auth), admit_stream_call(r, TOKEN)):
            e = refused(call)
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "account 'alice' already holds 3 open streams" in e.details() and "server.max_streams_per_account" in e.details()
        unary_calls_are_served(r, job_id)
        # bob's three streams reach the server's limit of 6: carol, who holds none, is refused
        held += [watch(r, job_id, BOB) for _ in range(3)]
        e = refused(r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=bearer(CAROL)))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the server already holds 6 open streams" in e.details() and "server.max_streams" in e.details()
        # Server reflection streams hold a thread too: they count alike.
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        reflection = reflection_pb2_grpc.ServerReflectionStub(r.channel)
        e = refused(reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        unary_calls_are_served(r, job_id)
        assert r.server.streams.open_streams() == 6
        # A stream that ends gives its place back.
        held.pop().cancel()
        while r.server.streams.open_streams() > 5:  # the server learns of the cancel
            time.sleep(0.05)
        held.append(watch(r, job_id, CAROL))
        for call in held:
            call.cancel()
    finally:
        r.close()


def admit_stream_call(r: Running, token: str):
    return r.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True)]), metadata=bearer(token))


def test_the_attack_of_many_watches_from_one_client_leaves_health_served(tmp_path):
    """More WatchJob streams than the server serves, from one client on one channel,
    at the defaults but for a smaller server-wide limit: the ones beyond are refused,
    health checks and admissions are answered while the rest stay open."""
    r = Running(config_for(tmp_path, max_streams=40, max_streams_per_account=40))
    try:
        job_id = admit(r)
        calls = [r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=r.auth) for _ in range(48)]
        outcomes = []
        for call in calls:
            try:
                outcomes.append(next(call).state)
            except grpc.RpcError as e:
                outcomes.append(e.code())
        assert outcomes.count("PENDING") == 40 and outcomes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 8
        unary_calls_are_served(r, job_id)
        # and every open watch still hears of the next transition
        r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", source="poller"), metadata=r.backend)
        assert {next(call).state for call, o in zip(calls, outcomes, strict=True) if o == "PENDING"} == {"RUNNING"}
        for call in calls:
            call.cancel()
    finally:
        r.close()


class CountingStore:
    """The server's store, counting the reads WatchJob streams make."""

    def __init__(self, store) -> None:
        self._store = store
        self.transitions_calls = 0
        self.latest_calls: list[int] = []

    def transitions(self, job_id, after=0):
        self.transitions_calls += 1
        return self._store.transitions(job_id, after)

    def latest(self, job_ids):
        self.latest_calls.append(len(job_ids))
        return self._store.latest(job_ids)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_watches_sleep_on_one_shared_poll_and_wake_on_marks(tmp_path):
    config = config_for(tmp_path, watch_poll_seconds=0.05)
    store = CountingStore(open_store(config.store.path))
    r = Running(config, store=store)
    try:
        job_ids = [admit(r) for _ in range(3)]
        calls = [watch(r, job_id) for job_id in job_ids for _ in range(4)]
        assert store.transitions_calls == 12  # one read of the history per stream
        polls = len(store.latest_calls)
        while len(store.latest_calls) < polls + 5:  # several polls go by
            time.sleep(0.05)
        # Idle streams read nothing; the shared poll asks once for all the watched jobs.
        assert store.transitions_calls == 12
        assert set(store.latest_calls[polls:]) == {3}
        # A mark through this server wakes its job's watchers, and no one else's.
        r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_ids[0], state="RUNNING", message="pulled", source="poller"), metadata=r.backend)
        assert [next(call).message for call in calls[:4]] == ["pulled"] * 4
        assert store.transitions_calls == 16
        # A mark made elsewhere (another process on the same store) is found by the poll.
        elsewhere = open_store(config.store.path)
        elsewhere.mark(job_ids[1], "RUNNING", "from the poller process", "poller")
        elsewhere.mark(job_ids[1], "COMPLETE", "done", "poller")
        for call in calls[4:8]:
            assert [t.state for t in call] == ["RUNNING", "COMPLETE"]  # and the stream ends at the terminal state
        elsewhere.close()
        for call in calls:
            call.cancel()
    finally:
        r.close()


def test_streams_end_promptly_when_the_server_stops(tmp_path):
    r = limited(tmp_path)
    job_id = admit(r)
    watching = watch(r, job_id)
    idle, idle_requests = admit_stream(r)
    busy, busy_requests = admit_stream(r)
    # The busy stream holds a document when the stop begins: the gate keeps it until released.
    held, entered, release = JOBSPEC + b" ", threading.Event(), threading.Event()
    admit_now = r.gate.admit

    def admit_held(data, *args, **kwargs):
        if data == held:
            entered.set()
            release.wait(60)
        return admit_now(data, *args, **kwargs)

    r.gate.admit = admit_held
    busy_requests.put(admission_pb2.AdmitStreamRequest(request_id="in hand", document=admission_pb2.Document(raw=held), dry_run=True))
    assert entered.wait(60)
    stopped = r.server.stop(120)
    release.set()
    e = refused(watching)
    assert e.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in e.details()
    # A stream waiting on its client holds nothing: it is cancelled at once.
    assert refused(idle).code() == grpc.StatusCode.CANCELLED
    answered = next(busy)
    assert answered.request_id == "in hand" and answered.report.verdict == "pass"
    e = refused(busy)
    assert e.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in e.details()
    # Ended by the server, not cut at the end of the grace ("Cancelling all calls").
    assert stopped.wait(120)
    idle_requests.end()
    busy_requests.end()
    r.channel.close()


def test_a_new_stream_during_shutdown_is_unavailable(tmp_path):
    r = limited(tmp_path)
    try:
        job_id = admit(r)
        r.server.streams.close()
        e = refused(r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=r.auth))
        assert e.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in e.details()
    finally:
        r.close()


def test_stubs_of_other_channels_count_for_the_same_account(tmp_path):
    """The limit is the account's, not the connection's."""
    r = limited(tmp_path)
    other = grpc.insecure_channel(f"127.0.0.1:{r.port}")
    try:
        job_id = admit(r)
        calls = [watch(r, job_id) for _ in range(3)]
        e = refused(jobs_pb2_grpc.JobServiceStub(other).WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=r.auth))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in calls:
            call.cancel()
        assert admission_pb2_grpc.AdmissionServiceStub(other).Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True), metadata=r.auth).report.verdict == "pass"
    finally:
        other.close()
        r.close()


def test_unary_threads_follow_the_store_unless_set(tmp_path):
    """Unset, few threads on SQLite (local commits) and many with a database server,
    whose commits each admission waits through holding its thread; set, as set."""
    from jobgate.server.app import unary_threads

    sqlite = config_for(tmp_path)
    postgres = sqlite.model_copy(update={"store": sqlite.store.model_copy(update={"url": "postgresql://db.example/jobgate"})})
    assert (unary_threads(sqlite), unary_threads(postgres)) == (2, 32)
    for config in (sqlite, postgres):
        assert unary_threads(config.model_copy(update={"server": config.server.model_copy(update={"threads": 7})})) == 7


def test_streams_run_beside_the_unary_threads_not_on_them(tmp_path):
    """With every unary thread's worth of streams open (more streams than `threads`),
    a health check and an admission are still answered: streams have threads of their own."""
    r = limited(tmp_path)  # threads = 2, max_streams = 6
    opened = []
    try:
        for token in (TOKEN, BOB):
            for _ in range(2):
                requests: queue.Queue = queue.Queue()
                stream = r.admission.AdmitStream(iter(requests.get, None), metadata=bearer(token), timeout=30)
                requests.put(admission_pb2.AdmitStreamRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True))
                next(stream)  # open and served: it holds a thread while it waits for the next
                opened.append((requests, stream))
        assert r.server.streams.open_streams() == 4
        health = health_pb2_grpc.HealthStub(r.channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        assert r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True), metadata=r.auth, timeout=10).report.verdict == "pass"
    finally:
        for requests, _stream in opened:
            requests.put(None)
        r.close()
