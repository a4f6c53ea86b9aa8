"""The stores' record writers in the core (`jobgate._core.SqliteWriter`,
`PostgresWriter`): records of admissions that read nothing first, opened by a thread of
the core beside the calls, with the SQLite library or the libpq this Python loaded;
and the store's answers when they fail."""

from __future__ import annotations

import _sqlite3
import sqlite3
import threading
import time
from pathlib import Path

import grpc
import pytest

import jobgate._core
from jobgate._core import PostgresWriter, SqliteWriter
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


def test_records_opened_later_are_committed_in_order_with_their_transition_and_usage(backend, tmp_path):
    from jobgate.store import open_store

    path, url = backend
    if url is None and not loaded_libsqlite3():
        pytest.skip("this Python's SQLite is built in: the store has no core writer")
    store = open_store(path, url=url)
    try:
        assert store.opens_later
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
    reopened = open_store(path, url=url)  # committed: another connection, later, reads them all
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


def poison(backend, tmp_path):
    """A trigger that makes every insert into `jobs` fail; returns its removal."""
    path, url = backend
    if url is None:
        db = sqlite3.connect(tmp_path / "store" / "jobs.sqlite3", isolation_level=None)
        db.execute("CREATE TRIGGER poisoned BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'poisoned by the test'); END")
        return lambda: (db.execute("DROP TRIGGER poisoned"), db.close())
    import psycopg

    db = psycopg.connect(url, autocommit=True)
    db.execute("CREATE FUNCTION poisoned() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'poisoned by the test'; END $$")
    db.execute("CREATE TRIGGER poisoned BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION poisoned()")
    return lambda: (db.execute("DROP TRIGGER poisoned ON jobs"), db.close())


def test_an_admit_whose_record_the_writer_cannot_commit_is_not_answered_with_its_job(backend, tmp_path):
    """The record of an Admit without quota or key is written beside the call; when its
    commit fails, the call fails (its job id never sent), and the next one opens its
    record as usual."""
    from tests.server.helpers import Running
    from tests.store.helpers import config_on
    from tests.store.test_bounds import JOBSPEC, admit, without_quotas

    if backend[1] is None and not loaded_libsqlite3():
        pytest.skip("this Python's SQLite is built in: no core writer")
    r = Running(without_quotas(config_on(backend, tmp_path)))
    try:
        assert r.store.opens_later
        cure = poison(backend, tmp_path)
        with pytest.raises(grpc.RpcError) as failed:
            admit(r, JOBSPEC)
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert "poisoned" not in failed.value.details()
        assert r.store.list(limit=10) == []
        cure()
        answered = admit(r, JOBSPEC)
        assert answered.job_id and answered.report.verdict == "pass"
        assert [record["id"] for record in r.store.list(limit=10)] == [answered.job_id]
        # Both went through the writer, each timed until its commit (or its failure).
        assert opened_later(r) == 2
    finally:
        r.close()


def test_a_record_the_writer_committed_survives_a_kill_before_the_reply(backend, tmp_path):
    """A keyless Admit with no quota: its record is written by the core's writer, and
    the server dies (SIGKILL) once that commit is in, before it answers. The record is
    there afterwards, charged once."""
    import json
    import signal

    from jobgate.store import open_store
    from jobgate.v1 import admission_pb2, admission_pb2_grpc
    from tests.helpers import free_port
    from tests.server.helpers import write_config
    from tests.store.test_idempotency import ALICE, GPUS, JOBSPEC, document, held, refusal, serving

    path, url = backend
    if url is None and not loaded_libsqlite3():
        pytest.skip("this Python's SQLite is built in: no core writer")
    config = tmp_path / "jobgate.toml"
    write_config(config, tmp_path, catalog=True)  # no [quota]: nothing is read before the decision
    if url is not None:
        config.write_text(config.read_text().replace("[store]\n", f"[store]\nurl = {json.dumps(url)}\n"))
    port = free_port()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = admission_pb2_grpc.AdmissionServiceStub(channel)
    try:
        with serving(config, port, kill_after_commits=1, only_later=True) as server:
            error = refusal(stub.Admit, admission_pb2.AdmitRequest(document=document(JOBSPEC)), metadata=ALICE, timeout=30)
            assert error.code() == grpc.StatusCode.UNAVAILABLE  # the reply never came
            assert server.wait(30) == -signal.SIGKILL
        store = open_store(str(tmp_path / "store"), url=url)
        try:
            (_opened,), charged = held(store)  # the one record, committed before the kill
            assert charged == GPUS
        finally:
            store.close()
    finally:
        channel.close()


# PostgreSQL's writer (`PostgresWriter`), on a database the store migrated.

QUOTA_LOCK = "SELECT {}(hashtext('jobgate.quota:vision'))"


@pytest.fixture
def postgres_writer(fresh_postgres):
    """(a connection of the test's own, a function that makes a writer on the store's
    database with extra conninfo, the row of a record with an id given)."""
    import orjson
    import psycopg

    from jobgate.store.postgres import _OPEN_LATER, PostgresStore, _opening_row, loaded_libpq

    PostgresStore(fresh_postgres, core_writer=False).close()  # the schema, migrated
    writers = []

    def writer(**conninfo):
        made = PostgresWriter(psycopg.conninfo.make_conninfo(fresh_postgres, **conninfo), _OPEN_LATER, loaded_libpq())
        writers.append(made)
        return made

    def row(job_id: str, n: int = 1):
        return ("vision", orjson.dumps(_opening_row(job(n), job_id, "2026-12-03T00:00:00+00:00")))

    db = psycopg.connect(fresh_postgres, autocommit=True)
    try:
        yield db, writer, row
    finally:
        for made in writers:
            made.close(10)
        db.close()


def stored_ids(db) -> list[str]:
    return [job_id for (job_id,) in db.execute("SELECT id FROM jobs ORDER BY seq")]


def test_a_postgres_row_that_fails_among_others_queued_with_it_fails_alone(postgres_writer):
    db, writer, row = postgres_writer
    w = writer()
    # The project's lock held here: the writer waits on its first row while the others
    # queue, then takes them as one statement, the failing one (an id taken) among them.
    db.execute(QUOTA_LOCK.format("pg_advisory_lock"))
    first = w.submit([row("a-1")])
    time.sleep(0.3)
    rest = [w.submit([row(job_id)]) for job_id in ("a-2", "a-3", "a-1", "a-4", "a-5")]
    db.execute(QUOTA_LOCK.format("pg_advisory_unlock"))
    assert first.wait() is None
    outcomes = [opening.wait() for opening in rest]
    assert outcomes[2] is not None and outcomes[2][0] == "23505"  # unique_violation
    assert [o is None for o in outcomes] == [True, True, False, True, True]
    assert stored_ids(db) == ["a-1", "a-2", "a-3", "a-4", "a-5"]
    assert db.execute("SELECT gpus FROM project_usage WHERE project = 'vision'").fetchone() == (5,)


def test_a_postgres_writer_closing_writes_what_is_queued_and_refuses_what_comes_after(postgres_writer):
    db, writer, row = postgres_writer
    w = writer()
    db.execute(QUOTA_LOCK.format("pg_advisory_lock"))
    queued = [w.submit([row(f"q-{n}")]) for n in range(10)]
    threading.Timer(0.3, lambda: db.execute(QUOTA_LOCK.format("pg_advisory_unlock"))).start()
    assert w.close(10)  # waited for the lock, then wrote all ten
    assert [opening.wait() for opening in queued] == [None] * 10
    assert len(stored_ids(db)) == 10
    assert w.submit([row("q-late")]).wait() == ("JG000", "the job store is closing")


@pytest.mark.parametrize(("setting", "sqlstate"), [("statement_timeout", "57014"), ("lock_timeout", "55P03")])
def test_a_postgres_store_that_times_out_fails_every_row_queued_at_once_not_one_by_one(postgres_writer, setting, sqlstate):
    db, writer, row = postgres_writer
    w = writer(options=f"-c {setting}=1000")
    db.execute(QUOTA_LOCK.format("pg_advisory_lock"))
    try:
        began = time.monotonic()
        first = w.submit([row("t-0")])
        time.sleep(0.3)  # the writer waits on the lock with the first row
        queued = [w.submit([row(f"t-{n}")]) for n in range(1, 6)]
        outcomes = [first.wait()] + [opening.wait() for opening in queued]
        took = time.monotonic() - began
        assert [code for code, _ in outcomes] == [sqlstate] * 6  # query_canceled, lock_not_available
        assert took < 4  # two timeouts (the first row, then the rest at once), not six
    finally:
        db.execute(QUOTA_LOCK.format("pg_advisory_unlock"))
    assert stored_ids(db) == []


def writer_backend(db) -> list[int]:
    return [pid for (pid,) in db.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'the writer under test'")]


def test_a_postgres_writer_whose_connection_ends_while_idle_connects_again_before_it_writes(postgres_writer):
    db, writer, row = postgres_writer
    w = writer(application_name="the writer under test")
    assert w.submit([row("c-1")]).wait() is None
    (first,) = writer_backend(db)
    assert db.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone() == (True,)
    time.sleep(0.3)  # the server's word that it ended the session reaches the writer's socket
    assert w.submit([row("c-2")]).wait() is None  # read before the batch was sent: opened again first
    assert writer_backend(db) != [first]
    assert stored_ids(db) == ["c-1", "c-2"]


def test_a_postgres_writer_whose_connection_is_lost_mid_batch_fails_that_batch_and_connects_again(postgres_writer, fresh_postgres):
    from jobgate.store.postgres import PostgresStore

    db, writer, row = postgres_writer
    w = writer(application_name="the writer under test")
    assert w.submit([row("c-1")]).wait() is None
    db.execute(QUOTA_LOCK.format("pg_advisory_lock"))
    try:
        lost = w.submit([row("c-2")])
        time.sleep(0.3)  # the batch waits on the lock held here
        (backend,) = writer_backend(db)
        assert db.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
        code, message = lost.wait()
    finally:
        db.execute(QUOTA_LOCK.format("pg_advisory_unlock"))
    assert code in ("08006", "57P01"), (code, message)  # the connection lost, or told why first
    store = PostgresStore(fresh_postgres, core_writer=False)
    try:
        with pytest.raises(StoreUnavailable, match="unavailable; retry shortly"):
            store._failed(code, message)
    finally:
        store.close()
    assert w.submit([row("c-3")]).wait() is None  # connected again
    assert stored_ids(db) == ["c-1", "c-3"]


def test_a_postgres_writer_sends_utf8_whatever_the_url_asks(fresh_postgres):
    from jobgate.store.postgres import _OPEN_LATER, PostgresStore, loaded_libpq

    latin1 = fresh_postgres + ("&" if "?" in fresh_postgres else "?") + "client_encoding=LATIN1"
    store = PostgresStore(latin1)
    try:
        assert store.opens_later
        job_id, pending = store.open_later(job(2, project="vision-é"))
        pending.wait()
        assert store.project(job_id) == "vision-é"
        assert store.gpus_in_use("vision-é") == 2
    finally:
        store.close()
    with pytest.raises(ValueError, match="SQLSTATE JG001"):  # a session that would read the rows as Latin-1
        PostgresWriter(latin1, _OPEN_LATER, loaded_libpq())


def test_the_postgres_writers_failures_are_the_stores_own(fresh_postgres):
    import psycopg

    from jobgate.store.postgres import PostgresStore

    store = PostgresStore(fresh_postgres, core_writer=False)
    try:
        assert store.opens_later is False
        with pytest.raises(StoreFull, match="disk holding the job store"):
            store._failed("53100", "could not extend file: No space left on device")
        for code in ("08006", "57P01", "53300", "55P03", "25006"):
            with pytest.raises(StoreUnavailable, match="unavailable; retry shortly"):
                store._failed(code, "gone")
        with pytest.raises(StoreUnavailable, match="shutting down"):
            store._failed("JG000", "the job store is closing")
        with pytest.raises(psycopg.errors.UniqueViolation, match="duplicate key"):
            store._failed("23505", "duplicate key value violates unique constraint")
        with pytest.raises(psycopg.DatabaseError, match="odd"):
            store._failed("ZZ999", "odd")
    finally:
        store.close()


def test_a_postgres_writer_is_refused_what_it_cannot_use(postgres_writer, fresh_postgres):
    import psycopg

    from jobgate.store.postgres import _OPEN_LATER, loaded_libpq
    from tests.helpers import free_port

    _db, writer, _row = postgres_writer
    with pytest.raises(RuntimeError, match="has not loaded that libpq"):
        PostgresWriter(fresh_postgres, _OPEN_LATER, "/nonexistent/libpq.so.5")
    closed = psycopg.conninfo.make_conninfo(fresh_postgres, host="127.0.0.1", port=free_port(), connect_timeout=5)
    with pytest.raises(ValueError, match="SQLSTATE 08006"):
        PostgresWriter(closed, _OPEN_LATER, loaded_libpq())
    with pytest.raises(ValueError, match="SQLSTATE 42883"):  # undefined_function
        PostgresWriter(fresh_postgres, "SELECT no_such_function($1::json, $2::json)", loaded_libpq())
    with pytest.raises(TypeError, match="project: str, row: bytes"):
        writer().submit([("vision", "not bytes")])
