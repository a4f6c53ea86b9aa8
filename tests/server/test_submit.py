"""`jobgate submit` against a real server: verdicts, job ids, exit codes, packages,
idempotency keys, and a run that goes on past a document that gets no verdict."""

from __future__ import annotations

import json
import threading
import time
from concurrent import futures

import grpc

from jobgate.cli import main
from jobgate.v1 import admission_pb2, admission_pb2_grpc, report_pb2
from tests.files.helpers import packaged, tar_package
from tests.helpers import free_port, mutate, run_cli, sample
from tests.server.helpers import TOKEN, Running, config_for

JOBSPEC = sample("jobspec.valid.json")


def submit(capsys, running, *args: str) -> tuple[int, dict]:
    code, out = run_cli(capsys, ["submit", *args, "--server", f"127.0.0.1:{running.port}", "--token", TOKEN, "--format", "json"])
    return code, json.loads(out)


def test_submit_admits_refuses_and_dry_runs(running, tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(JOBSPEC))
    bad.write_text(json.dumps(mutate(JOBSPEC, {"/metadata/name": "../x"})))
    code, out = submit(capsys, running, str(good), str(bad))
    assert code == 1
    admitted, refused = out["results"]
    assert admitted["verdict"] == "pass" and admitted["job_id"].startswith("grpo-my-grpo-")
    assert refused["job_id"] == "" and [(v["rule"], v["field"]) for v in refused["violations"]] == [("forge.name", "/metadata/name")]
    assert [r["id"] for r in running.store.list()] == [admitted["job_id"]]
    code, out = submit(capsys, running, str(good), "--dry-run")
    assert code == 0 and out["results"][0]["job_id"] == "" and len(running.store.list()) == 1


def test_submit_with_a_package(running, tmp_path, capsys):
    doc, members = packaged()
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps(doc))
    whole = tar_package(tmp_path / "whole.tar", members)
    changed = tar_package(tmp_path / "changed.tar", {**members, "scripts/checkpoint_action.py": b"print('other')\n"})
    assert submit(capsys, running, str(bundle), "--package", str(whole), "--dry-run")[0] == 0
    code, out = submit(capsys, running, str(bundle), "--package", str(changed), "--dry-run")
    assert code == 1 and [v["rule"] for v in out["results"][0]["violations"]] == ["tao.supporting_file.sha256_mismatch"]


def test_submit_that_cannot_run_is_exit_2(running, tmp_path, capsys):
    doc = tmp_path / "job.json"
    doc.write_text(json.dumps(JOBSPEC))
    capsys.readouterr()
    assert main(["submit", str(doc), "--server", f"127.0.0.1:{running.port}", "--token", "wrong"]) == 2
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    assert main(["submit", str(doc), str(doc), "--server", f"127.0.0.1:{running.port}", "--token", "wrong"]) == 2
    err = capsys.readouterr().err.splitlines()  # the caller refused: the second is not sent
    assert "UNAUTHENTICATED" in err[0] and err[1].endswith("not sent: " + f"127.0.0.1:{running.port} refused the caller (UNAUTHENTICATED for {doc})")
    assert main(["submit", str(doc), "--server", f"127.0.0.1:{free_port()}", "--timeout", "5", "--retries", "1"]) == 2
    err = capsys.readouterr().err
    assert "UNAVAILABLE" in err and "(after 2 attempts)" in err and "--idempotency-key jobgate-submit:" in err
    assert main(["submit", str(doc), "--package", str(tmp_path / "missing.tar"), "--server", f"127.0.0.1:{running.port}"]) == 2
    assert "missing.tar" in capsys.readouterr().err


def test_submit_goes_on_past_documents_that_get_no_verdict(tmp_path, capsys):
    r = Running(config_for(tmp_path, max_message_bytes=64 << 10))  # smaller than huge.json
    try:
        paths = []
        for name, doc in (("job.json", JOBSPEC), ("huge.json", mutate(JOBSPEC, {"/metadata/labels/padding": "x" * (100 << 10)})), ("other.json", mutate(JOBSPEC, {"/metadata/name": "other"}))):
            (tmp_path / name).write_text(json.dumps(doc))
            paths.append(str(tmp_path / name))
        paths.insert(1, str(tmp_path / "missing.json"))
        capsys.readouterr()
        assert main(["submit", *paths, "--server", f"127.0.0.1:{r.port}", "--token", TOKEN, "--format", "json"]) == 2
        captured = capsys.readouterr()
        results = json.loads(captured.out)["results"]
        assert [(x["source"], x["verdict"], bool(x["job_id"])) for x in results] == [(paths[0], "pass", True), (paths[1], None, False), (paths[2], None, False), (paths[3], "pass", True)]
        assert results[1]["error"]["code"] == "NOT_SENT" and results[2]["error"]["code"] == "RESOURCE_EXHAUSTED"
        assert json.loads(captured.out)["summary"] == {"total": 4, "passed": 2, "failed": 0, "errors": 0, "warnings": 0, "no_verdict": 2}
        assert captured.err.startswith(f"jobgate: {paths[1]}: not sent: {paths[1]}: no such file or directory\njobgate: {paths[2]}: 127.0.0.1:{r.port}: RESOURCE_EXHAUSTED: ")
        assert len(captured.err.splitlines()) == 2
        assert sorted(rec["id"] for rec in r.store.list()) == sorted([results[0]["job_id"], results[3]["job_id"]])
        # the text form names every document, and every job id received
        assert main(["submit", *paths, "--server", f"127.0.0.1:{r.port}", "--token", TOKEN]) == 2
        out = capsys.readouterr().out
        assert out.count("admitted as job") == 2 and f"{paths[1]}: not sent" in out and f"{paths[2]}: no verdict — RESOURCE_EXHAUSTED" in out
        assert "4 documents: 2 passed, 0 failed, 2 without a verdict" in out
    finally:
        r.close()


def test_submit_with_a_pinned_key_admits_once(running, tmp_path, capsys):
    doc = tmp_path / "job.json"
    doc.write_text(json.dumps(JOBSPEC))
    code, first = submit(capsys, running, str(doc), "--idempotency-key", "ticket-4711")
    assert code == 0 and first["results"][0]["idempotency_key"] == "ticket-4711"
    code, again = submit(capsys, running, str(doc), "--idempotency-key", "ticket-4711")
    assert code == 0 and again["results"][0]["job_id"] == first["results"][0]["job_id"]
    assert len(running.store.list()) == 1
    # without it, each run is a new admission under keys of its own
    code, fresh = submit(capsys, running, str(doc), str(doc))
    keys = [x["idempotency_key"] for x in fresh["results"]]
    assert code == 0 and len(set(keys)) == 2 and "ticket-4711" not in keys
    assert len(running.store.list()) == 3
    # a dry run sends no key
    code, dry = submit(capsys, running, str(doc), "--dry-run")
    assert code == 0 and dry["results"][0]["idempotency_key"] is None
    # a key pinned for several documents, or too long, is a usage error
    capsys.readouterr()
    assert main(["submit", str(doc), str(doc), "--idempotency-key", "k", "--server", f"127.0.0.1:{running.port}"]) == 2
    assert "one document" in capsys.readouterr().err
    assert main(["submit", str(doc), "--idempotency-key", "k" * 129, "--server", f"127.0.0.1:{running.port}"]) == 2
    assert "--idempotency-key must be 1 to 128 bytes" in capsys.readouterr().err


def test_submit_stops_sending_once_the_server_stays_unavailable(tmp_path, capsys):
    paths = []
    for i in range(3):
        (tmp_path / f"{i}.json").write_text(json.dumps(JOBSPEC))
        paths.append(str(tmp_path / f"{i}.json"))
    capsys.readouterr()
    assert main(["submit", *paths, "--server", f"127.0.0.1:{free_port()}", "--retries", "2", "--format", "json"]) == 2
    captured = capsys.readouterr()
    codes = [x["error"]["code"] for x in json.loads(captured.out)["results"]]
    assert codes == ["UNAVAILABLE", "NOT_SENT", "NOT_SENT"]
    assert "stayed unavailable (3 attempts" in captured.err


class PeerAdmission(admission_pb2_grpc.AdmissionServiceServicer):
    """Passes every document after a moment, noting the connection (the caller's
    address and port) and the idempotency key of each call, in the order they came."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def Admit(self, request, context):  # noqa: N802
        with self.lock:
            self.calls.append((context.peer(), request.document.idempotency_key))
        time.sleep(0.02)  # long enough that every connection gets documents
        place = request.document.idempotency_key.rpartition(":")[2]
        return admission_pb2.AdmitResponse(report=report_pb2.Report(kind="jobspec", verdict="pass"), job_id=f"job-{place}")


def test_many_documents_go_out_on_several_connections(tmp_path, capsys):
    """`serve --workers N` gives a connection, with every call on it, to one worker:
    submit sends many documents on 8 connections unless told, one call at a time on
    each; --connections 1 sends them one by one, in order.
    The output keeps the order of the arguments."""
    servicer = PeerAdmission()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    admission_pb2_grpc.add_AdmissionServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        doc = tmp_path / "job.json"
        doc.write_text(json.dumps(JOBSPEC))
        for count, options, connections in ((24, [], 8), (24, ["--connections", "3"], 3), (24, ["--connections", "1"], 1)):
            servicer.calls.clear()
            capsys.readouterr()
            assert main(["submit", *[str(doc)] * count, *options, "--server", f"127.0.0.1:{port}", "--format", "json"]) == 0
            results = json.loads(capsys.readouterr().out)["results"]
            assert [r["job_id"] for r in results] == [f"job-{i}" for i in range(count)]
            assert len({peer for peer, _ in servicer.calls}) == connections, options
            if connections == 1:
                assert [key.rpartition(":")[2] for _, key in servicer.calls] == [str(i) for i in range(count)]
    finally:
        server.stop(None)
