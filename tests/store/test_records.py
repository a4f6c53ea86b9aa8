"""Job records in the SQLite store: the jobs CLI, exports that validate, marks that are
never lost under concurrency, and records that are whole or absent after a SIGKILL."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import jsonschema

import jobgate
from jobgate.cli import main
from jobgate.store import SqliteStore
from tests.helpers import sample, schema

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()


def test_jobs_cli_list_show_mark(gate, backend, tmp_path, capsys):
    job_id = gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id
    path, url = backend
    if url:
        cfg = tmp_path / "jobgate.toml"
        cfg.write_text(f'[store]\nurl = "{url}"\n')
        store = ["--config", str(cfg)]
    else:
        store = ["--store", path]
    capsys.readouterr()
    assert main(["jobs", "list", *store]) == 0
    header, row = capsys.readouterr().out.splitlines()  # a header row, then the job
    assert header.split() == ["ID", "STATE", "PROJECT", "SUBMITTED", "JOB", "MESSAGE"]
    assert row.split()[:3] == [job_id, "PENDING", "my-lab"]
    assert row.index("my-lab") == header.index("PROJECT") and row.index("PENDING") == header.index("STATE")  # aligned
    assert main(["jobs", "mark", job_id, "RUNNING", "--message", "pulled; HF_TOKEN=hf_AbCdEf1234567890", "--source", "poller", *store]) == 0
    assert main(["jobs", "mark", job_id, "COMPLETE", *store]) == 0
    capsys.readouterr()
    assert main(["jobs", "show", job_id, *store]) == 0
    record = json.loads(capsys.readouterr().out)
    jsonschema.validate(record, schema("job_record"))
    assert jobgate.Validator().check(record, kind="job_record").verdict == "pass"
    assert [t["state"] for t in record["transitions"]] == ["PENDING", "RUNNING", "COMPLETE"]
    assert "hf_AbCdEf" not in record["transitions"][1]["message"]
    assert main(["jobs", "mark", job_id, "RUNNING", *store]) == 2
    assert "terminal" in capsys.readouterr().err
    assert main(["jobs", "list", "--active", "--format", "json", *store]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_refused_document_leaves_no_record(gate):
    bad = json.dumps({**sample("jobspec.valid.json"), "kind": "Nope"}).encode()
    assert gate.admit(bad, None, "alice", dry_run=False).job_id == ""
    assert gate.store.list() == []


def test_concurrent_marks_from_threads_lose_nothing(gate):
    job_id = gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id
    store = gate.store

    def worker(i):
        for j in range(25):
            store.mark(job_id, "RUNNING", f"t{i}-{j}", "poller")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    messages = [t["message"] for t in store.get(job_id)["transitions"]]
    assert len(messages) == 1 + 8 * 25
    assert sorted(messages[1:]) == sorted(f"t{i}-{j}" for i in range(8) for j in range(25))


MARKER = """
import sys
from jobgate.store import open_store
store = open_store(sys.argv[1], sys.argv[2] or None)
for j in range(int(sys.argv[4])):
    store.mark(sys.argv[3], "RUNNING", f"{sys.argv[5]}-{j}", "poller")
"""


def test_concurrent_marks_from_two_processes_lose_nothing(gate, backend):
    job_id = gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id
    path, url = backend
    procs = [subprocess.Popen([sys.executable, "-c", MARKER, path, url or "", job_id, "60", name]) for name in ("p1", "p2")]
    assert [p.wait(60) for p in procs] == [0, 0]
    messages = [t["message"] for t in gate.store.get(job_id)["transitions"][1:]]
    assert sorted(messages) == sorted([f"p1-{j}" for j in range(60)] + [f"p2-{j}" for j in range(60)])


ADMITTER = """
import json, sys
from jobgate.config import Config
from jobgate.server.gate import Gate
from jobgate.store import open_store
config = Config.model_validate({"store": {"path": sys.argv[1], "url": sys.argv[4] or None}, "jobs": {"results_root": sys.argv[2]}})
gate = Gate(config, open_store(config.store.path, config.store.url))
doc = open(sys.argv[3], "rb").read()
print("admitting", flush=True)
while True:
    gate.admit(doc, None, "alice", dry_run=False)
"""


def admitting(*args: str) -> subprocess.Popen:
    """ADMITTER on `args`, once it admits: the kill that follows lands among admissions
    however long a loaded machine takes to start a process."""
    proc = subprocess.Popen([sys.executable, "-c", ADMITTER, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"admitting\n"
    return proc


def test_sigkill_during_admissions_leaves_records_whole_or_absent(tmp_path):
    doc = tmp_path / "job.json"
    doc.write_bytes(JOBSPEC)
    store_dir = tmp_path / "store"
    rng = random.Random(11)
    for _ in range(5):
        proc = admitting(str(store_dir), str(tmp_path / "results"), str(doc), "")
        time.sleep(rng.uniform(0.8, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    db = sqlite3.connect(store_dir / "jobs.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    jobs = db.execute("SELECT id, record FROM jobs").fetchall()
    assert jobs, "no admission completed before the kills"
    for job_id, record in jobs:
        transitions = db.execute("SELECT n, state FROM transitions WHERE job_id = ? ORDER BY n", (job_id,)).fetchall()
        assert transitions == [(1, "PENDING")]
        assert json.loads(record)["results_dir"].endswith(job_id)
    orphans = db.execute("SELECT COUNT(*) FROM transitions WHERE job_id NOT IN (SELECT id FROM jobs)").fetchone()[0]
    assert orphans == 0
    store = SqliteStore(store_dir)
    for job_id, _ in jobs[:20]:
        assert jobgate.Validator().check(store.get(job_id), kind="job_record").verdict == "pass"


def test_the_wal_is_copied_beside_the_commits_and_starts_again(tmp_path, monkeypatch):
    """SQLite's WAL is checkpointed on the store's own thread, not in the commit that
    crosses a threshold (every admission of its group would wait for the copy and its
    fsyncs), and still starts again from its beginning under admissions that never
    pause: it stays bounded."""
    from jobgate.store import NewJob
    from jobgate.store import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY", 16)
    monkeypatch.setattr(sqlite_store, "_RESTART_PAGES", 200)
    # SQLite's own checkpoint at commit bounds the WAL should the thread fall behind (a
    # loaded machine may leave it unscheduled for a while): the bound holds either way.
    monkeypatch.setattr(sqlite_store, "_BACKSTOP_PAGES", 1_000)
    checkpointed_on: list[str] = []
    connect = SqliteStore._connect

    def traced(self):
        db = connect(self)
        db.set_trace_callback(lambda sql: "wal_checkpoint" in sql and checkpointed_on.append(threading.current_thread().name))
        return db

    monkeypatch.setattr(SqliteStore, "_connect", traced)
    before = set(threading.enumerate())
    store = SqliteStore(tmp_path / "store")
    job = NewJob(
        id_prefix="dino-train", project="my-lab", owner="alice", gpus=1, image="nvcr.io/nvidia/tao/tao-toolkit:6", network_arch="dino",
        action="train", platform="local", storage_tier="A", results_root="/results", document=JOBSPEC, reads_usage=False,
    )  # fmt: skip
    wal = store.path.with_name(store.path.name + "-wal")
    largest = 0
    try:
        for _ in range(600):
            assert all(store.admit_many([(job, lambda _: True)] * 4))
            largest = max(largest, wal.stat().st_size)
        assert checkpointed_on.count("jobgate-checkpoint") >= 10
        # Each pass is followed by one small copy in a commit, only when the WAL is to
        # start again; SQLite's own checkpoint at commit never comes into play.
        assert checkpointed_on.count("MainThread") <= checkpointed_on.count("jobgate-checkpoint")
        assert largest < 2000 * 4096, f"the WAL grew to {largest} bytes"
        assert len(store.list(limit=3000)) == 2400
    finally:
        store.close()
    assert [t.name for t in set(threading.enumerate()) - before] == []  # closing the store ends its thread


SERVER = """
import sys
from jobgate.cli import main
sys.exit(main(["serve", "--config", sys.argv[1], "--listen", sys.argv[2]]))
"""


def test_two_replicas_sharing_postgres_never_oversubscribe(fresh_postgres, tmp_path):
    """Two server processes, one PostgreSQL: parallel admissions against a quota of 20
    GPUs admit exactly two 8-GPU jobs, whichever replica they reach."""
    from concurrent.futures import ThreadPoolExecutor

    from jobgate.v1 import admission_pb2, admission_pb2_grpc
    from tests.helpers import free_port
    from tests.server.helpers import wait_serving

    cfg = tmp_path / "jobgate.toml"
    cfg.write_text(f'[server]\nallow_anonymous = true\n[store]\nurl = "{fresh_postgres}"\n[jobs]\nresults_root = "{tmp_path / "results"}"\n[quota]\nprojects = {{ my-lab = 20 }}\n')
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-c", SERVER, str(cfg), f"127.0.0.1:{p}"], stderr=subprocess.DEVNULL) for p in ports]
    try:
        channels = [wait_serving(p) for p in ports]
        stubs = [admission_pb2_grpc.AdmissionServiceStub(c) for c in channels]
        request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC))
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: stubs[i % 2].Admit(request, timeout=30), range(24)))
        assert sum(1 for r in results if r.job_id) == 2
        assert all([v.rule for v in r.report.violations] == ["forge.quota.project"] for r in results if not r.job_id)
        for c in channels:
            c.close()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)


def test_jobs_cli_through_the_server(tmp_path, capsys):
    from jobgate.v1 import admission_pb2
    from tests.server.helpers import POLLER, TOKEN, Running, config_for

    r = Running(config_for(tmp_path))
    try:
        job_id = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC)), metadata=r.auth).job_id
        remote = ["--server", f"127.0.0.1:{r.port}", "--token", TOKEN]
        capsys.readouterr()
        assert main(["jobs", "mark", job_id, "RUNNING", "--message", "started", "--server", f"127.0.0.1:{r.port}", "--token", POLLER]) == 0
        assert main(["jobs", "list", "--active", "--format", "json", *remote]) == 0
        capsys.readouterr()
        assert main(["jobs", "show", job_id, *remote]) == 0
        record = json.loads(capsys.readouterr().out)
        assert [t["state"] for t in record["transitions"]] == ["PENDING", "RUNNING"]
        jsonschema.validate(record, schema("job_record"))
        assert main(["jobs", "show", "nope", *remote]) == 2
        assert "NOT_FOUND" in capsys.readouterr().err
        assert main(["jobs", "list", "--server", f"127.0.0.1:{r.port}"]) == 2  # no token
        assert "UNAUTHENTICATED" in capsys.readouterr().err
    finally:
        r.close()


def test_a_finished_job_gives_its_gpus_back(gate):
    gate.config = gate.config.model_copy(update={"quota": gate.config.quota.model_copy(update={"projects": {"my-lab": 16}})})
    first = gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id
    assert gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id
    refused = gate.admit(JOBSPEC, None, "alice", dry_run=False)
    assert refused.job_id == "" and [v.rule for v in refused.report.violations] == ["forge.quota.project"]
    assert gate.store.gpus_in_use("my-lab") == 16
    gate.store.mark(first, "COMPLETE", "done", "poller")
    gate.store.mark(first, "COMPLETE", "", "agent", err_class="ERR_PROGRAM")  # filling in, not counted twice
    assert gate.store.gpus_in_use("my-lab") == 8
    assert gate.admit(JOBSPEC, None, "alice", dry_run=False).job_id


def test_sigkill_during_admissions_with_postgres(fresh_postgres, tmp_path):
    import psycopg

    doc = tmp_path / "job.json"
    doc.write_bytes(JOBSPEC)
    rng = random.Random(5)
    for _ in range(4):
        proc = admitting(str(tmp_path / "unused"), str(tmp_path / "results"), str(doc), fresh_postgres)
        time.sleep(rng.uniform(1.0, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with psycopg.connect(fresh_postgres) as db:
        # One snapshot: the backend of a killed client may still commit what it was sent.
        db.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        jobs = db.execute("SELECT id, gpus FROM jobs").fetchall()
        assert jobs, "no admission completed before the kills"
        for job_id, _ in jobs:
            assert db.execute("SELECT n, state FROM transitions WHERE job_id = %s ORDER BY n", (job_id,)).fetchall() == [(1, "PENDING")]
        assert db.execute("SELECT COUNT(*) FROM transitions WHERE job_id NOT IN (SELECT id FROM jobs)").fetchone()[0] == 0
        usage = db.execute("SELECT gpus FROM project_usage WHERE project = 'my-lab'").fetchone()[0]
        assert usage == sum(g for _, g in jobs)  # the quota row moved with the records, never apart
