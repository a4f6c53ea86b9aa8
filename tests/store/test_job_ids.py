"""Job ids on each store: the store's sequence number permuted under a key kept in the
store, so ids never repeat (across replicas and restarts) while an account's own ids
say nothing of how many jobs other teams admit; a store that has given out every
number refuses rather than repeat one."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from jobgate.store import NewJob, StoreFull, open_store
from jobgate.store.base import JOB_NUMBER_BITS, permuted
from tests.helpers import sample
from tests.server.helpers import Running
from tests.store.helpers import config_on
from tests.store.test_tenancy import ALICE, BOB, SPEECH, TEAMS, VISION, admit

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
ID = re.compile(r"dino-train-[0-9a-f]{18}")


def job(reads_usage: bool = True) -> NewJob:
    return NewJob(
        id_prefix="dino-train", project="my-lab", owner="alice", gpus=1, image="nvcr.io/nvidia/tao/tao-toolkit:6", network_arch="dino",
        action="train", platform="local", storage_tier="A", results_root="/results", document=JOBSPEC, reads_usage=reads_usage,
    )  # fmt: skip


def admitted(*_in_use) -> bool:
    return True


def number(job_id: str) -> int:
    """The number an id carries: its hex, less the random suffix."""
    return int(job_id.rsplit("-", 1)[1][:-6], 16)


def stored(backend) -> tuple[bytes, set[int]]:
    """The key kept in the store, and what every number its sequence gave out becomes
    under it, read from the database."""
    path, url = backend
    if url:
        import psycopg

        with psycopg.connect(url) as db:
            key = bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])
            top = db.execute("SELECT last_value FROM job_id_seq").fetchone()[0]
    else:
        with sqlite3.connect(Path(path) / "jobs.sqlite3") as db:
            key = bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])
            top = db.execute("SELECT next - 1 FROM job_numbers").fetchone()[0]
    return key, {permuted(n, key) for n in range(1, top + 1)}


def admit_some(store, n: int) -> list[str]:
    ids: list[str] = []
    for i in range(n):  # single admissions and groups, reading usage and not
        ids += store.admit_many([(job(reads_usage=i % 3 != 0), admitted) for _ in range(1 + i % 4)])
    return ids


def test_the_permutation_is_a_bijection_on_a_small_domain():
    key = bytes(range(32))
    images = [permuted(n, key, bits=16) for n in range(1 << 16)]
    assert sorted(images) == list(range(1 << 16))
    assert images[:50] != sorted(images[:50])
    # Another key, another permutation.
    assert images != [permuted(n, bytes(32), bits=16) for n in range(1 << 16)]


def test_the_permutation_is_the_one_stores_have_numbered_with():
    """Ids already given out stay unique only if every later number goes through the
    same permutation: its images are pinned, as the first stores computed them."""
    key = bytes(range(32))
    assert [permuted(n, key) for n in (0, 1, 2, 12345, 2**JOB_NUMBER_BITS - 1)] == [67206918579162, 82850383681174, 92356123859115, 5498129975049, 269855889553636]
    assert [permuted(n, bytes(32), bits=16) for n in (0, 1, 65535)] == [50489, 14508, 60923]
    with pytest.raises(ValueError, match="not a job number of 48 bits"):
        permuted(2**JOB_NUMBER_BITS, key)


def test_ids_stay_unique_and_the_key_persists_across_a_restart(backend):
    path, url = backend
    store = open_store(path, url)
    ids = admit_some(store, 40)
    store.close()
    key, _ = stored(backend)
    store = open_store(path, url)
    try:
        ids += admit_some(store, 40)
    finally:
        store.close()
    again, given = stored(backend)
    assert again == key and len(key) == 32
    assert len(set(ids)) == len(ids) == 2 * sum(1 + i % 4 for i in range(40))
    assert all(ID.fullmatch(i) for i in ids)
    # Before and after the restart, every id carries a sequence number under the one key.
    assert {number(i) for i in ids} <= given


def test_replicas_sharing_postgres_share_one_key(fresh_postgres, tmp_path):
    backend = (str(tmp_path / "unused"), fresh_postgres)
    replicas = [open_store(*backend), open_store(*backend)]
    try:
        ids: list[str] = []
        for i in range(40):
            ids += replicas[i % 2].admit_many([(job(reads_usage=i % 3 != 0), admitted) for _ in range(1 + i % 4)])
    finally:
        for r in replicas:
            r.close()
    _, given = stored(backend)
    assert len(set(ids)) == len(ids) == sum(1 + i % 4 for i in range(40))
    assert {number(i) for i in ids} <= given


def test_an_account_cannot_count_other_teams_admissions_from_its_ids(backend, tmp_path):
    r = Running(config_on(backend, tmp_path, TEAMS))

    def finished(doc, md) -> str:
        """Admitted, then finished, so that the projects' quotas never refuse."""
        job_id = admit(r, doc, md).job_id
        r.store.mark(job_id, "COMPLETE", "done", "poller")
        return job_id

    try:
        alice, between = [number(finished(VISION, ALICE))], []
        for i in range(50):
            between.append(i % 5)
            for _ in range(i % 5):
                finished(SPEECH, BOB)
            alice.append(number(finished(VISION, ALICE)))
    finally:
        r.close()
    # A sequence in the id moves by one per admission anywhere: alice would read bob's
    # count off the difference between her consecutive ids.
    steps = [later - earlier for earlier, later in zip(alice, alice[1:], strict=False)]
    assert not any(step == count + 1 for step, count in zip(steps, between, strict=True))
    assert alice != sorted(alice) and alice != sorted(alice, reverse=True)


def test_a_store_that_gave_out_every_number_refuses_loudly(backend):
    path, url = backend
    store = open_store(path, url)
    (first,) = store.admit_many([(job(), admitted)])
    store.close()
    last = (1 << JOB_NUMBER_BITS) - 1
    if url:
        import psycopg

        with psycopg.connect(url) as db:
            db.execute("SELECT setval('job_id_seq', %s)", (last - 1,))
    else:
        with sqlite3.connect(Path(path) / "jobs.sqlite3") as db:
            db.execute("UPDATE job_numbers SET next = ?", (last,))
    store = open_store(path, url)
    try:
        (final,) = store.admit_many([(job(), admitted)])
        assert ID.fullmatch(final)
        for reads_usage in (True, False):
            with pytest.raises(StoreFull, match=r"every one of its 2\^48 job ids"):
                store.admit_many([(job(reads_usage), admitted)])
        assert sorted(rec["id"] for rec in store.list(limit=10)) == sorted([first, final])
    finally:
        store.close()


def test_the_random_part_of_ids_is_fetched_in_bulk_and_never_shared_with_a_fork(monkeypatch):
    """One system call serves many ids (each lets other threads take the GIL, inside
    the commit a group waits for); a forked child never hands out the bytes its
    parent has yet to."""
    import os

    from jobgate.store import base

    fetched = []
    urandom = os.urandom
    monkeypatch.setattr(base.os, "urandom", lambda n: fetched.append(n) or urandom(n))
    entropy = base.Entropy(chunk=30)
    suffixes = [entropy.hex(3) for _ in range(10)]
    assert fetched == [30] and len(set(suffixes)) == 10 and all(len(s) == 6 for s in suffixes)
    entropy.hex(3)
    assert fetched == [30, 30]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: what it would hand out next
        os.write(write, entropy.hex(3).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    theirs = os.read(read, 6).decode()
    os.close(read)
    assert theirs != entropy.hex(3) and len(theirs) == 6
