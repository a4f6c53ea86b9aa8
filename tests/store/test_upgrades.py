"""A store written by the previous schema, opened by this one, on each backend: the
migrations keep every record, its transitions, its usage and its key, and the
admissions after them get ids no earlier one has, in admission order after them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from jobgate.store import IdempotencyKey, NewJob, Remembered, open_store
from jobgate.store.base import new_job_id, now, opened_record, record_json
from jobgate.store.sqlite import SqliteStore
from tests.helpers import sample

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
REPORT = b'{"verdict": "pass"}'


def job(key: str = "", *, reads_usage: bool = False) -> NewJob:
    idempotency = IdempotencyKey("alice", key, b"f" * 32, 3600.0, lambda: REPORT) if key else None
    return NewJob(
        id_prefix="dino-train", project="my-lab", owner="alice", gpus=8, image="nvcr.io/nvidia/tao/tao-toolkit:6", network_arch="dino",
        action="train", platform="local", storage_tier="A", results_root="/results", document=JOBSPEC, idempotency=idempotency, reads_usage=reads_usage,
    )  # fmt: skip


def admitted(*_in_use) -> bool:
    return True


def at_previous_schema(store_class, *args) -> None:
    """Creates the store `args` name at the schema before this one (every migration but
    the last), as the previous release left it."""
    type("Previous", (store_class,), {"MIGRATIONS": store_class.MIGRATIONS[:-1]})(*args).close()


def sqlite_at_schema_4(directory: Path, admissions: int) -> list[str]:
    """A SQLite store as schema 4 left it, holding `admissions` records opened as the
    records path of that schema opened them: numbered by their `seq`, the first with
    an idempotency key. Returns their ids."""
    at_previous_schema(SqliteStore, directory)
    ids = []
    with sqlite3.connect(directory / "jobs.sqlite3") as db:
        assert [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")] == [1, 2, 3, 4]
        key = bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])
        for seq in range(1, admissions + 1):
            new = job()
            job_id, ts = new_job_id(new.id_prefix, seq, key), now()
            record = opened_record(new, job_id, ts) | {"owner": new.owner, "project": new.project, "gpus": new.gpus}
            db.execute("INSERT INTO jobs (id, seq, project, owner, gpus, state, terminal, record, document) VALUES (?, ?, ?, ?, ?, 'PENDING', 0, ?, ?)", (job_id, seq, new.project, new.owner, new.gpus, record_json(record), new.document))
            db.execute("INSERT INTO transitions VALUES (?, 1, ?, 'PENDING', 'record opened at admission', 'agent')", (job_id, ts))
            db.execute("INSERT INTO project_usage VALUES (?, ?) ON CONFLICT (project) DO UPDATE SET gpus = gpus + excluded.gpus", (new.project, new.gpus))
            if seq == 1:
                db.execute("INSERT INTO idempotency_keys VALUES ('alice', ?, ?, ?, ?, strftime('%s', 'now'))", (b"first", b"f" * 32, job_id, REPORT))
            ids.append(job_id)
    return ids


def postgres_at_schema_6(url: str, admissions: int) -> list[str]:
    """A PostgreSQL store as schema 6 left it (before the function a commit group's
    writes are made by), holding `admissions` records opened as that schema did,
    numbered from the sequence, the first with an idempotency key. Returns their ids."""
    import psycopg

    from jobgate.store.postgres import PostgresStore

    at_previous_schema(PostgresStore, url)
    ids = []
    with psycopg.connect(url) as db:
        assert [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")] == list(range(1, 7))
        key = bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])
        for n in range(1, admissions + 1):
            new = job()
            number = db.execute("SELECT nextval('job_id_seq')").fetchone()[0]
            job_id, ts = new_job_id(new.id_prefix, number, key), now()
            db.execute("INSERT INTO jobs (id, project, owner, gpus, state, record, document) VALUES (%s, %s, %s, %s, 'PENDING', %s::json, %s)", (job_id, new.project, new.owner, new.gpus, record_json(opened_record(new, job_id, ts)), new.document))
            db.execute("INSERT INTO transitions VALUES (%s, 1, %s, 'PENDING', convert_to('record opened at admission', 'UTF8'), 'agent')", (job_id, ts))
            db.execute("INSERT INTO project_usage VALUES (%s, %s) ON CONFLICT (project) DO UPDATE SET gpus = project_usage.gpus + excluded.gpus", (new.project, new.gpus))
            if n == 1:
                db.execute("INSERT INTO idempotency_keys VALUES ('alice', 'first', %s, %s, %s, extract(epoch FROM now()))", (b"f" * 32, job_id, REPORT))
            ids.append(job_id)
    return ids


def test_a_store_of_the_previous_schema_is_upgraded_in_place(backend):
    """Every record, transition, usage and key the previous schema held stays as it
    was; admissions resume beside them (reading the usage or not) with ids none of
    them has, listed after them; the upgraded store opens again as it was left."""
    path, url = backend
    earlier = postgres_at_schema_6(url, 3) if url else sqlite_at_schema_4(Path(path), 3)
    store = open_store(path, url)
    try:
        with store._reading() as db:
            assert [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")] == list(range(1, len(type(store).MIGRATIONS) + 1))
            if not url:  # numbering resumes above every number an earlier id was made of
                assert db.execute("SELECT next FROM job_numbers").fetchone() == (4,)
        later = [i for reads_usage in (True, False, False) for i in store.admit_many([(job(reads_usage=reads_usage), admitted)] * 2)]
        assert store.admit_many([(job("first"), admitted)]) == [Remembered(earlier[0], b"f" * 32, REPORT)]
        assert len(set(earlier + later)) == 9
        listed = store.list(project="my-lab", limit=100)
        assert [rec["id"] for rec in listed] == earlier + later
        assert all([t["state"] for t in rec["transitions"]] == ["PENDING"] for rec in listed)
        assert store.gpus_in_use("my-lab") == 9 * 8
        assert store.get(earlier[2])["id"] == earlier[2]
    finally:
        store.close()
    store = open_store(path, url)
    try:
        (again,) = store.admit_many([(job(), admitted)])
        assert again not in earlier + later and store.gpus_in_use("my-lab") == 10 * 8
    finally:
        store.close()
