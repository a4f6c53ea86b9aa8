"""A refused or failed statement harms nothing after it, on each store: on one pooled
connection that has run reads often enough for a driver to prepare them, a mark refused
(a finished job marked again with another terminal state), a read of an unknown job, a
full record, a statement that fails inside a transaction or a commit group that fails
midway is followed by admissions that succeed, through the store and through the
service; on PostgreSQL, a call that finds a prepared statement gone from its session
all the same (reset behind the driver's back) runs again on a new connection; and a
mixed load with refusals, from many threads, sees no INTERNAL error and loses no
acknowledged admission."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter

import grpc
import pytest

from jobgate.config import Config, Quota
from jobgate.server.gate import Gate
from jobgate.store import JobNotFound, RecordFull, TerminalState, open_store
from jobgate.v1 import admission_pb2, jobs_pb2
from tests.helpers import mutate, sample
from tests.server.helpers import Running
from tests.store.helpers import config_on
from tests.store.test_commit_groups import admitted, job

SPEC = sample("jobspec.valid.json")
JOBSPEC = json.dumps(SPEC).encode()
# alice's other project, which has no quota: its admissions read no usage (on
# PostgreSQL, the commit groups of one round trip), my-lab's do.
UNMETERED = json.dumps(mutate(SPEC, {"/metadata/project": "other-lab"})).encode()
QUOTA = Quota(projects={"my-lab": 1_000_000})
# More runs of each statement than psycopg waits for before preparing one of its own
# (its prepare_threshold, 5 by default).
REPEATS = 12
VANISHED = "prepared statements vanished from a job store connection; retrying on another"


@pytest.fixture
def one_connection(backend, tmp_path):
    """A gate whose store has a single connection, so every call below shares it, and
    a record of at most four transitions."""
    path, url = backend
    config = Config.model_validate({"store": {"path": path, "url": url}, "jobs": {"results_root": str(tmp_path / "results")}})
    g = Gate(config, open_store(path, url, connections=1, max_transitions=4))
    yield g
    g.close()
    g.store.close()


def read_often(store, job_id: str) -> None:
    """Each kind of read, often enough on the one connection to be prepared by a driver
    that prepares what it runs often."""
    for _ in range(REPEATS):
        store.get(job_id)
        store.transitions(job_id)
        store.latest([job_id])
        store.list(project="my-lab")
        store.gpus_in_use("my-lab")
        store.recall("alice", ["never-used"], 3600)


def refused_mark(store, job_id: str) -> None:
    store.mark(job_id, "COMPLETE", "done", "poller")
    with pytest.raises(TerminalState):
        store.mark(job_id, "ERROR", "failed after all", "poller")


def unknown_job(store, _job_id: str) -> None:
    with pytest.raises(JobNotFound):
        store.get("dino-train-000000000000")
    with pytest.raises(JobNotFound):
        store.mark("dino-train-000000000000", "RUNNING", "", "poller")


def full_record(store, job_id: str) -> None:
    for n in range(3):
        store.mark(job_id, "RUNNING", f"step {n}", "poller")
    with pytest.raises(RecordFull):
        store.mark(job_id, "RUNNING", "one too many", "poller")


def failed_statement(store, _job_id: str) -> None:
    """A statement the database refuses, inside the store's own transaction."""
    from jobgate.store.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        import psycopg

        with pytest.raises(psycopg.errors.DivisionByZero), store._transaction() as db:
            db.execute("SELECT 1 / 0")
    else:
        import sqlite3

        with pytest.raises(sqlite3.OperationalError), store._writing() as db:
            db.execute("SELECT no_such_column FROM jobs")


def failed_group(store, _job_id: str) -> None:
    """A commit group that fails after its locks and its read, before its writes."""

    def failing(_in_use: int) -> bool:
        raise RuntimeError("the decision failed")

    with pytest.raises(RuntimeError, match="the decision failed"):
        store.admit_many([(job(), admitted), (job(), failing)])


@pytest.mark.parametrize("failure", [refused_mark, unknown_job, full_record, failed_statement, failed_group])
def test_admissions_succeed_after_a_refused_or_failed_statement_on_the_same_connection(one_connection, failure, caplog):
    gate, store = one_connection, one_connection.store
    finished = gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id
    read_often(store, finished)
    failure(store, finished)
    opened = []
    for n in range(3):
        # Each kind of admission: usage read first or not (on PostgreSQL, a group of two
        # round trips or of one), with and without an idempotency key, alone and grouped.
        opened += store.admit_many([(job(reads_usage=True), admitted), (job(f"read-{n}", reads_usage=True), admitted)])
        opened += store.admit_many([(job(reads_usage=False), admitted), (job(f"unread-{n}", reads_usage=False), admitted)])
        opened.append(gate.admit(JOBSPEC, None, "alice", dry_run=False, key=f"gate-{n}", fingerprint=b"f" * 32).job_id)
    assert all(isinstance(job_id, str) and job_id for job_id in opened)
    assert len(set(opened)) == len(opened)
    assert [store.get(job_id)["transitions"][0]["state"] for job_id in opened] == ["PENDING"] * len(opened)
    assert store.recall("alice", ["read-2", "unread-2"], 3600).keys() == {"read-2", "unread-2"}
    assert VANISHED not in caplog.text  # no statement was ever found missing


def reset_behind_the_drivers_back(store, statement: str) -> None:
    """Runs `statement` on the store's one connection through libpq, where psycopg does
    not see it, as a pooler resetting a session would."""
    import psycopg

    with store._pool.connection() as db:
        assert db.pgconn.exec_(statement.encode()).status == psycopg.pq.ExecStatus.COMMAND_OK


@pytest.mark.parametrize("reset", ["DEALLOCATE ALL", "DISCARD ALL"])
def test_a_call_that_finds_its_prepared_statements_gone_runs_again_on_a_new_connection(fresh_postgres, reset, caplog):
    """Whatever drops them behind the driver's back, a call that finds a statement
    missing failed before any commit: it runs again on a new connection, where psycopg
    prepares its statements afresh."""
    store = open_store("", fresh_postgres, connections=1)
    try:
        job_id = store.admit(job(), admitted)
        calls = {
            "admission reading usage": lambda n: store.admit(job(f"{reset}-{n}", reads_usage=True), admitted),
            "admission reading nothing": lambda n: store.admit(job(reads_usage=False), admitted),
            "recall": lambda n: store.recall("alice", [f"{reset}-0"], 3600),
            "read": lambda n: store.get(job_id)["id"],
            "mark": lambda n: store.mark(job_id, "RUNNING", f"step {n}", "poller")["id"],
        }
        for name, call in calls.items():
            for n in range(REPEATS):  # prepared by now
                call(n)
            reset_behind_the_drivers_back(store, reset)
            assert call(REPEATS), name
        assert [r.getMessage() for r in caplog.records].count(VANISHED) == len(calls)
        opened = [rec["id"] for rec in store.list(limit=1000)]
        assert len(opened) == 1 + 2 * (REPEATS + 1)
        assert store.recall("alice", [f"{reset}-{n}" for n in range(REPEATS + 1)], 3600).keys() == {f"{reset}-{n}" for n in range(REPEATS + 1)}
        assert [t["message"] for t in store.get(job_id)["transitions"][1:]] == [f"step {n}" for n in range(REPEATS + 1)]
    finally:
        store.close()


def served_on(backend, tmp_path, **store):
    config = config_on(backend, tmp_path)
    return Running(config.model_copy(update={"quota": QUOTA, "store": config.store.model_copy(update=store)}))


def admit(r: Running, data: bytes = JOBSPEC, key: str = ""):
    document = admission_pb2.Document(raw=data, idempotency_key=key)
    return r.admission.Admit(admission_pb2.AdmitRequest(document=document), metadata=r.auth, timeout=60)


def mark(r: Running, job_id: str, state: str):
    return r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state=state, source="poller"), metadata=r.backend, timeout=60)


def get(r: Running, job_id: str):
    return r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=r.auth, timeout=60).job


def test_a_refused_mark_through_the_service_leaves_admissions_working(backend, tmp_path, caplog):
    r = served_on(backend, tmp_path, connections=1)
    try:
        finished = admit(r).job_id
        for n in range(REPEATS):
            assert get(r, finished).id == finished
            assert admit(r, key="same").job_id  # the same key each time: recalled
            assert admit(r, UNMETERED, key=f"unmetered-{n}").job_id
        mark(r, finished, "COMPLETE")
        with pytest.raises(grpc.RpcError) as refused:
            mark(r, finished, "ERROR")
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        opened = [admit(r).job_id, admit(r, key="after").job_id, admit(r, UNMETERED).job_id, admit(r, UNMETERED, key="after-unmetered").job_id]
        assert all(opened)
        assert [get(r, job_id).transitions[0].state for job_id in opened] == ["PENDING"] * 4
        assert VANISHED not in caplog.text
    finally:
        r.close()


def test_a_mixed_load_with_refusals_sees_no_internal_error_and_loses_no_admission(backend, tmp_path, caplog):
    r = served_on(backend, tmp_path, connections=2, threads=32)
    stop = time.monotonic() + 4.0
    lock = threading.Lock()
    acknowledged: list[str] = []
    finished: list[str] = []
    codes: Counter = Counter()
    unexpected: list[str] = []

    def call(what, *args, expect=(grpc.StatusCode.OK,)):
        try:
            out = what(*args)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            out, code = None, e.code()
            if code not in expect:
                with lock:
                    unexpected.append(f"{what.__name__}: {code.name}: {e.details()}")
        with lock:
            codes[code] += 1
        return out

    def admitter(n: int) -> None:
        i = 0
        while time.monotonic() < stop:
            # Each request sent twice, most with a key (the second a replay).
            data = JOBSPEC if (i // 2) % 2 else UNMETERED
            key = f"{n}-{i // 2}" if (i // 2) % 3 else ""
            answer = call(admit, r, data, key)
            if answer is not None and answer.job_id:
                with lock:
                    acknowledged.append(answer.job_id)
            i += 1

    def marker() -> None:
        while time.monotonic() < stop:
            with lock:
                job_id = acknowledged[-1] if acknowledged else ""
            if not job_id:
                time.sleep(0.01)
                continue
            # Finished by another marker meanwhile: refused, as the mark below always is.
            call(mark, r, job_id, "COMPLETE", expect=(grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION))
            call(mark, r, job_id, "ERROR", expect=(grpc.StatusCode.FAILED_PRECONDITION,))
            with lock:
                finished.append(job_id)

    def reader() -> None:
        while time.monotonic() < stop:
            with lock:
                job_id = acknowledged[0] if acknowledged else "dino-train-000000000000"
            call(get, r, job_id, expect=(grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND))
            call(get, r, f"dino-train-{uuid.uuid4().hex[:12]}", expect=(grpc.StatusCode.NOT_FOUND,))
            call(lambda: list(r.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=5), metadata=r.auth, timeout=60).jobs))

    threads = [threading.Thread(target=admitter, args=(n,)) for n in range(4)] + [threading.Thread(target=marker) for _ in range(2)] + [threading.Thread(target=reader) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert unexpected == []
        assert codes[grpc.StatusCode.INTERNAL] == 0
        assert VANISHED not in caplog.text
        assert codes[grpc.StatusCode.FAILED_PRECONDITION] >= 10 and len(acknowledged) >= 20
        stored = {rec["id"]: rec for rec in r.store.list(limit=100_000)}
        assert set(acknowledged) <= stored.keys()
        assert all(stored[job_id]["transitions"][-1]["state"] == "COMPLETE" for job_id in finished)
        # every open job is charged, every finished one given back
        still_open = [rec for rec in r.store.list(project="my-lab", limit=100_000) if rec["transitions"][-1]["state"] == "PENDING"]
        assert r.store.gpus_in_use("my-lab") == 8 * len(still_open)
    finally:
        r.close()


@pytest.mark.parametrize("query", ["", "?tcp_user_timeout=5000&keepalives_idle=7&connect_timeout=3"])
def test_a_postgresql_connection_gives_up_on_a_server_that_stops_answering_unless_its_url_says_otherwise(fresh_postgres, query):
    """Every connection of the store is opened with a bound on how long unacknowledged
    bytes may wait (the kernel's TCP_USER_TIMEOUT on its socket: 30 s), keepalives, and
    a connect timeout, so a server whose host is gone fails the call instead of holding
    its thread for the quarter hour of TCP's retransmissions; what the URL sets wins."""
    import socket

    from jobgate.store.postgres import PostgresStore

    store = PostgresStore(fresh_postgres + query)
    try:
        with store._pool.connection() as db:
            params = db.info.get_parameters()
            sock = socket.socket(fileno=db.pgconn.socket)  # the connection's own socket: detached, not closed
            try:
                if sock.family == socket.AF_UNIX:
                    pytest.skip("JOBGATE_TEST_POSTGRES_URL names a Unix socket: TCP's timeouts do not apply")
                user_timeout = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
                keepalive = sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
                idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            finally:
                sock.detach()
    finally:
        store.close()
    expected = {"tcp_user_timeout": "30000", "keepalives_idle": "10", "connect_timeout": "10"} if not query else {"tcp_user_timeout": "5000", "keepalives_idle": "7", "connect_timeout": "3"}
    assert {name: params.get(name) for name in expected} == expected
    assert (params.get("keepalives"), params.get("keepalives_interval"), params.get("keepalives_count")) == ("1", "5", "3")
    assert (user_timeout, keepalive, idle) == (int(expected["tcp_user_timeout"]), 1, int(expected["keepalives_idle"]))


def test_a_postgresql_url_naming_a_libpq_service_gets_no_connection_defaults_of_the_store(monkeypatch):
    """The service file, which libpq reads after the store's options, would lose to
    them: a URL that names a service (or PGSERVICE) is given none."""
    from jobgate.store.postgres import CONNECTION_DEFAULTS, connection_options

    monkeypatch.delenv("PGSERVICE", raising=False)
    assert connection_options("postgresql://db/jobgate") == CONNECTION_DEFAULTS
    assert connection_options("postgresql://db/jobgate?connect_timeout=3&keepalives=0") == {k: v for k, v in CONNECTION_DEFAULTS.items() if k not in ("connect_timeout", "keepalives")}
    assert connection_options("service=jobgate") == {}
    assert connection_options("postgresql:///?service=jobgate") == {}
    monkeypatch.setenv("PGSERVICE", "jobgate")
    assert connection_options("postgresql://db/jobgate") == {}
