"""The service's log and its side ports, attacked as a hostile tenant would, on
`jobgate serve` in a process of its own (loopback port 0): a request that would write
megabytes into one log line, idle connections to the metrics endpoint, a metrics port
already taken, denials traced to their call, and health's `List`."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobgate.server.logs import MAX_LINE
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from tests.helpers import free_port, promtool, sample
from tests.server.helpers import TOKEN, bearer, write_config

JOBSPEC = sample("jobspec.valid.json")


class Served:
    """`jobgate serve --config PATH` on 127.0.0.1:0, its stderr gathered line by line
    (as bytes) while it runs; `port` read from its "serving" line."""

    def __init__(self, config: Path, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(config), "--listen", "127.0.0.1:0", *args], stderr=subprocess.PIPE)
        self.lines: list[bytes] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self._reader.start()
        serving = self.wait_for(lambda e: e["message"] == "serving")
        self.port = int(serving["address"].rpartition(":")[2])
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", options=[("grpc.max_send_message_length", 8 << 20)])

    def logs(self) -> list[dict]:
        return [json.loads(line) for line in list(self.lines)]

    def wait_for(self, found, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.logs():
                if found(entry):
                    return entry
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no such log line; the log: {b''.join(self.lines)[:4000]!r}")

    def threads(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reader.join(10)


@pytest.fixture
def served(tmp_path):
    """Starts `jobgate serve` on a jobgate.toml with alice (a submitter of my-lab) and
    `extra` TOML lines; each is stopped at the end of the test."""
    started: list[Served] = []

    def start(*server: str, extra: str = "") -> Served:
        config = tmp_path / "jobgate.toml"
        write_config(config, tmp_path, catalog=True, server=server)
        if extra:
            config.write_text(config.read_text() + extra)
        started.append(Served(config))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def test_a_shadow_disagreement_of_thousands_of_violations_is_one_bounded_line(tmp_path, served):
    # The candidate makes each unknown field an error: 1,000 of them (the most a report
    # lists) in a 105 KB JobSpec are 1,000 violations each side has alone.
    candidate = tmp_path / "candidate.toml"
    write_config(candidate, tmp_path, catalog=True)
    candidate.write_text(candidate.read_text() + '[rules]\n"schema.additionalProperties" = "error"\n')
    s = served(extra=f'[shadow]\nconfig = "{candidate}"\n')
    doc = json.loads(json.dumps(JOBSPEC))
    for i in range(1000):
        doc["spec"][f"unknown_field_{i:04d}_" + "x" * 80] = i
    raw = json.dumps(doc).encode()
    assert len(raw) > 100_000
    stub = admission_pb2_grpc.AdmissionServiceStub(s.channel)
    response = stub.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw), dry_run=True), metadata=bearer(TOKEN), timeout=30)
    assert response.report.verdict == "pass" and len(response.report.violations) == 1000
    # A project name of a megabyte in a request: the denial's line is bounded too.
    jobs = jobs_pb2_grpc.JobServiceStub(s.channel)
    jobs.ListJobs(jobs_pb2.ListJobsRequest(project="p" * (1 << 20)), metadata=bearer(TOKEN), timeout=30)
    line = s.wait_for(lambda e: e["message"] == "shadow disagreement")
    s.wait_for(lambda e: e["message"] == "denied")
    s.stop()
    assert max(len(raw_line) for raw_line in s.lines) <= MAX_LINE + 1  # its newline
    assert (line["added_count"], line["removed_count"], line["rules"], line["rules_count"]) == (1000, 1000, ["schema.additionalProperties"], 1)
    assert line["added"] == [f"schema.additionalProperties /spec/unknown_field_{i:04d}_{'x' * 80}" for i in range(5)]
    assert len(line["removed"]) == 5
    assert (line["verdict"], line["candidate_verdict"], line["account"]) == ("pass", "fail", "alice")
    denied = next(e for e in s.logs() if e["message"] == "denied")
    assert denied["project"].startswith("p" * 1000) and denied["project"].endswith(f"…(+{(1 << 20) - 1024} chars)")


def scrape(port: int, timeout: float = 5) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read().decode()


def test_idle_connections_to_the_metrics_endpoint_hold_no_threads_and_a_scrape_still_answers(served):
    metrics_port = free_port()
    s = served(f'metrics_listen = "127.0.0.1:{metrics_port}"')
    health_pb2_grpc.HealthStub(s.channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    scrape(metrics_port)
    before = s.threads()
    idle = []
    try:
        for i in range(400):
            conn = socket.create_connection(("127.0.0.1", metrics_port), timeout=5)
            if i % 2:  # half send the start of a request and stall (slow loris)
                conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            idle.append(conn)
        time.sleep(1)
        assert s.threads() <= before + 2
        started = time.monotonic()
        text = scrape(metrics_port, timeout=5)
        assert time.monotonic() - started < 5
        assert 'grpc_server_started_total{grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"}' in text
        done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        # A connection that never finishes its request is closed within the deadline.
        last = idle[-1]
        last.settimeout(15)
        try:
            assert last.recv(1) == b""
        except ConnectionResetError:
            pass
        assert s.threads() <= before + 2
    finally:
        for conn in idle:
            conn.close()


def test_a_metrics_port_already_taken_is_a_clean_refusal_naming_the_address(tmp_path):
    config = tmp_path / "jobgate.toml"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        write_config(config, tmp_path, catalog=True, server=(f'metrics_listen = "{taken}"',))
        for args in (["--listen", "127.0.0.1:0"], ["--listen", f"127.0.0.1:{free_port()}", "--workers", "2"]):
            done = subprocess.run([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(config), *args], capture_output=True, text=True, timeout=60)
            assert done.returncode == 2
            assert done.stderr.splitlines()[-1] == f"jobgate: server.metrics_listen: cannot listen on {taken}: Address already in use (is another service running there?)"
            assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_a_denied_line_carries_the_request_id_of_its_call(served):
    s = served()
    jobs = jobs_pb2_grpc.JobServiceStub(s.channel)
    with pytest.raises(grpc.RpcError) as made:  # alice is a submitter: MarkJob needs a backend
        jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id="j-1", state="RUNNING"), metadata=bearer(TOKEN), timeout=10)
    with pytest.raises(grpc.RpcError) as given:
        jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id="j-2", state="RUNNING"), metadata=[*bearer(TOKEN), ("x-request-id", "trace-42")], timeout=10)
    assert made.value.code() == given.value.code() == grpc.StatusCode.PERMISSION_DENIED
    made_id = dict(made.value.trailing_metadata())["x-request-id"]
    assert dict(given.value.trailing_metadata())["x-request-id"] == "trace-42"
    for job_id, request_id in (("j-1", made_id), ("j-2", "trace-42")):
        denied = s.wait_for(lambda e, job_id=job_id: e["message"] == "denied" and e.get("job_id") == job_id)
        call = s.wait_for(lambda e, request_id=request_id: e["message"] == "call" and e.get("request_id") == request_id)
        assert denied["request_id"] == request_id
        assert (call["rpc"], call["status"]) == ("MarkJob", "PERMISSION_DENIED")


def test_health_list_is_answered_without_a_traceback(served):
    s = served()
    health = health_pb2_grpc.HealthStub(s.channel)
    for _ in range(3):  # no credentials: health is open
        listed = health.List(health_pb2.HealthListRequest(), timeout=10)
        assert {name: status.status for name, status in listed.statuses.items()} == {
            "": health_pb2.HealthCheckResponse.SERVING,
            "jobgate.v1.AdmissionService": health_pb2.HealthCheckResponse.SERVING,
            "jobgate.v1.JobService": health_pb2.HealthCheckResponse.SERVING,
        }
    s.wait_for(lambda e: e["message"] == "call" and e["rpc"] == "List")
    s.stop()
    assert s.proc.returncode == 0
    logs = s.logs()  # every line is one JSON object
    assert [e["status"] for e in logs if e.get("rpc") == "List"] == ["OK"] * 3
    assert not [e for e in logs if "traceback" in e or e["level"] == "error"]
