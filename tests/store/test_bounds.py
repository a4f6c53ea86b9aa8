"""Every stored field is bounded and storable, and no admission harms another: on a
real server over each backend, messages are cut to limits.max_message_bytes, pages
are bounded by bytes, a record is always readable, text with NUL is stored whole,
one admission that cannot be stored fails alone, and a store that is down or full
is a status a client can act on."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2

import jobgate
from jobgate.store import NewJob, SqliteStore
from jobgate.store.base import MAX_GPUS, stored_message
from jobgate.v1 import admission_pb2, jobs_pb2
from tests.helpers import error_detail, example, mutate, require_shared, sample, schema
from tests.server.helpers import Running
from tests.store.helpers import config_on

require_shared()

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")
INTERNALS = ("127.0.0.1", "postgres", "jobgate_test_", "SELECT", "INSERT", "psycopg", "sqlite", "Traceback", "rollback")


def admit(r: Running, data: bytes = JOBSPEC, **kwargs):
    return r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=data), **kwargs), metadata=r.auth, timeout=60)


def mark(r: Running, job_id: str, state: str = "RUNNING", message: str = "", **kwargs):
    return r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state=state, message=message, source="poller", **kwargs), metadata=r.backend, timeout=60).job


def get(r: Running, job_id: str) -> dict:
    return json_format.MessageToDict(r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=r.auth, timeout=60).job)


def failure(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return e.value


def field_of(error: grpc.RpcError) -> str:
    return error_detail(error, error_details_pb2.BadRequest).field_violations[0].field


# ---- messages, pages, records


def test_stored_message_cuts_at_a_character_with_a_marker():
    assert stored_message("short", 64) == "short"
    cut = stored_message("é" * 100, 64)  # 200 bytes of two-byte characters
    assert len(cut.encode()) <= 64 and cut.startswith("é" * 10)
    kept = cut.split("…")[0]
    assert cut == kept + f"… [truncated {200 - len(kept.encode())} bytes]"
    emoji = stored_message("a" + "😀" * 50, 64)
    assert emoji.encode().decode() == emoji and "�" not in emoji  # never half a character
    # a credential is redacted before the cut, so no half of one survives it
    assert "hf_AbCdEf" not in stored_message("x" * 40 + " hf_AbCdEfGh1234567890abcdefgh", 64)


def test_a_marked_message_is_stored_redacted_of_every_credential_shape(served):
    """The attack: a backend's message holding an HTTP bearer header, a password flag and
    a Slack token was stored as it came, and the exported record passed."""
    job_id = admit(served).job_id
    message = (
        "pull failed: curl -H 'Authorization: Bearer abc123def456' https://reg.example.com; "
        "mysql --password hunter2; notified xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx; "
        "docker login --token glpat-xY9zAb3CdEfGh1JkL2m"
    )
    stored = (
        "pull failed: curl -H 'Authorization: Bearer ***' https://reg.example.com; "
        "mysql --password ***; notified xoxb-***; "
        "docker login --token ***"
    )
    assert mark(served, job_id, message=message).transitions[-1].message == stored
    record = get(served, job_id)
    assert record["transitions"][-1]["message"] == stored
    for secret in ("abc123def456", "hunter2", "AbCdEfGhIjKlMnOpQrStUvWx", "xY9zAb3CdEfGh1JkL2m"):
        assert secret not in json.dumps(record)
    jsonschema_valid(record)
    report = jobgate.Validator().check(mutate(BUNDLE, {"/command": stored + " {config_path}"}))
    assert report.verdict == "pass", [(v.rule, v.field) for v in report.violations]


def test_long_messages_are_cut_and_the_record_stays_readable(served):
    job_id = admit(served).job_id
    huge = "ImagePullBackOff: " + "x" * (8 << 20)
    for _ in range(2):
        answered = json_format.MessageToDict(mark(served, job_id, message=huge))  # answered, never "failed but committed"
        assert len(answered["transitions"][-1]["message"].encode()) <= 4096
    record = get(served, job_id)
    messages = [t["message"] for t in record["transitions"]]
    assert len(messages) == 3
    for message in messages[1:]:
        assert message.startswith("ImagePullBackOff: xxx")
        kept = message.split("…")[0]
        assert message.endswith(f"… [truncated {len(huge) - len(kept)} bytes]") and len(message.encode()) <= 4096
    jsonschema_valid(record)
    listed = served.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=served.auth)
    assert [j.id for j in listed.jobs] == [job_id]


def jsonschema_valid(record: dict) -> None:
    import jsonschema

    jsonschema.validate(record, schema("job_record"))
    assert jobgate.Validator().check(record, kind="job_record").verdict == "pass"


@pytest.fixture
def small_pages(backend, tmp_path):
    """A server whose responses are at most 64 KiB: pages bounded by bytes show early."""
    r = Running(config_on(backend, tmp_path, max_message_bytes=64 * 1024))
    yield r
    r.close()


def test_a_page_is_bounded_by_bytes_as_well_as_by_count(small_pages):
    r = small_pages
    ids = [admit(r).job_id for _ in range(7)]
    for job_id in ids:
        for i in range(4):  # about 16 KiB of messages per record
            mark(r, job_id, message=f"{i}:" + "m" * 5000)
    seen, token, pages = [], "", 0
    while True:
        page = r.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000, page_token=token), metadata=r.auth)
        assert page.ByteSize() <= 64 * 1024 and page.jobs
        seen += [j.id for j in page.jobs]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == ids and pages > 1
    # the count bound still holds beside the byte bound
    assert [j.id for j in r.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=2), metadata=r.auth).jobs] == ids[:2]


def test_a_full_record_takes_only_its_terminal_state(backend, tmp_path):
    config = config_on(backend, tmp_path)
    r = Running(config.model_copy(update={"limits": config.limits.model_copy(update={"max_transitions": 3})}))
    try:
        job_id = admit(r).job_id
        mark(r, job_id, message="one")
        mark(r, job_id, message="two")
        e = failure(mark, r, job_id, message="three")
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "limits.max_transitions" in e.details()
        done = json_format.MessageToDict(mark(r, job_id, "COMPLETE", "finished"))
        assert [t["message"] for t in done["transitions"]] == ["record opened at admission", "one", "two", "finished"]
        assert r.store.gpus_in_use("my-lab") == 0  # its GPUs were given back
    finally:
        r.close()


def test_a_backend_ref_longer_than_a_handle_is_refused_before_any_write(served):
    job_id = admit(served).job_id
    e = failure(mark, served, job_id, backend_ref="r" * 2000)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(e) == "backend_ref"
    assert [t["state"] for t in get(served, job_id)["transitions"]] == ["PENDING"]


# ---- NUL


def nul_bundle() -> dict:
    return mutate(BUNDLE, {"/network_arch": "di\u0000no", "/action": "tr\u0000ain", "/image": "nvcr.io/nvidia/tao/x\u0000:1", "/upload_excludes": ["in\u0000puts/"]})


def test_text_with_nul_is_stored_whole_and_a_dry_run_agrees_with_the_admission(served):
    data = json.dumps(nul_bundle()).encode()
    assert admit(served, data, dry_run=True).report.verdict == "pass"
    admitted = admit(served, data)
    assert admitted.report.verdict == "pass" and admitted.job_id
    record = get(served, admitted.job_id)
    assert (record["network_arch"], record["action"], record["image"], record["upload_excludes"]) == ("di\u0000no", "tr\u0000ain", "nvcr.io/nvidia/tao/x\u0000:1", ["in\u0000puts/"])
    assert json.loads(served.store.document(admitted.job_id))["network_arch"] == "di\u0000no"
    # a message with NUL too, read back by GetJob, ListJobs and WatchJob alike
    marked = json_format.MessageToDict(mark(served, admitted.job_id, message="slurm\u0000state"))
    assert marked["transitions"][-1]["message"] == "slurm\u0000state"
    listed = served.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=served.auth).jobs
    assert [t.message for t in listed[0].transitions] == ["record opened at admission", "slurm\u0000state"]
    mark(served, admitted.job_id, "COMPLETE", "done\u0000")
    watched = list(served.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=admitted.job_id), metadata=served.auth, timeout=60))
    assert [t.message for t in watched] == ["record opened at admission", "slurm\u0000state", "done\u0000"]


def test_ids_and_filters_with_nul_find_nothing(served):
    job_id = admit(served).job_id
    for call, request, metadata in (
        (served.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id + "\u0000"), served.auth),
        (served.jobs.MarkJob, jobs_pb2.MarkJobRequest(job_id=job_id + "\u0000", state="RUNNING", source="agent"), served.backend),
    ):
        assert failure(call, request, metadata=metadata).code() == grpc.StatusCode.NOT_FOUND
    assert failure(list, served.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id="\u0000"), metadata=served.auth)).code() == grpc.StatusCode.NOT_FOUND
    for request in (jobs_pb2.ListJobsRequest(project="my\u0000lab"), jobs_pb2.ListJobsRequest(owner="\u0000"), jobs_pb2.ListJobsRequest(state="RUN\u0000")):
        assert list(served.jobs.ListJobs(request, metadata=served.auth).jobs) == []


# ---- isolation in the group commit

HUGE_GPUS = mutate({k: v for k, v in BUNDLE.items() if k != "gpu_spec_key"}, {"/compute_shape": {"gpus": 2**62, "nodes": 4}})


def admit_together(r: Running, honest: int, others: list[bytes]) -> tuple[list, list]:
    """`honest` JobSpec admissions and `others`, all at once; (honest outcomes, other outcomes)."""

    def one(data):
        try:
            return admit(r, data)
        except grpc.RpcError as e:
            return e

    documents = [JOBSPEC] * honest
    for i, other in enumerate(others):
        documents.insert(len(documents) * (i + 1) // (len(others) + 1), other)
    with ThreadPoolExecutor(len(documents)) as pool:
        outcomes = list(pool.map(one, documents))
    positions = {id(d) for d in others}
    return [o for d, o in zip(documents, outcomes, strict=True) if id(d) not in positions], [o for d, o in zip(documents, outcomes, strict=True) if id(d) in positions]


def without_quotas(config):
    """Every honest admission is admitted: none is refused by a project quota."""
    from jobgate.config import Quota

    return config.model_copy(update={"quota": Quota()})


def test_unbounded_gpus_and_nul_never_fail_honest_admissions(backend, tmp_path):
    r = Running(without_quotas(config_on(backend, tmp_path)))
    try:
        huge, nul = json.dumps(HUGE_GPUS).encode(), json.dumps(nul_bundle()).encode()
        admitted_huge = 0
        for _ in range(3):
            honest, (huge_outcome, nul_outcome) = admit_together(r, 40, [huge, nul])
            assert [o for o in honest if isinstance(o, grpc.RpcError)] == []
            assert all(o.job_id for o in honest)
            assert nul_outcome.job_id  # storable: admitted, not failed
            # admitted, or refused by a rule of the core: a report either way, never an RPC error
            assert not isinstance(huge_outcome, grpc.RpcError)
            admitted_huge += bool(huge_outcome.job_id)
        # a count beyond the column's range is clamped, and charged to its project as such:
        # alice's first project, where her spec-bundles go, beside her 8-GPU JobSpecs
        assert r.store.gpus_in_use("my-lab") == admitted_huge * MAX_GPUS + 3 * BUNDLE["compute_shape"]["gpus"] + 3 * 40 * 8
    finally:
        r.close()


def poisoned(store_class, marker: str):
    """`store_class` whose commit of a job with `marker` in its image fails (a value the
    backend refuses, as NUL in PostgreSQL TEXT once was), and whose commits wait while
    `hold` is set, so that the admissions that arrive meanwhile gather into one group."""

    class Poisoned(store_class):
        hold, held, release = threading.Event(), threading.Event(), threading.Event()

        def admit_many(self, items):
            if self.hold.is_set():
                self.held.set()
                assert self.release.wait(60)
            return super().admit_many(items)

        def _open(self, job, decide, *group):  # each store's also takes what its group carries over
            if marker in job.image:
                raise RuntimeError("the backend refused a value of this job")
            return super()._open(job, decide, *group)

    return Poisoned


def test_one_poisoned_admission_among_forty_honest_ones_fails_alone(backend, tmp_path, caplog):
    from jobgate.store.postgres import PostgresStore

    path, url = backend
    config = without_quotas(config_on(backend, tmp_path, threads=64))
    Poisoned = poisoned(PostgresStore if url else SqliteStore, "poison")
    store = Poisoned(url, core_writer=False) if url else Poisoned(path, core_writer=False)  # every record through its commit groups
    r = Running(config, store=store)
    try:
        poison = json.dumps(mutate(BUNDLE, {"/image": "nvcr.io/nvidia/tao/poison:1"})).encode()
        # One honest admission commits first and is held there; meanwhile the poison and
        # 39 honest ones queue, and are committed as one group once it is released.
        store.hold.set()
        with ThreadPoolExecutor(1) as first:
            leading = first.submit(admit, r)
            assert store.held.wait(60)
            store.hold.clear()
            with ThreadPoolExecutor(1) as rest:
                together = rest.submit(admit_together, r, 39, [poison])
                while r.gate.committer.pending() < 40:
                    time.sleep(0.02)
                store.release.set()
                honest, (bad,) = together.result()
            honest.append(leading.result())
        assert [o for o in honest if isinstance(o, grpc.RpcError)] == []
        assert len(honest) == 40 and all(o.job_id and o.report.verdict == "pass" for o in honest)
        assert isinstance(bad, grpc.RpcError) and bad.code() == grpc.StatusCode.INTERNAL
        assert "refused a value" not in bad.details()
        assert sorted(rec["id"] for rec in r.store.list(limit=100)) == sorted(o.job_id for o in honest)
        assert [rec.fields["members"] for rec in caplog.records if rec.getMessage().startswith("a commit group failed")] == [40]
    finally:
        r.close()
        store.close()


def test_a_store_clamps_what_the_core_let_through(gate):
    """The store never fails on a count beyond its columns, whoever hands it one."""
    job = NewJob(
        id_prefix="dino-train", project="", owner="alice", gpus=2**64 - 1, image="nvcr.io/nvidia/tao/tao-toolkit:6", network_arch="dino",
        action="train", platform="local", storage_tier="A", results_root="/results", document=json.dumps(HUGE_GPUS).encode(),
    )
    assert gate.store.admit(job, lambda _in_use: True)
    assert gate.store.admit(job, lambda _in_use: True)
    assert gate.store.gpus_in_use(job.project) == 2 * MAX_GPUS


# ---- a store that is down or full


def test_postgres_down_is_unavailable_and_says_nothing_of_the_server(fresh_postgres, tmp_path, caplog):
    import psycopg

    r = Running(config_on((str(tmp_path / "unused"), fresh_postgres), tmp_path))
    name = fresh_postgres.rsplit("/", 1)[1]
    base = fresh_postgres.rsplit("/", 1)[0] + "/postgres"
    try:
        job_id = admit(r).job_id
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        calls = [
            lambda: admit(r),
            lambda: get(r, job_id),
            lambda: mark(r, job_id),
            lambda: r.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=r.auth),
            lambda: list(r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=r.auth)),
        ]
        for call in calls:
            e = failure(call)
            assert e.code() == grpc.StatusCode.UNAVAILABLE
            assert e.details() == "the job store is unavailable; retry shortly"
        logged = [rec for rec in caplog.records if rec.getMessage() == "job store unavailable"]
        assert logged and name in " ".join(rec.fields["error"] for rec in logged)  # the details are in the log
        failed = store_failures(r)
        assert {operation for operation, reason in failed if reason == "unavailable"} >= {"admit_many", "project", "mark", "list"}  # GetJob looks up the project first
        assert all(reason == "unavailable" for _, reason in failed)
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert admit(r).job_id  # back as soon as the database is
        assert get(r, job_id)["id"] == job_id
    finally:
        r.close()


def store_failures(r: Running) -> dict[tuple[str, str], float]:
    """jobgate_store_failures_total of the server, by (operation, reason)."""
    return {
        (sample.labels["operation"], sample.labels["reason"]): sample.value
        for family in r.metrics.registry.collect()
        if family.name == "jobgate_store_failures"
        for sample in family.samples
        if sample.name == "jobgate_store_failures_total"
    }


class FillingDisk(SqliteStore):
    """SQLite on a disk that fills up: while `full`, the database may not grow a page
    (PRAGMA max_page_count), and SQLite answers SQLITE_FULL as it does on a full disk."""

    full = False

    @contextmanager
    def _writing(self):
        with super()._writing() as db:
            limit = db.execute("PRAGMA page_count").fetchone()[0] if self.full else 1073741823
            db.execute(f"PRAGMA max_page_count = {limit}")
            yield db


def test_a_full_disk_is_resource_exhausted_and_writes_nothing(tmp_path):
    config = config_on((str(tmp_path / "store"), None), tmp_path)
    store = FillingDisk(config.store.path)
    r = Running(config, store=store)
    try:
        job_id = admit(r).job_id
        store.full = True
        outcomes = []
        for _ in range(50):
            try:
                outcomes.append(admit(r).job_id)
            except grpc.RpcError as e:
                outcomes.append(e)
                break
        e = outcomes[-1]
        assert isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.details() == "the disk holding the job store (store.path) is full; nothing was written"
        stored = [rec["id"] for rec in store.list(limit=100)]
        assert stored == [job_id, *outcomes[:-1]]  # the refused admission left nothing behind
        assert store_failures(r).get(("admit_many", "full"), 0) >= 1
        for _ in range(50):
            try:
                mark(r, job_id, message="m" * 4000)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "disk" in e.details()
                break
        else:
            pytest.fail("the disk never filled")
        store.full = False
        assert admit(r).job_id
        assert get(r, job_id)["id"] == job_id
    finally:
        r.close()
        store.close()


def test_a_name_over_a_kib_is_refused_before_it_reaches_the_stores_indexes(backend):
    """PostgreSQL's indexes refuse a key over about 2.7 KB, a failure no retry lifts: a
    project or owner name is at most MAX_NAME_BYTES of UTF-8, stored on every path."""
    import dataclasses

    from jobgate.store import open_store
    from jobgate.store.base import MAX_NAME_BYTES, Unstorable, storable
    from tests.store.test_core_writer import job as writer_job

    path, url = backend
    at_bound = "é" * (MAX_NAME_BYTES // 2)  # two bytes each in UTF-8
    job = dataclasses.replace(writer_job(3), project=at_bound, owner="o" * MAX_NAME_BYTES)
    store = open_store(path, url=url)
    try:
        (grouped,) = store.admit_many([(job, lambda _used: True)])
        opened = [grouped]
        if store.opens_later:
            later, pending = store.open_later(job)
            pending.wait()
            opened.append(later)
        assert [store.project(job_id) for job_id in opened] == [at_bound] * len(opened)
        assert store.gpus_in_use(at_bound) == 3 * len(opened)
        for field in ("project", "owner"):
            with pytest.raises(Unstorable, match=f"is {MAX_NAME_BYTES + 1} bytes; a name is at most {MAX_NAME_BYTES}") as refused:
                storable(dataclasses.replace(job, **{field: getattr(job, field) + "x"}))
            assert refused.value.field == field
    finally:
        store.close()
