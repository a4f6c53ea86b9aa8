"""The SQLite store's record writer in the core (`jobgate._core.SqliteWriter`): records
of admissions that read nothing first, opened by a thread of the core beside the calls,
with the SQLite library this Python loaded; and the store's answers when it fails."""

from __future__ import annotations

import _sqlite3
import sqlite3
import threading
import time
from pathlib import Path

import grpc
import pytest

import jobgate._core
from jobgate._core import SqliteWriter
from jobgate.store import NewJob, StoreFull, StoreUnavailable
from jobgate.store.sqlite import SqliteStore

SQLITE_ABORT, SQLITE_CONSTRAINT_CHECK = 4, 275


def loaded_libsqlite3() -> bool:
    """Whether this process has libsqlite3.so.0 loaded (Python's `sqlite3` links it)."""
    sqlite3.connect(":memory:").close()
    return "libsqlite3.so" in Path("/proc/self/maps").read_text()


def table_and_writer(tmp_path: Path, column: str = "n INTEGER", busy_ms: int = 30_000) -> tuple[sqlite3.Connection, SqliteWriter]:
    """A WAL database with one table `t (column)`, a connection of Python's to it (usable
    from any thread), and a writer inserting one value a row."""
    path = tmp_path / "t.sqlite3"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"CREATE TABLE t ({column})")
    return db, SqliteWriter(str(path), "INSERT INTO t VALUES (?)", [f"PRAGMA busy_timeout={busy_ms}"], _sqlite3.__file__)


def job(n: int, project: str = "vision") -> NewJob:
    return NewJob(
        id_prefix="dino-train",
        project=project,
        owner="alice",
        gpus=n,
        image="nvcr.io/nvidia/tao/tao-toolkit:6",
        network_arch="dino",
        action="train",
        platform="local",
        storage_tier="A",
        results_root="/results",
        document=b'{"n": %d}' % n,
        reads_usage=False,
    )


def test_the_store_opens_records_on_the_core_writer_wherever_python_loaded_libsqlite3(tmp_path):
    store = SqliteStore(tmp_path)
    try:
        assert store.opens_later is loaded_libsqlite3()
    finally:
        store.close()
    without = SqliteStore(tmp_path / "b", core_writer=False)
    try:
        assert without.opens_later is False
    finally:
        without.close()


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: the store has no core writer")
def test_records_opened_later_are_committed_in_order_with_their_transition_and_usage(tmp_path):
    store = SqliteStore(tmp_path)
    try:
        opened = [store.open_later(job(n)) for n in range(1, 41)]
        for _, pending in opened:
            pending.wait()
        ids = [job_id for job_id, _ in opened]
        assert len(set(ids)) == 40
        listed = store.list(limit=100)
        assert [record["id"] for record in listed] == ids  # admission order: the writer's order
        first = store.get(ids[0])
        assert first["network_arch"] == "dino" and first["image"] == "nvcr.io/nvidia/tao/tao-toolkit:6"
        assert [(t["state"], t["source"]) for t in first["transitions"]] == [("PENDING", "agent")]
        assert store.document(ids[6]) == b'{"n": 7}'
        assert store.gpus_in_use("vision") == sum(range(1, 41))
    finally:
        store.close()
    reopened = SqliteStore(tmp_path)  # committed: another connection, later, reads them all
    try:
        assert len(reopened.list(limit=100)) == 40
    finally:
        reopened.close()


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_a_row_that_fails_among_others_queued_with_it_fails_alone(tmp_path):
    db, writer = table_and_writer(tmp_path, "n INTEGER CHECK (n >= 0)")
    try:
        # The write lock held elsewhere: the writer waits on its first row while the
        # others queue, then takes them as one transaction, the failing one among them.
        db.execute("BEGIN IMMEDIATE")
        first = writer.submit([(1,)])
        time.sleep(0.3)
        rest = [writer.submit([(n,)]) for n in (2, 3, -1, 4, 5)]
        db.execute("COMMIT")
        assert first.wait() is None
        outcomes = [opening.wait() for opening in rest]
        assert outcomes[2] is not None and outcomes[2][0] == SQLITE_CONSTRAINT_CHECK
        assert [o is None for o in outcomes] == [True, True, False, True, True]
        assert sorted(n for (n,) in db.execute("SELECT n FROM t")) == [1, 2, 3, 4, 5]
    finally:
        assert writer.close(10)
        db.close()


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_closing_writes_what_is_queued_and_refuses_what_comes_after(tmp_path):
    db, writer = table_and_writer(tmp_path)
    db.execute("BEGIN IMMEDIATE")
    queued = [writer.submit([(n,)]) for n in range(10)]
    threading.Timer(0.3, lambda: db.execute("COMMIT")).start()
    assert writer.close(10)  # waited for the lock, then wrote all ten
    assert [opening.wait() for opening in queued] == [None] * 10
    assert db.execute("SELECT count(*) FROM t").fetchone() == (10,)
    assert writer.submit([(11,)]).wait() == (SQLITE_ABORT, "the job store is closing")
    db.close()


def test_the_writers_failures_are_the_stores_own(tmp_path):
    store = SqliteStore(tmp_path, core_writer=False)
    try:
        with pytest.raises(StoreFull, match="disk holding the job store"):
            store._failed(13, "database or disk is full")
        with pytest.raises(StoreUnavailable, match="unavailable; retry shortly"):
            store._failed(5, "database is locked")
        with pytest.raises(StoreUnavailable, match="unavailable; retry shortly"):
            store._failed(10 | (3 << 8), "disk I/O error")  # SQLITE_IOERR_WRITE
        with pytest.raises(StoreUnavailable, match="shutting down"):
            store._failed(SQLITE_ABORT, "the job store is closing")
        with pytest.raises(sqlite3.DatabaseError, match="CHECK constraint failed"):
            store._failed(SQLITE_CONSTRAINT_CHECK, "CHECK constraint failed: n >= 0")
    finally:
        store.close()


def test_a_writer_is_refused_a_file_it_cannot_open(tmp_path):
    if not loaded_libsqlite3():
        with pytest.raises(RuntimeError, match="built in"):
            SqliteWriter(str(tmp_path / "t.sqlite3"), "SELECT 1", [], _sqlite3.__file__)
        return
    with pytest.raises(ValueError, match="SQLite code 14"):  # SQLITE_CANTOPEN: no such file, not created
        SqliteWriter(str(tmp_path / "missing" / "t.sqlite3"), "SELECT 1", [], _sqlite3.__file__)
    with pytest.raises(ValueError, match="no such table"):
        sqlite3.connect(tmp_path / "t.sqlite3").close()
        SqliteWriter(str(tmp_path / "t.sqlite3"), "INSERT INTO absent VALUES (1)", [], _sqlite3.__file__)


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_the_writer_refuses_a_libsqlite3_that_pythons_sqlite3_does_not_use(tmp_path):
    """libsqlite3.so.0 is loaded here; a module that does not resolve SQLite to it (as
    a Python with SQLite built in would not) gets no writer: two copies of SQLite in
    one process keep their own POSIX locks."""
    sqlite3.connect(tmp_path / "t.sqlite3").close()
    with pytest.raises(RuntimeError, match="a SQLite of its own"):
        SqliteWriter(str(tmp_path / "t.sqlite3"), "SELECT 1", [], jobgate._core.__file__)


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_a_locked_store_fails_every_row_queued_at_once_not_one_by_one(tmp_path):
    """Rows queued behind a lock held elsewhere fail together once the busy timeout
    passes: written again one by one, each would wait the timeout out again."""
    db, writer = table_and_writer(tmp_path, busy_ms=2000)
    try:
        db.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        first = writer.submit([(0,)])
        time.sleep(0.3)  # the writer waits on the lock with the first row
        queued = [writer.submit([(n,)]) for n in range(1, 6)]
        outcomes = [first.wait()] + [opening.wait() for opening in queued]
        took = time.monotonic() - began
        assert [code & 0xFF for code, _ in outcomes] == [5] * 6  # SQLITE_BUSY
        assert took < 8  # two busy timeouts (the first row, then the rest at once), not six
    finally:
        db.execute("ROLLBACK")
        assert writer.close(10)
        db.close()


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_closing_an_idle_writer_at_once_leaves_nothing_unwritten(tmp_path):
    db, writer = table_and_writer(tmp_path)
    assert writer.submit([(1,)]).wait() is None
    assert writer.close(0.0) is True
    assert writer.close(float("inf")) is True  # any wait, however long, is taken as given
    db.close()


def opened_later(r) -> float:
    """How many records the server's store handed to its writer (jobgate_store_seconds)."""
    return sum(
        sample.value
        for family in r.metrics.registry.collect()
        if family.name == "jobgate_store_seconds"
        for sample in family.samples
        if sample.name == "jobgate_store_seconds_count" and sample.labels["operation"] == "open_later"
    )


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_an_admit_whose_record_the_writer_cannot_commit_is_not_answered_with_its_job(tmp_path):
    """The record of an Admit without quota or key is written beside the call; when its
    commit fails, the call fails (its job id never sent), and the next one opens its
    record as usual."""
    from tests.server.helpers import Running
    from tests.store.helpers import config_on
    from tests.store.test_bounds import JOBSPEC, admit, without_quotas

    r = Running(without_quotas(config_on((str(tmp_path / "store"), None), tmp_path)))
    try:
        assert r.store.opens_later
        poison = sqlite3.connect(tmp_path / "store" / "jobs.sqlite3", isolation_level=None)
        poison.execute("CREATE TRIGGER poisoned BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'poisoned by the test'); END")
        with pytest.raises(grpc.RpcError) as failed:
            admit(r, JOBSPEC)
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert "poisoned" not in failed.value.details()
        assert r.store.list(limit=10) == []
        poison.execute("DROP TRIGGER poisoned")
        poison.close()
        answered = admit(r, JOBSPEC)
        assert answered.job_id and answered.report.verdict == "pass"
        assert [record["id"] for record in r.store.list(limit=10)] == [answered.job_id]
        # Both went through the writer, each timed until its commit (or its failure).
        assert opened_later(r) == 2
    finally:
        r.close()


@pytest.mark.skipif(not loaded_libsqlite3(), reason="this Python's SQLite is built in: no core writer")
def test_a_record_the_writer_committed_survives_a_kill_before_the_reply(tmp_path):
    """A keyless Admit with no quota: its record is written by the core's writer, and
    the server dies (SIGKILL) once that commit is in, before it answers. The record is
    there afterwards, charged once."""
    import signal

    from jobgate.store import open_store
    from jobgate.v1 import admission_pb2, admission_pb2_grpc
    from tests.helpers import free_port
    from tests.server.helpers import write_config
    from tests.store.test_idempotency import ALICE, GPUS, JOBSPEC, document, held, refusal, serving

    config = tmp_path / "jobgate.toml"
    write_config(config, tmp_path, catalog=True)  # no [quota]: nothing is read before the decision
    port = free_port()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = admission_pb2_grpc.AdmissionServiceStub(channel)
    try:
        with serving(config, port, kill_after_commits=1, only_later=True) as server:
            error = refusal(stub.Admit, admission_pb2.AdmitRequest(document=document(JOBSPEC)), metadata=ALICE, timeout=30)
            assert error.code() == grpc.StatusCode.UNAVAILABLE  # the reply never came
            assert server.wait(30) == -signal.SIGKILL
        store = open_store(str(tmp_path / "store"))
        try:
            (_opened,), charged = held(store)  # the one record, committed before the kill
            assert charged == GPUS
        finally:
            store.close()
    finally:
        channel.close()
