"""Commit groups on each store: the members of one group decide as sequential
admissions would (an idempotency key raced within a group opens one record, a key used
before recalls its admission whether or not its retry would pass now, a refused
member leaves its key to the next), the PostgreSQL store's one-round-trip groups (no
member reads the usage) among them; job numbers taken ahead are never given twice;
and the committer waits a little, and only, for the admissions it expects back."""

from __future__ import annotations

import json
import threading
import time

import pytest

from jobgate.server.gate import KeyReused
from jobgate.store import IdempotencyKey, NewJob, Remembered
from jobgate.store import committer as committer_module
from jobgate.store.committer import GroupCommitter
from tests.helpers import sample

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
REPORT = b'{"verdict": "pass"}'


def job(key: str = "", *, fingerprint: bytes = b"f" * 32, reads_usage: bool = True, window: float = 3600.0, gpus: int = 8, project: str = "my-lab") -> NewJob:
    idempotency = IdempotencyKey("alice", key, fingerprint, window, lambda: REPORT + fingerprint[:1]) if key else None
    return NewJob(
        id_prefix="dino-train", project=project, owner="alice", gpus=gpus, image="nvcr.io/nvidia/tao/tao-toolkit:6", network_arch="dino",
        action="train", platform="local", storage_tier="A", results_root="/results", document=JOBSPEC, idempotency=idempotency, reads_usage=reads_usage,
    )  # fmt: skip


def admitted(*_in_use) -> bool:
    return True


def refused(*_in_use) -> bool:
    return False


def records(store) -> list[str]:
    return [rec["id"] for rec in store.list(project="my-lab", limit=1000)]


@pytest.fixture(params=[True, False], ids=["reads-usage", "usage-free"])
def reads_usage(request, gate):
    """Both decision paths: usage read first (a quota applies), or none read (on
    PostgreSQL, a group in one round trip once job numbers are at hand: one admission
    elsewhere takes them ahead)."""
    if not request.param:
        gate.store.admit_many([(job(reads_usage=False, project="elsewhere"), admitted)])
    return request.param


def test_a_key_raced_within_one_group_opens_one_record(gate, reads_usage):
    store = gate.store
    first, same, other = store.admit_many(
        [(job("raced", reads_usage=reads_usage), admitted), (job("raced", reads_usage=reads_usage), admitted), (job("raced", fingerprint=b"g" * 32, reads_usage=reads_usage), admitted)]
    )
    assert isinstance(first, str)
    # the others recall the first, as sequential admissions would: a retry of the same
    # request is answered with it (the report it was first shown), another request is
    # ALREADY_EXISTS naming its job
    assert same == other == Remembered(first, b"f" * 32, REPORT + b"f")
    with pytest.raises(KeyReused) as e:
        gate.replay(other, "raced", b"g" * 32)
    assert e.value.job_id == first
    assert records(store) == [first] and store.gpus_in_use("my-lab") == 8
    assert store.recall("alice", ["raced"], 3600) == {"raced": same}


def test_a_key_used_before_recalls_its_admission_even_when_its_retry_would_be_refused(gate, reads_usage):
    store = gate.store
    (first,) = store.admit_many([(job("used", reads_usage=reads_usage), admitted)])
    again, refused_again, unkeyed = store.admit_many(
        [(job("used", reads_usage=reads_usage), admitted), (job("used", reads_usage=reads_usage), refused), (job(reads_usage=reads_usage), admitted)]
    )
    assert again == refused_again == Remembered(first, b"f" * 32, REPORT + b"f")
    assert isinstance(unkeyed, str) and unkeyed != first
    assert records(store) == [first, unkeyed] and store.gpus_in_use("my-lab") == 16


def test_a_refused_member_leaves_its_key_to_the_next_in_its_group(gate, reads_usage):
    store = gate.store
    refusal, opened, retry = store.admit_many(
        [(job("left", reads_usage=reads_usage), refused), (job("left", fingerprint=b"g" * 32, reads_usage=reads_usage), admitted), (job("left", reads_usage=reads_usage), refused)]
    )
    assert refusal is None and isinstance(opened, str)
    assert retry == Remembered(opened, b"g" * 32, REPORT + b"g")
    assert records(store) == [opened] and store.gpus_in_use("my-lab") == 8


def test_an_expired_key_starts_afresh_in_a_group(gate, reads_usage):
    store = gate.store
    (first,) = store.admit_many([(job("brief", reads_usage=reads_usage, window=0.05), admitted)])
    time.sleep(1.0)
    # Expired under the second request's window. Its own key is pruned once older than
    # that window (pruning follows the commit), so the window stays well above a commit.
    (second,) = store.admit_many([(job("brief", fingerprint=b"g" * 32, reads_usage=reads_usage, window=0.5), admitted)])
    assert isinstance(second, str) and second != first
    assert store.recall("alice", ["brief"], 3600)["brief"].job_id == second
    assert records(store) == [first, second]


def test_job_numbers_taken_ahead_are_never_given_twice(backend):
    """Two stores on one database (PostgreSQL replicas, or `serve --workers` processes
    sharing a SQLite file), each taking job numbers ahead, admitting in turn."""
    from jobgate.store import open_store

    replicas = [open_store(*backend), open_store(*backend)]
    try:
        ids: list[str] = []
        for i in range(40):  # usage-free groups take their numbers from those taken ahead
            ids += replicas[i % 2].admit_many([(job(reads_usage=i % 3 != 0), admitted) for _ in range(1 + i % 4)])
        numbers = [int(i.removeprefix("dino-train-")[:-6], 16) for i in ids]
        assert len(set(numbers)) == len(numbers) == sum(1 + i % 4 for i in range(40))
        assert sorted(records(replicas[0])) == sorted(ids)
    finally:
        for r in replicas:
            r.close()


class SlowStore:
    """A store whose commits take `seconds`, recording each group's size."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.groups = seconds, []

    def admit_many(self, items):
        self.groups.append(len(items))
        time.sleep(self.seconds)
        return [f"job-{len(self.groups)}-{i}" for i in range(len(items))]


def test_a_group_waits_a_little_for_the_admissions_it_expects_back(monkeypatch):
    monkeypatch.setattr(committer_module, "MAX_PATIENCE", 5.0)
    store = SlowStore(0.3)
    committer = GroupCommitter(store)
    try:
        admit = lambda: committer.admit(job(), admitted)  # noqa: E731
        leading = threading.Thread(target=admit)
        leading.start()
        while not store.groups:
            time.sleep(0.005)
        # three queue while the first commits: four were about, so the next group
        # waits for a fourth (at most as long as the last commit took)
        others = [threading.Thread(target=admit) for _ in range(3)]
        for t in others:
            t.start()
        leading.join()
        late = threading.Thread(target=admit)
        time.sleep(0.1)
        late.start()
        for t in [*others, late]:
            t.join()
        assert store.groups == [1, 4]
    finally:
        committer.close()


def test_a_lone_caller_never_waits(monkeypatch):
    monkeypatch.setattr(committer_module, "MAX_PATIENCE", 5.0)
    store = SlowStore(0.0)
    committer = GroupCommitter(store)
    try:
        started = time.monotonic()
        for _ in range(20):
            committer.admit(job(), admitted)
        assert store.groups == [1] * 20
        assert time.monotonic() - started < 2.0
    finally:
        committer.close()


class QuickStore(SlowStore):
    """A SlowStore whose commits flush nothing to disk (SQLite's NORMAL synchronous)."""

    syncs_commits = False


def test_a_group_waits_only_when_its_commit_waits_for_the_disk(monkeypatch):
    """The arrivals above, on a store whose commits flush nothing: such a commit costs
    less than the wait, so the next group commits what is queued at once, and the late
    admission has a group of its own."""
    monkeypatch.setattr(committer_module, "MAX_PATIENCE", 5.0)
    store = QuickStore(1.0)
    committer = GroupCommitter(store)
    try:
        admit = lambda: committer.admit(job(), admitted)  # noqa: E731
        leading = threading.Thread(target=admit)
        leading.start()
        while not store.groups:
            time.sleep(0.005)
        others = [threading.Thread(target=admit) for _ in range(3)]
        for t in others:
            t.start()
        while committer.pending() < 3:
            time.sleep(0.005)
        leading.join()
        late = threading.Thread(target=admit)
        time.sleep(0.3)  # a patient group would still be waiting (as long as the last commit took)
        late.start()
        for t in [*others, late]:
            t.join()
        assert store.groups == [1, 3, 1]
    finally:
        committer.close()


class ThreadsSeen(SlowStore):
    """A store that records the thread each group is committed on."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.threads: list[str] = []

    def admit_many(self, items):
        self.threads.append(threading.current_thread().name)
        return super().admit_many(items)


def test_an_admission_is_committed_on_the_thread_that_makes_it():
    """No thread hand-off: the admission that finds no group under way commits its
    own, and the committer starts no thread of its own."""
    store = ThreadsSeen()
    before = {t.name for t in threading.enumerate()}
    committer = GroupCommitter(store)
    try:
        committer.admit(job(), admitted)
        caller = threading.Thread(target=committer.admit, args=(job(), admitted), name="an-rpc-thread")
        caller.start()
        caller.join()
        assert store.threads == [threading.current_thread().name, "an-rpc-thread"]
        assert {t.name for t in threading.enumerate()} == before
    finally:
        committer.close()


def sqlite_statements(store, items) -> tuple[list, list[str]]:
    """What `admit_many(items)` returns on a SQLite store, and the statements it ran.
    A trigger's statements are traced with the text of the statement that fired them:
    repeats in a row are one statement."""
    traced: list[str] = []
    with store._pool.connection() as db:
        db.set_trace_callback(traced.append)
    try:
        outcomes = store.admit_many(items)
    finally:
        with store._pool.connection() as db:
            db.set_trace_callback(None)
    return outcomes, [sql for i, sql in enumerate(traced) if i == 0 or sql != traced[i - 1]]


def test_a_sqlite_group_costs_a_few_statements_whatever_its_size(gate, reads_usage):
    """The write lock, one read of what the decisions need (usage and keys together),
    the records (each with its first transition and its usage charged), the keys, and
    the commit: the same for one admission as for fifty (each statement lets other
    threads run, and waits its turn to come back)."""
    store = gate.store
    if not hasattr(store, "path"):
        pytest.skip("statements are counted on SQLite; a PostgreSQL group is one statement, or two round trips when it reads usage")
    store.admit_many([(job("first", reads_usage=reads_usage), admitted)])  # its keys' pruning is done, job numbers taken ahead
    counts = []
    for size in (1, 50):
        ids, statements = sqlite_statements(store, [(job(f"key-{size}-{i}", reads_usage=reads_usage), admitted) for i in range(size)])
        assert all(isinstance(i, str) for i in ids) and len(set(ids)) == size
        counts.append(len(statements))
    assert counts == [5, 5]
    assert len(records(store)) == 52 and store.gpus_in_use("my-lab") == 52 * 8


def test_a_sqlite_group_that_reads_nothing_opens_its_records_in_one_statement(tmp_path):
    """No quota, no key: decided before any statement, on job numbers taken ahead, and
    written by one insert, its own transaction; past a statement's rows, in one
    transaction of several."""
    from jobgate.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path)
    try:
        store.admit_many([(job(reads_usage=False), admitted)])  # job numbers taken ahead
        for size, expected in ((1, 1), (50, 1), (150, 4)):
            ids, statements = sqlite_statements(store, [(job(reads_usage=False), admitted) for _ in range(size)])
            assert all(isinstance(i, str) for i in ids) and len(set(ids)) == size
            assert len(statements) == expected, statements
            assert statements[0].startswith("INSERT INTO admissions" if expected == 1 else "BEGIN IMMEDIATE")
        listed = store.list(project="my-lab", limit=1000)
        assert len(listed) == 202 and store.gpus_in_use("my-lab") == 202 * 8
        # in admission order, each with its first transition
        assert [rec["_seq"] for rec in listed] == list(range(1, 203))
        assert all([t["state"] for t in rec["transitions"]] == ["PENDING"] for rec in listed)
    finally:
        store.close()
