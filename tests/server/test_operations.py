"""Operating the service: metrics, configuration reload on SIGHUP, several worker
processes on one port, and a clean stop on SIGTERM. Real processes, real ports."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

import grpc
import pytest

from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2
from tests.helpers import free_port, promtool, sample
from tests.server.helpers import TOKEN, Running, config_for, reads_whole_answers, wait_serving, write_config

JOBSPEC = sample("jobspec.valid.json")
AUTH = [("authorization", f"Bearer {TOKEN}")]


def admit(stub, doc, dry_run=True):
    return stub.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(doc).encode()), dry_run=dry_run), metadata=AUTH, timeout=10)


def test_metrics_endpoint(tmp_path):
    cfg = config_for(tmp_path)
    cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"metrics_listen": "127.0.0.1:0"})})
    r = Running(cfg)
    try:
        admit(r.admission, JOBSPEC)
        admit(r.admission, {**JOBSPEC, "kind": "Nope"})
        r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=json.dumps(JOBSPEC).encode())] * 3, dry_run=True), metadata=AUTH)
        text = urllib.request.urlopen(f"http://127.0.0.1:{r.metrics_port}/metrics", timeout=10).read().decode()
        assert 'jobgate_admissions_total{rpc="Admit",verdict="pass"} 1.0' in text
        assert 'jobgate_admissions_total{rpc="Admit",verdict="fail"} 1.0' in text
        assert 'jobgate_admissions_total{rpc="AdmitBatch",verdict="pass"} 3.0' in text
        assert 'jobgate_violations_total{rule="forge.kind",severity="error"} 1.0' in text
        assert "jobgate_batch_documents_count 1.0" in text
        admission = 'grpc_method="{}",grpc_service="jobgate.v1.AdmissionService",grpc_type="unary"'
        assert f"grpc_server_handled_total{{grpc_code=\"OK\",{admission.format('Admit')}}} 2.0" in text
        assert f"grpc_server_started_total{{{admission.format('Admit')}}} 2.0" in text
        assert f"grpc_server_handling_seconds_count{{{admission.format('Admit')}}} 2.0" in text
        assert f"grpc_server_msg_received_total{{{admission.format('AdmitBatch')}}} 1.0" in text
    finally:
        r.close()


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def value(text: str, name: str, **labels: str) -> float:
    """The sample `name` whose labels include `labels`, summed over the others."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        sample, _, number = line.rpartition(" ")
        if all(f'{k}="{v}"' in sample for k, v in labels.items()):
            total, found = total + float(number), True
    assert found, f"no {name} with {labels}"
    return total


def promtool_accepts(text: str) -> None:
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_call_is_counted_by_status_and_timed_with_store_and_process_metrics(tmp_path):
    cfg = config_for(tmp_path)
    cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"metrics_listen": "127.0.0.1:0"})})
    r = Running(cfg)
    try:
        for _ in range(3):  # three refused callers: UNAUTHENTICATED, not successes
            with pytest.raises(grpc.RpcError):
                r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(JOBSPEC).encode())), metadata=[("authorization", "Bearer nope")])
        job_id = admit(r.admission, JOBSPEC, dry_run=False).job_id
        r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=AUTH)
        with pytest.raises(grpc.RpcError):
            r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="missing"), metadata=AUTH)
        stream = r.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id=str(i), document=admission_pb2.Document(raw=json.dumps(JOBSPEC).encode()), dry_run=True) for i in range(2)]), metadata=AUTH)
        assert [x.request_id for x in stream] == ["0", "1"]
        watch = r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=AUTH)
        assert next(watch).state == "PENDING"
        text = scrape(r.metrics_port)
        admission, jobs = "jobgate.v1.AdmissionService", "jobgate.v1.JobService"
        assert value(text, "grpc_server_handled_total", grpc_method="Admit", grpc_code="UNAUTHENTICATED", grpc_service=admission) == 3
        assert value(text, "grpc_server_handled_total", grpc_method="Admit", grpc_code="OK") == 1
        assert value(text, "grpc_server_handled_total", grpc_method="GetJob", grpc_code="OK", grpc_service=jobs) == 1
        assert value(text, "grpc_server_handled_total", grpc_method="GetJob", grpc_code="NOT_FOUND") == 1
        assert value(text, "grpc_server_handled_total", grpc_method="AdmitStream", grpc_code="OK", grpc_type="bidi_stream") == 1
        assert value(text, "grpc_server_msg_received_total", grpc_method="AdmitStream") == 2
        assert value(text, "grpc_server_msg_sent_total", grpc_method="AdmitStream") == 2
        assert value(text, "grpc_server_handling_seconds_count", grpc_method="AdmitStream") == 1
        assert value(text, "grpc_server_started_total", grpc_method="WatchJob", grpc_type="server_stream") == 1
        assert value(text, "jobgate_rpcs_in_flight", rpc="WatchJob") == 1  # the watch is still open
        assert value(text, "jobgate_admissions_total", rpc="AdmitStream", verdict="pass") == 2
        assert value(text, "jobgate_store_seconds_count", operation="admit_many") >= 1
        assert value(text, "jobgate_store_seconds_count", operation="get") >= 1
        assert value(text, "process_resident_memory_bytes") > 0
        assert value(text, "process_open_fds") > 0
        assert_build_info(text)
        watch.cancel()
        promtool_accepts(text)
    finally:
        r.close()


def assert_build_info(text: str) -> None:
    """jobgate_build_info: 1, labelled with what runs."""
    import platform
    import re
    from importlib import metadata

    from jobgate import _core

    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(-\S+)?", _core.RUSTC_VERSION), _core.RUSTC_VERSION
    labels = {"version": metadata.version("jobgate"), "core_version": _core.__version__, "rustc_version": _core.RUSTC_VERSION, "python_version": platform.python_version(), "python_implementation": platform.python_implementation()}
    assert value(text, "jobgate_build_info", **labels) == 1
    assert sum(1 for line in text.splitlines() if line.startswith("jobgate_build_info")) == 1  # one series


def rule_ids(response) -> list[str]:
    return [v.rule for v in response.report.violations]


def stopped_log(proc: subprocess.Popen) -> str:
    """What a server wrote besides its request log, once stopped: the account of a failure."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return "\n".join(line for line in err.splitlines() if '"jobgate.requests"' not in line)


def test_sighup_reloads_and_keeps_the_last_good_configuration(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=False)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        channel = wait_serving(port)
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        assert rule_ids(admit(stub, JOBSPEC)) == ["forge.handshake.recipe_unknown"]
        write_config(cfg, tmp_path, catalog=True)
        proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 20
        while rule_ids(admit(stub, JOBSPEC)) and time.time() < deadline:
            time.sleep(0.2)
        assert admit(stub, JOBSPEC).report.verdict == "pass", stopped_log(proc)
        cfg.write_text("[limits]\nmax_depth = 'deep'\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert admit(stub, JOBSPEC).report.verdict == "pass"  # the last good configuration stays
        channel.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
        messages = [entry["message"] for entry in logs]
        assert "configuration reloaded" in messages
        failed = [e for e in logs if e["message"].startswith("configuration reload failed")]
        assert failed and "limits.max_depth" in failed[0]["error"]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_workers_share_one_port(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=True)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", "2"], stderr=subprocess.DEVNULL)
    try:
        channel = wait_serving(port)
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        ids = {admit(stub, JOBSPEC, dry_run=False).job_id for _ in range(10)}
        assert len(ids) == 10 and "" not in ids
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_serve_refuses_a_store_inside_results_root(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "results" / "store"}"\n[jobs]\nresults_root = "{tmp_path / "results"}"\n')
    result = subprocess.run([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "inside results_root" in result.stderr


def test_anonymous_is_refused_off_loopback(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text("[server]\nallow_anonymous = true\n")
    result = subprocess.run([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "allow_anonymous" in result.stderr


def test_tokens_in_plaintext_off_loopback_are_refused_unless_allowed(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=True)
    command = [sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", "0.0.0.0:0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "refusing to accept bearer tokens in plaintext on 0.0.0.0:0" in result.stderr and "server.allow_insecure" in result.stderr
    write_config(cfg, tmp_path, catalog=True, server=("allow_insecure = true",))
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(json.loads(line))
            if lines[-1]["level"] == "warning":
                break
        assert "bearer tokens are accepted in plaintext off loopback" in lines[-1]["message"]
        assert [entry["message"] for entry in lines[:-1]] == ["serving"]
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("signum", [signal.SIGTERM])
def test_sigterm_stops_cleanly(tmp_path, signum):
    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=True)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    wait_serving(port).close()
    proc.send_signal(signum)
    assert proc.wait(30) == 0
    assert "stopping: finishing in-flight calls" in proc.stderr.read()


def serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", *args], stderr=subprocess.PIPE, text=True)


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def test_a_port_another_process_holds_is_refused_at_start(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for workers in ("1", "2"):
            proc = serve("--listen", f"127.0.0.1:{port}", "--workers", workers)
            assert proc.wait(30) == 2
            assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in proc.stderr.read()


def serving_workers(proc, port: int, n: int) -> list[int]:
    """The pids of the `n` workers of the supervisor `proc`, once `port` serves."""
    wait_serving(port).close()
    deadline = time.time() + 20
    while len(children_of(proc.pid)) < n and time.time() < deadline:
        time.sleep(0.1)
    workers = children_of(proc.pid)
    assert len(workers) == n
    return workers


def test_a_worker_that_dies_takes_the_service_down_and_metrics_are_summed(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    metrics_port = free_port()
    write_config(cfg, tmp_path, catalog=True, server=(f'metrics_listen = "127.0.0.1:{metrics_port}"',))
    port = free_port()
    proc = serve("--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", "2")
    try:
        workers = serving_workers(proc, port, 2)
        # Calls on separate connections are spread over the workers; the supervisor's
        # one endpoint sums what both counted.
        for _ in range(12):
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
                admit(admission_pb2_grpc.AdmissionServiceStub(channel), JOBSPEC)
        scraped = scrape(metrics_port)
        assert value(scraped, "jobgate_admissions_total", rpc="Admit") == 12
        assert value(scraped, "grpc_server_handled_total", grpc_method="Admit", grpc_code="OK") == 12
        for worker in ("0", "1"):  # each worker's process, from the supervisor
            assert value(scraped, "process_resident_memory_bytes", worker=worker) > 0
        assert_build_info(scraped)
        promtool_accepts(scraped)
        # One worker killed: the service goes down with a non-zero exit, and says why.
        import os

        os.kill(workers[0], signal.SIGKILL)
        assert proc.wait(30) != 0
        assert f"worker {workers[0]} exited" in proc.stderr.read()
        for pid in workers:
            assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_workers_stop_when_their_supervisor_is_killed_outright(tmp_path):
    """A supervisor killed with SIGKILL (no chance to pass a signal on) leaves no worker
    serving its port: each stops as its parent dies."""
    import os

    port = free_port()
    proc = serve("--listen", f"127.0.0.1:{port}", "--workers", "2")
    try:
        workers = serving_workers(proc, port, 2)
        proc.kill()
        proc.wait(30)
        deadline = time.time() + 30
        alive = workers
        while alive and time.time() < deadline:
            alive = [pid for pid in workers if os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
            time.sleep(0.1)
        assert alive == [], f"workers {alive} outlived their supervisor"
    finally:
        for pid in children_of(proc.pid) if proc.poll() is None else []:
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_calls_on_several_connections_reach_every_worker(tmp_path, capsys):
    """`serve --workers 2` gives each connection, with every call on it, to one worker
    the kernel picks: the calls of one connection are served by one worker, and
    `bench` and `submit` on 16 connections reach both (all 16 on one worker: 1 time in
    2**15). Each worker's count comes from the supervisor's /metrics."""
    from jobgate.cli import main

    cfg = tmp_path / "jobgate.toml"
    metrics_port = free_port()
    write_config(cfg, tmp_path, catalog=True, server=(f'metrics_listen = "127.0.0.1:{metrics_port}"',))
    port = free_port()
    # The request log's hundreds of lines would fill a pipe nobody reads.
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", "2"], stderr=subprocess.DEVNULL)
    try:
        wait_serving(port).close()
        deadline = time.time() + 20
        while len(children_of(proc.pid)) < 2 and time.time() < deadline:
            time.sleep(0.1)

        def served(*command: str) -> list[float]:
            """The calls each worker served while `jobgate COMMAND` ran."""
            before = [value(scrape(metrics_port), "jobgate_worker_rpcs_total", worker=w) for w in ("0", "1")]
            capsys.readouterr()
            assert main([*command, "--server", f"127.0.0.1:{port}", "--token", TOKEN, "--format", "json"]) == 0, capsys.readouterr().err
            assert json.loads(capsys.readouterr().out)
            return [value(scrape(metrics_port), "jobgate_worker_rpcs_total", worker=w) - b for w, b in zip(("0", "1"), before, strict=True)]

        bench = ("bench", "--requests", "200", "--concurrency", "8", "--warmup", "0")
        # One connection, one worker: bench's first call (on a connection of its own) aside.
        one = served(*bench, "--connections", "1")
        assert sum(one) == 201 and max(one) >= 200, one
        both = served(*bench, "--connections", "16")
        assert sum(both) == 201 and min(both) > 0, both
        doc = tmp_path / "job.json"
        doc.write_text(json.dumps(JOBSPEC))
        both = served("submit", *[str(doc)] * 64, "--dry-run", "--connections", "16")
        assert sum(both) == 64 and min(both) > 0, both
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


@contextmanager
def served_for_a_drain(tmp_path):
    """`jobgate serve` with a 60 s grace period, and a channel to it that reads large
    answers whole (`reads_whole_answers`); killed if a test leaves it running."""
    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=True, server=("shutdown_grace_s = 60",))
    port = free_port()
    proc = serve("--config", str(cfg), "--listen", f"127.0.0.1:{port}")
    try:
        wait_serving(port).close()
        channel = reads_whole_answers(port)
        yield proc, channel
        channel.close()
    finally:
        if proc.poll() is None:
            proc.kill()


def batch_in_flight(channel, *, dry_run: bool):
    """A 3,000-document AdmitBatch sent and, a moment later, being handled."""
    batch = admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=json.dumps(JOBSPEC).encode())] * 3000, dry_run=dry_run)
    in_flight = admission_pb2_grpc.AdmissionServiceStub(channel).AdmitBatch.future(batch, metadata=[("authorization", f"Bearer {TOKEN}")], timeout=120)
    time.sleep(0.05)
    return in_flight


def test_sigterm_drains_and_exits_as_soon_as_drained(tmp_path):
    """Health goes NOT_SERVING first, a call in flight is answered, an open health
    Watch ends, and the process exits at once rather than after the grace period."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with served_for_a_drain(tmp_path) as (proc, channel):
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=120)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        in_flight = batch_in_flight(channel, dry_run=True)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert len(in_flight.result().results) == 3000  # answered, not cancelled
        assert proc.wait(30) == 0
        assert time.monotonic() - started < 30  # drained long before the 60 s grace


def test_a_second_signal_while_draining_changes_nothing(tmp_path):
    """SIGTERM twice in a row (a worker's supervisor passes one on, then dies and the
    kernel sends another): the drain started by the first goes on, the call in flight
    is answered, and the process exits, rather than a second drain inside the first
    waiting on it forever."""
    with served_for_a_drain(tmp_path) as (proc, channel):
        in_flight = batch_in_flight(channel, dry_run=False)
        for _ in range(3):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.01)
        assert len(in_flight.result().results) == 3000  # answered, not cancelled
        assert proc.wait(30) == 0
        assert proc.stderr.read().count('"message":"stopping: finishing in-flight calls"') == 1


def test_a_call_stuck_on_the_store_does_not_hold_the_stop_past_its_grace(tmp_path):
    """The store stops answering (its write lock held elsewhere, as a hung database
    server would): an admission waits in its commit. SIGTERM with a 3 s grace: grpcio
    cancels the call when the grace ends, and the process exits 2 s later with status
    1 and an error naming the calls it left behind, rather than waiting for the store
    (its busy timeout is 30 s)."""
    import sqlite3

    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=True, server=("shutdown_grace_s = 3",))
    port = free_port()
    proc = serve("--config", str(cfg), "--listen", f"127.0.0.1:{port}")
    held = None
    try:
        channel = wait_serving(port)
        held = sqlite3.connect(tmp_path / "store" / "jobs.sqlite3", isolation_level=None)
        held.execute("BEGIN IMMEDIATE")  # the store's busy timeout is 30 s
        request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(JOBSPEC).encode()))
        call = admission_pb2_grpc.AdmissionServiceStub(channel).Admit.future(request, metadata=[("authorization", f"Bearer {TOKEN}")], timeout=60)
        time.sleep(1)  # in its commit by now, waiting for the lock until the grace ends
        assert not call.done()
        stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(25) == 1
        assert time.monotonic() - stopping < 20  # 3 s grace, 2 s for the threads: not the store's 30 s
        with pytest.raises(grpc.RpcError) as cancelled:
            call.result(timeout=10)
        assert cancelled.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
        errors = [json.loads(line) for line in proc.stderr.read().splitlines() if '"level":"error"' in line]
        assert [(e["message"], e["calls"], e["grace_s"]) for e in errors] == [("stopped with calls still running after the grace period; exiting without them", 1, 3.0)]
        channel.close()
    finally:
        if held is not None:
            held.close()
        if proc.poll() is None:
            proc.kill()


def test_the_request_log_has_a_line_per_call(tmp_path):
    """One JSON line per call: RFC 3339 UTC time, the request id (the caller's, or one
    made and sent back), account, RPC, status, verdict, job id, rule ids, latency."""
    cfg = tmp_path / "jobgate.toml"
    write_config(cfg, tmp_path, catalog=True)
    port = free_port()
    proc = serve("--config", str(cfg), "--listen", f"127.0.0.1:{port}")
    try:
        channel = wait_serving(port)
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        auth = [("authorization", f"Bearer {TOKEN}")]
        admitted, call = stub.Admit.with_call(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(JOBSPEC).encode())), metadata=[*auth, ("x-request-id", "gw-42")], timeout=10)
        assert ("x-request-id", "gw-42") in call.trailing_metadata()
        bad = {**JOBSPEC, "kind": "Other"}
        _, call = stub.Admit.with_call(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(bad).encode()), dry_run=True), metadata=auth, timeout=10)
        made = dict(call.trailing_metadata())["x-request-id"]
        with pytest.raises(grpc.RpcError):
            stub.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=b"{}")), metadata=[("authorization", "Bearer wrong")], timeout=10)
        channel.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        lines = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
        calls = {entry.get("request_id"): entry for entry in lines if entry["logger"] == "jobgate.requests"}
        first = calls["gw-42"]
        assert first["ts"].endswith("Z") and "T" in first["ts"]
        assert {k: first[k] for k in ("account", "rpc", "status", "verdict", "rules")} == {"account": "alice", "rpc": "Admit", "status": "OK", "verdict": "pass", "rules": []}
        assert first["job_id"] and first["latency_ms"] > 0
        second = calls[made]
        assert (second["verdict"], second["rules"], "job_id" in second) == ("fail", ["forge.kind"], False)
        refused = [e for e in calls.values() if e.get("status") == "UNAUTHENTICATED"]
        assert len(refused) == 1 and refused[0]["account"] is None
    finally:
        if proc.poll() is None:
            proc.kill()
