"""Exactly-once admission under retries, on a real server over each store: a retry
with the same idempotency key gets the first admission's response (same job id, same
report) and opens or charges nothing again, after a SIGKILL between commit and reply,
across a restart and across replicas; concurrent requests with one key open one
record; a key reused by another request is ALREADY_EXISTS and admits nothing; keys are
per account and expire; the fingerprint covers the whole request; `jobgate submit`
finishes its run across a server restart."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2

from jobgate.config import ConfigError, from_mapping
from jobgate.server.app import wait_serving
from jobgate.server.auth import token_hash
from jobgate.server.wire import fingerprint
from jobgate.store import open_store
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobspec_pb2
from tests.files.helpers import packaged, tar_package
from tests.helpers import DEMO_CONFIG, error_detail, example, free_port, mutate, sample
from tests.server.helpers import ACCOUNTS, TOKEN, Running, bearer
from tests.store.helpers import config_on

JOBSPEC = sample("jobspec.valid.json")
OTHER = mutate(JOBSPEC, {"/metadata/name": "another-job"})
# A JobSpec naming another owner: admitted, with the forge.owner_overridden warning.
WARNED = mutate(JOBSPEC, {"/metadata/owner": "mallory"})
GPUS = 8  # the sample JobSpec's GPUs
ALICE = bearer(TOKEN)
BOB_TOKEN = "bob-token-for-retries"
BOB = bearer(BOB_TOKEN)
CRASHING_SERVER = Path(__file__).with_name("crashing_server.py")
TWO_SUBMITTERS = {**ACCOUNTS, "bob": {"token": token_hash(BOB_TOKEN), "projects": ["my-lab"], "roles": ["submitter"]}}


def document(doc, key: str = "", **fields) -> admission_pb2.Document:
    return admission_pb2.Document(raw=json.dumps(doc).encode(), idempotency_key=key, **fields)


def admit(r: Running, doc, key: str = "", md=ALICE, dry_run: bool = False) -> admission_pb2.AdmitResponse:
    return r.admission.Admit(admission_pb2.AdmitRequest(document=document(doc, key), dry_run=dry_run), metadata=md, timeout=60)


def held(store) -> tuple[list[str], int]:
    """The ids of every record, and the GPUs charged to my-lab."""
    return [rec["id"] for rec in store.list(limit=1000)], store.gpus_in_use("my-lab")


def refusal(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return e.value


def key_reused(error: grpc.RpcError) -> dict[str, str]:
    """The google.rpc.ErrorInfo metadata of an ALREADY_EXISTS for a reused key."""
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS, (error.code(), error.details())
    info = error_detail(error, error_details_pb2.ErrorInfo)
    assert info.reason == "IDEMPOTENCY_KEY_REUSED"
    return dict(info.metadata)


def invalid_field(error: grpc.RpcError) -> str:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    return error_detail(error, error_details_pb2.BadRequest).field_violations[0].field


def test_the_fingerprint_is_of_the_whole_request():
    raw = json.dumps(JOBSPEC).encode()
    base = fingerprint(admission_pb2.Document(raw=raw))
    assert fingerprint(admission_pb2.Document(raw=raw, idempotency_key="any")) == base  # the key is not the request
    others = [
        admission_pb2.Document(raw=raw, kind="KIND_JOBSPEC"),
        admission_pb2.Document(raw=raw + b" "),
        admission_pb2.Document(raw=raw, package=b"p"),
        admission_pb2.Document(raw=raw[:-1], package=raw[-1:]),  # bytes moved from one part to the next
        admission_pb2.Document(jobspec=json_format.ParseDict(JOBSPEC, jobspec_pb2.JobSpec())),
    ]
    assert len({base, *(fingerprint(d) for d in others)}) == 1 + len(others)
    # a typed message is fingerprinted by its deterministic encoding: map order is no matter
    forward, backward = ({"apiVersion": "forge/v2", "metadata": {"labels": dict(pairs)}} for pairs in ([("a", "1"), ("b", "2")], [("b", "2"), ("a", "1")]))
    typed = [admission_pb2.Document(jobspec=json_format.ParseDict(d, jobspec_pb2.JobSpec())) for d in (forward, backward)]
    assert fingerprint(typed[0]) == fingerprint(typed[1])


@pytest.mark.parametrize(("given", "seconds"), [(None, 86400.0), (30, 30.0), ("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0), ("7d", 604800.0)])
def test_the_window_is_seconds_or_a_duration(given, seconds):
    assert from_mapping({} if given is None else {"jobs": {"idempotency_window": given}}).jobs.idempotency_window == seconds


@pytest.mark.parametrize("given", ["soon", "0s", 0, -1, "1w"])
def test_a_window_that_is_no_duration_is_refused_naming_the_key(given):
    with pytest.raises(ConfigError, match=r"^x.toml: jobs.idempotency_window: "):
        from_mapping({"jobs": {"idempotency_window": given}}, "x.toml")


# A server process of its own, which the tests kill and start again on the same store.


def config_file(tmp_path: Path, backend, window: float | None = None) -> Path:
    """jobgate.toml: the demo deployment, alice and the poller, the store on `backend`."""
    path, url = backend
    lines = [DEMO_CONFIG.read_text(), "[store]", f"path = {json.dumps(path)}"]
    if url:
        lines.append(f"url = {json.dumps(url)}")
    lines += ["[jobs]", f"results_root = {json.dumps(str(tmp_path / 'results'))}"]
    if window is not None:
        lines.append(f"idempotency_window = {window}")
    for name, table in ACCOUNTS.items():
        lines += [f"[accounts.{name}]", *(f"{key} = {json.dumps(value)}" for key, value in table.items())]
    config = tmp_path / "jobgate.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


@contextmanager
def serving(config: Path, port: int, *, kill_after_commits: int = 0, only_later: bool = False) -> Iterator[subprocess.Popen]:
    """`jobgate serve` on `port`, once it answers; with `kill_after_commits`, a server
    that kills itself right after the commit that opens that many records, before
    replying (`crashing_server.py`; with `only_later`, counting only the records its
    store's writer opens)."""
    listen = f"127.0.0.1:{port}"
    if kill_after_commits:
        command = [sys.executable, str(CRASHING_SERVER), str(config), listen, str(kill_after_commits), "later" if only_later else ""]
    else:
        command = [sys.executable, "-m", "jobgate.cli", "serve", "--config", str(config), "--listen", listen]
    with open(config.parent / "server.log", "ab") as log:
        proc = subprocess.Popen(command, stderr=log)
    try:
        wait_serving(f"127.0.0.1:{port}").close()
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


def test_a_retry_after_a_crash_between_commit_and_reply_gets_the_same_job(backend, tmp_path):
    config, port = config_file(tmp_path, backend), free_port()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = admission_pb2_grpc.AdmissionServiceStub(channel)
    request = admission_pb2.AdmitRequest(document=document(JOBSPEC, "crash-1"))
    with serving(config, port, kill_after_commits=1) as first:
        expected = stub.Admit(admission_pb2.AdmitRequest(document=document(JOBSPEC, "crash-1"), dry_run=True), metadata=ALICE, timeout=30).report
        error = refusal(stub.Admit, request, metadata=ALICE, timeout=30)
        assert error.code() == grpc.StatusCode.UNAVAILABLE  # the reply never came
        assert first.wait(30) == -signal.SIGKILL
    store = open_store(*backend)
    try:
        (opened,), charged = held(store)  # committed before the kill
        assert charged == GPUS
        with serving(config, port):  # a new process on the same store
            response = stub.Admit(request, metadata=ALICE, timeout=30)
            assert response.job_id == opened and response.report == expected
            assert stub.Admit(request, metadata=ALICE, timeout=30) == response
        assert held(store) == ([opened], GPUS)  # one record, charged once
    finally:
        channel.close()
        store.close()


def test_a_retry_gets_the_same_response_through_every_rpc(served):
    first = admit(served, WARNED, "same-response")
    assert first.job_id and [v.rule for v in first.report.violations] == ["forge.owner_overridden"]
    assert admit(served, WARNED, "same-response") == first
    batch = served.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[document(WARNED, "same-response")]), metadata=ALICE, timeout=60)
    assert list(batch.results) == [first]
    streamed = list(served.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="r1", document=document(WARNED, "same-response"))]), metadata=ALICE, timeout=60))
    assert [(s.request_id, s.job_id, s.report) for s in streamed] == [("r1", first.job_id, first.report)]
    assert held(served.store) == ([first.job_id], GPUS)


def test_replicas_sharing_a_store_answer_one_key_with_one_job(backend, tmp_path):
    replicas = [Running(config_on(backend, tmp_path)) for _ in range(2)]
    try:
        first = admit(replicas[0], JOBSPEC, "replicated")
        assert admit(replicas[1], JOBSPEC, "replicated") == first
        assert held(replicas[1].store) == ([first.job_id], GPUS)
    finally:
        for r in replicas:
            r.close()


def test_sixteen_concurrent_requests_with_one_key_open_one_record(backend, tmp_path):
    replicas = [Running(config_on(backend, tmp_path)) for _ in range(2)]
    start = threading.Barrier(16)

    def send(i: int) -> admission_pb2.AdmitResponse:
        start.wait()
        return admit(replicas[i % 2], JOBSPEC, "sixteen-at-once")

    try:
        with ThreadPoolExecutor(16) as pool:
            responses = list(pool.map(send, range(16)))
        job_ids = {r.job_id for r in responses}
        assert len(job_ids) == 1 and "" not in job_ids
        assert all(r.report == responses[0].report for r in responses)
        assert held(replicas[0].store) == (list(job_ids), GPUS)
    finally:
        for r in replicas:
            r.close()


def test_concurrent_requests_reusing_a_key_across_projects_open_one_record(backend, tmp_path):
    # Different documents, in different projects (whose quota locks do not order them):
    # only the key orders them, and exactly one is admitted.
    replicas = [Running(config_on(backend, tmp_path)) for _ in range(2)]
    docs = [JOBSPEC, mutate(OTHER, {"/metadata/project": "other-lab"})]
    start = threading.Barrier(16)

    def send(i: int) -> str:
        start.wait()
        try:
            return admit(replicas[i % 2], docs[i // 2 % 2], "contended").job_id
        except grpc.RpcError as e:
            return key_reused(e)["job_id"]

    try:
        with ThreadPoolExecutor(16) as pool:
            named = set(pool.map(send, range(16)))
        (job_id,) = named
        assert held(replicas[0].store)[0] == [job_id]
    finally:
        for r in replicas:
            r.close()


def test_a_key_reused_by_another_request_is_refused_and_admits_nothing(served):
    first = admit(served, JOBSPEC, "taken")
    before = held(served.store)
    error = refusal(admit, served, OTHER, "taken")
    assert key_reused(error) == {"field": "document.idempotency_key", "job_id": first.job_id}
    assert first.job_id in error.details() and "'taken'" in error.details()
    # in a batch, the whole batch is refused before any item is admitted
    batch = admission_pb2.AdmitBatchRequest(documents=[document(mutate(JOBSPEC, {"/metadata/name": "innocent"})), document(OTHER, "taken")])
    assert key_reused(refusal(served.admission.AdmitBatch, batch, metadata=ALICE, timeout=60))["field"] == "documents[1].idempotency_key"
    # the same document as another kind, or sent dry, is another request or no request
    error = refusal(served.admission.Admit, admission_pb2.AdmitRequest(document=document(JOBSPEC, "taken", kind="KIND_JOBSPEC")), metadata=ALICE, timeout=60)
    assert key_reused(error)["job_id"] == first.job_id
    stream = served.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="r", document=document(OTHER, "taken"))]), metadata=ALICE, timeout=60)
    assert key_reused(refusal(list, stream))["field"] == "document.idempotency_key"
    assert held(served.store) == before


def test_a_key_reused_by_a_document_that_launches_nothing_is_already_exists(served):
    # Refused before any store is reached (a job_record launches nothing): the key is
    # still looked up, and its first admission named.
    first = admit(served, JOBSPEC, "launched")
    record = example("job_record.at_open.valid.json")
    assert key_reused(refusal(admit, served, record, "launched"))["job_id"] == first.job_id
    assert invalid_field(refusal(admit, served, record, "unused")) == "document"
    assert held(served.store) == ([first.job_id], GPUS)


def test_a_package_is_part_of_the_request(served, tmp_path):
    doc, members = packaged()
    whole = tar_package(tmp_path / "whole.tar", members).read_bytes()
    other = tar_package(tmp_path / "other.tar", {**members, "scripts/checkpoint_action.py": b"print('other')\n"}).read_bytes()

    def bundle(package: bytes) -> admission_pb2.AdmitRequest:
        return admission_pb2.AdmitRequest(document=document(doc, "packaged", package=package))

    first = served.admission.Admit(bundle(whole), metadata=ALICE, timeout=60)
    assert first.job_id and first.report.verdict == "pass"
    assert served.admission.Admit(bundle(whole), metadata=ALICE, timeout=60) == first
    assert key_reused(refusal(served.admission.Admit, bundle(other), metadata=ALICE, timeout=60))["job_id"] == first.job_id
    assert [rec["id"] for rec in served.store.list()] == [first.job_id]


def test_keys_are_per_account(backend, tmp_path):
    r = Running(config_on(backend, tmp_path, TWO_SUBMITTERS))
    try:
        alice, bob = admit(r, JOBSPEC, "shared-key"), admit(r, JOBSPEC, "shared-key", md=BOB)
        assert alice.job_id and bob.job_id and alice.job_id != bob.job_id
        assert admit(r, OTHER, "only-bobs", md=BOB).job_id  # alice never used it
        assert admit(r, OTHER, "only-bobs").job_id
        assert len(held(r.store)[0]) == 4
    finally:
        r.close()


def test_a_key_is_remembered_for_the_window_then_pruned(backend, tmp_path):
    config = config_on(backend, tmp_path)
    window = 1.0
    r = Running(config.model_copy(update={"jobs": config.jobs.model_copy(update={"idempotency_window": window})}))
    store = r.store
    try:
        first = admit(r, JOBSPEC, "short-lived")
        assert admit(r, JOBSPEC, "short-lived") == first
        time.sleep(window + 0.2)
        again = admit(r, JOBSPEC, "short-lived")  # expired: the key starts afresh
        assert again.job_id and again.job_id != first.job_id
        assert key_reused(refusal(admit, r, OTHER, "short-lived"))["job_id"] == again.job_id
        assert set(store.recall("alice", ["short-lived"], window)) == {"short-lived"}
        time.sleep(window + 0.2)
        # a write with keys prunes what expired, in a transaction of its own
        assert admit(r, OTHER, "another-key").job_id
        assert store.recall("alice", ["short-lived", "another-key"], 1e9).keys() == {"another-key"}
        assert len(held(store)[0]) == 3
    finally:
        r.close()
        store.close()


def test_dry_runs_and_refusals_leave_the_key_unused(served):
    dry = admit(served, OTHER, "later", dry_run=True)
    assert dry.job_id == "" and dry.report.verdict == "pass"
    assert admit(served, JOBSPEC, "x" * 1000, dry_run=True).report.verdict == "pass"  # a dry run ignores the key
    refused = admit(served, {**JOBSPEC, "kind": "Nope"}, "later")
    assert refused.job_id == "" and refused.report.verdict == "fail"
    admitted = admit(served, JOBSPEC, "later")  # neither used the key
    assert admitted.job_id
    assert admit(served, OTHER, "later", dry_run=True) == dry  # nor does a dry run after
    assert held(served.store) == ([admitted.job_id], GPUS)


def test_a_key_longer_than_128_bytes_is_invalid_argument(served):
    assert admit(served, JOBSPEC, "é" * 64).job_id  # 128 bytes
    assert invalid_field(refusal(admit, served, JOBSPEC, "é" * 64 + "x")) == "document.idempotency_key"
    batch = admission_pb2.AdmitBatchRequest(documents=[document(OTHER), document(OTHER, "k" * 129)])
    assert invalid_field(refusal(served.admission.AdmitBatch, batch, metadata=ALICE, timeout=60)) == "documents[1].idempotency_key"
    assert len(held(served.store)[0]) == 1


def test_a_retried_batch_opens_only_what_has_no_key(served):
    third = mutate(JOBSPEC, {"/metadata/name": "third"})
    batch = admission_pb2.AdmitBatchRequest(documents=[document(JOBSPEC, "b-1"), document(OTHER, "b-2"), document(third), document(JOBSPEC, "b-1")])
    first = served.admission.AdmitBatch(batch, metadata=ALICE, timeout=60).results
    assert first[0].job_id and first[0] == first[3]  # one key twice in a batch: one admission
    again = served.admission.AdmitBatch(batch, metadata=ALICE, timeout=60).results
    assert again[:2] == first[:2] and again[3] == first[3]
    assert again[2].job_id != first[2].job_id  # no key: a new record each time
    assert len(held(served.store)[0]) == 4
    clash = admission_pb2.AdmitBatchRequest(documents=[document(third, "b-3"), document(OTHER, "b-3")])
    assert invalid_field(refusal(served.admission.AdmitBatch, clash, metadata=ALICE, timeout=60)) == "documents[1].idempotency_key"
    assert len(held(served.store)[0]) == 4


def test_a_stream_sent_again_gets_the_same_jobs(served):
    def stream(*keys: str) -> list[admission_pb2.AdmitStreamResponse]:
        requests: queue.Queue = queue.Queue()
        for i, key in enumerate(keys):
            requests.put(admission_pb2.AdmitStreamRequest(request_id=f"r{i}", document=document(mutate(JOBSPEC, {"/metadata/name": f"s{i}"}), key)))
        requests.put(None)
        return list(served.admission.AdmitStream(iter(requests.get, None), metadata=ALICE, timeout=60))

    first = stream("s-0", "s-1")
    assert [(r.request_id, bool(r.job_id)) for r in first] == [("r0", True), ("r1", True)]
    assert [r.job_id for r in stream("s-0", "s-1")] == [r.job_id for r in first]
    assert len(held(served.store)[0]) == 2


def test_submit_admits_every_document_once_across_a_server_restart(backend, tmp_path):
    config, port = config_file(tmp_path, backend), free_port()
    paths = []
    for i in range(4):
        path = tmp_path / f"job-{i}.json"
        path.write_text(json.dumps(mutate(JOBSPEC, {"/metadata/name": f"job-{i}"})))
        paths.append(str(path))
    command = [sys.executable, "-m", "jobgate.cli", "submit", *paths, "--server", f"127.0.0.1:{port}", "--token", TOKEN, "--format", "json"]
    with serving(config, port, kill_after_commits=2) as first:
        submit = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert first.wait(60) == -signal.SIGKILL  # after the 2nd document's commit, before its reply
    try:
        with serving(config, port):
            out, err = submit.communicate(timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert submit.returncode == 0, err
    results = json.loads(out)["results"]
    job_ids = [r["job_id"] for r in results]
    assert [r["source"] for r in results] == paths and all(job_ids) and len(set(job_ids)) == 4
    assert len({r["idempotency_key"] for r in results}) == 4
    store = open_store(*backend)
    try:
        ids, gpus = held(store)  # exactly the four, each charged once; sent on several connections, in any order
        assert sorted(ids) == sorted(job_ids) and gpus == 4 * GPUS
    finally:
        store.close()
