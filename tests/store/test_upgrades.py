"""A store written by the previous schema, opened by this one: the migrations keep
every record, its transitions, its usage and its key, and the admissions after them
get ids no earlier one has, in admission order after them."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

from jobgate.store import IdempotencyKey, NewJob, Remembered
from jobgate.store import sqlite as sqlite_store
from jobgate.store.base import new_job_id, now, opened_record, record_json
from jobgate.store.sqlite import SqliteStore
from tests.helpers import sample

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
REPORT = b'{"verdict": "pass"}'


def job(key: str = "") -> NewJob:
    idempotency = IdempotencyKey("alice", key, b"f" * 32, 3600.0, lambda: REPORT) if key else None
    return NewJob(
        id_prefix="dino-train", project="my-lab", owner="alice", gpus=8, image="nvcr.io/nvidia/tao/tao-toolkit:6", network_arch="dino",
        action="train", platform="local", storage_tier="A", results_root="/results", document=JOBSPEC, idempotency=idempotency, reads_usage=False,
    )  # fmt: skip


def admitted(*_in_use) -> bool:
    return True


def sqlite_at_schema_4(directory: Path, admissions: int) -> list[str]:
    """A SQLite store as schema 4 left it, holding `admissions` records opened as the
    records path of that schema opened them: numbered by their `seq`, the first with
    an idempotency key. Returns their ids."""
    migrations = sqlite_store.MIGRATIONS
    sqlite_store.MIGRATIONS = migrations[:4]
    try:
        SqliteStore(directory).close()
    finally:
        sqlite_store.MIGRATIONS = migrations
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


def test_a_sqlite_store_of_schema_4_is_upgraded_in_place(tmp_path):
    earlier = sqlite_at_schema_4(tmp_path, 5)
    store = SqliteStore(tmp_path)
    try:
        with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:
            assert [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")] == [1, 2, 3, 4, 5]
            # numbering resumes above every number an earlier id was made of
            assert db.execute("SELECT next FROM job_numbers").fetchone() == (6,)
        later = [i for _ in range(3) for i in store.admit_many([(job(), admitted), (job(), admitted)])]
        assert store.admit_many([(job("first"), admitted)]) == [Remembered(earlier[0], b"f" * 32, REPORT)]
        assert len(set(earlier + later)) == 11
        listed = store.list(project="my-lab", limit=100)
        assert [rec["id"] for rec in listed] == earlier + later
        assert [rec["_seq"] for rec in listed] == list(range(1, 12))
        assert all([t["state"] for t in rec["transitions"]] == ["PENDING"] for rec in listed)
        assert store.gpus_in_use("my-lab") == 11 * 8
        assert store.get(earlier[2])["id"] == earlier[2]
    finally:
        store.close()
    # and once more: the migrated store opens as it was left
    store = SqliteStore(tmp_path)
    try:
        (again,) = store.admit_many([(job(), admitted)])
        assert again not in earlier + later and store.gpus_in_use("my-lab") == 12 * 8
    finally:
        store.close()


def test_a_postgres_store_of_schema_6_is_upgraded_in_place(fresh_postgres):
    """Schema 7 adds the function a commit group's writes are made by; what schema 6
    held stays as it was, and admissions resume beside it."""
    import psycopg

    from jobgate.store import postgres as postgres_store
    from jobgate.store.postgres import PostgresStore

    migrations = postgres_store.MIGRATIONS
    postgres_store.MIGRATIONS = migrations[:6]
    try:
        PostgresStore(fresh_postgres).close()
    finally:
        postgres_store.MIGRATIONS = migrations
    earlier = []
    with psycopg.connect(fresh_postgres) as db:
        key = bytes(db.execute("SELECT key FROM job_id_key").fetchone()[0])
        for n in range(1, 4):
            new = job()
            number = db.execute("SELECT nextval('job_id_seq')").fetchone()[0]
            job_id, ts = new_job_id(new.id_prefix, number, key), now()
            db.execute("INSERT INTO jobs (id, project, owner, gpus, state, record, document) VALUES (%s, %s, %s, %s, 'PENDING', %s::json, %s)", (job_id, new.project, new.owner, new.gpus, record_json(opened_record(new, job_id, ts)), new.document))
            db.execute("INSERT INTO transitions VALUES (%s, 1, %s, 'PENDING', convert_to('record opened at admission', 'UTF8'), 'agent')", (job_id, ts))
            db.execute("INSERT INTO project_usage VALUES (%s, %s) ON CONFLICT (project) DO UPDATE SET gpus = project_usage.gpus + excluded.gpus", (new.project, new.gpus))
            if n == 1:
                db.execute("INSERT INTO idempotency_keys VALUES ('alice', 'first', %s, %s, %s, extract(epoch FROM now()))", (b"f" * 32, job_id, REPORT))
            earlier.append(job_id)
    store = PostgresStore(fresh_postgres)
    try:
        with psycopg.connect(fresh_postgres) as db:
            assert [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")] == list(range(1, 8))
        later = [i for reads_usage in (True, False, False) for i in store.admit_many([(dataclasses.replace(job(), reads_usage=reads_usage), admitted)] * 2)]
        assert store.admit_many([(job("first"), admitted)]) == [Remembered(earlier[0], b"f" * 32, REPORT)]
        assert len(set(earlier + later)) == 9
        assert [rec["id"] for rec in store.list(project="my-lab", limit=100)] == earlier + later
        assert store.gpus_in_use("my-lab") == 9 * 8
    finally:
        store.close()
