"""`jobgate bench` against real servers: every call shape, open and closed loops,
refusals and failures counted apart, saved runs compared, the plot checked before
any load is sent."""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import sys
import threading
import time
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from jobgate.cli import main
from jobgate.config import Server
from tests.helpers import free_port, sample
from tests.server.helpers import TOKEN, Collected, Running, config_for


def bench(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["bench", *args, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.fixture
def served(tmp_path):
    r = Running(config_for(tmp_path))
    yield r, ["--server", f"127.0.0.1:{r.port}", "--token", TOKEN]
    r.close()


def test_every_call_shape_is_measured(served, capsys):
    r, target = served
    for call, extra, per_call in (("admit", [], 1), ("admit-batch", ["--batch", "4"], 4), ("admit-stream", [], 1), ("empty", [], 0)):
        code, result = bench(capsys, *target, "--call", call, *extra, "--requests", "40", "--concurrency", "2", "--warmup", "0.2")
        assert code == 0, call
        assert result["calls"] == 40 and result["statuses"] == {"OK": 40}, call
        assert result["documents"] == 40 * per_call, call
        if per_call:  # the embedded JobSpec and spec-bundle, cycled: both pass the demo deployment
            assert result["verdicts"] == {"admitted": 40 * per_call, "refused": 0}, call
        lat = result["latency_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["p99.9"] <= lat["max"], call
        assert result["parameters"]["call"] == call and result["latency_from"] == "send time (closed loop)"
        assert result["parameters"]["connections"] == (2 if call == "admit-stream" else 8), call  # a stream keeps to one connection
        assert sum(s["calls"] for s in result["timeline"]) == 40
        assert result["machine"]["cores"] >= 1 and result["machine"]["jobgate"]
    assert r.store.list() == []  # dry runs open nothing
    # an open loop of AdmitStream messages on two streams, and a duration
    code, result = bench(capsys, *target, "--call", "admit-stream", "--rps", "200", "--concurrency", "2", "--duration", "0.5s", "--warmup", "0")
    assert code == 0 and result["calls"] == 100 and result["statuses"] == {"OK": 100}
    assert result["latency_from"] == "scheduled send time (open loop): queueing is included"


def test_refused_documents_and_failed_calls_are_counted_apart(tmp_path, capsys):
    config = config_for(tmp_path, max_message_bytes=64 << 10)
    r = Running(config)
    try:
        job = tmp_path / "job.json"
        job.write_text(json.dumps(sample("jobspec.valid.json")))  # 8 GPUs of my-lab's 64
        huge = tmp_path / "huge.json"
        huge.write_text(json.dumps({**sample("jobspec.valid.json"), "padding": "x" * (100 << 10)}))  # over the message limit
        args = ["--server", f"127.0.0.1:{r.port}", "--token", TOKEN, "--document", str(job), "--document", str(huge)]
        code, result = bench(capsys, *args, "--open-records", "--requests", "20", "--concurrency", "1", "--warmup", "0")
        assert code == 1  # some calls failed
        assert result["statuses"] == {"OK": 10, "RESOURCE_EXHAUSTED": 10}
        assert result["verdicts"] == {"admitted": 8, "refused": 2}
        assert result["refusing_rules"] == {"forge.quota.project": 2}
        ((message, count),) = result["errors"].items()
        assert count == 10 and message.startswith("RESOURCE_EXHAUSTED: ")
        assert len(r.store.list()) == 8 and result["parameters"]["open_records"] is True
        capsys.readouterr()
        main(["bench", *args, "--requests", "4", "--concurrency", "1", "--warmup", "0"])
        text = capsys.readouterr().out
        assert "statuses    OK 2  RESOURCE_EXHAUSTED 2" in text and "refused 2" in text and "refused by forge.quota.project: 2" in text
        assert "(dry run)" in text
    finally:
        r.close()


class SlowHealth(health.HealthServicer):
    """One check at a time, each taking 20 ms: 50 calls/s at most."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def Check(self, request, context):  # noqa: N802
        with self.lock:
            time.sleep(0.02)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def test_an_open_loop_shows_the_queue_a_closed_loop_hides(capsys):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    health_pb2_grpc.add_HealthServicer_to_server(SlowHealth(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        target = ["--server", f"127.0.0.1:{port}", "--call", "empty", "--warmup", "0"]
        code, closed = bench(capsys, *target, "--requests", "20", "--concurrency", "1")
        assert code == 0 and 15_000 <= closed["latency_us"]["p50"] <= 60_000
        # twice what the server can do, for 0.6 s: every call due waits for those before it
        code, opened = bench(capsys, *target, "--rps", "100", "--duration", "0.6s")
        assert code == 0 and opened["calls"] == 60
        assert opened["latency_us"]["p90"] > 5 * closed["latency_us"]["p50"]
        assert opened["latency_us"]["max"] >= 400_000  # the last call waited for ~30 before it
        assert opened["calls_per_s"] < 60
    finally:
        server.stop(None)


class PeerHealth(health.HealthServicer):
    """Counts the checks that arrive on each connection (the caller's address and port)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def Check(self, request, context):  # noqa: N802
        with self.lock:
            self.calls[context.peer()] = self.calls.get(context.peer(), 0) + 1
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


@contextlib.contextmanager
def peer_health():
    """A bare health server counting checks per connection, and bench's options to
    call it."""
    servicer = PeerHealth()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, ["--server", f"127.0.0.1:{port}", "--call", "empty", "--warmup", "0"]
    finally:
        server.stop(None)


def test_calls_take_the_connections_in_turn(capsys):
    """`serve --workers N` gives a connection, with every call on it, to one worker:
    bench opens 8 connections unless told, and every call takes the next one, in a
    closed loop with fewer calls in flight than connections and in an open loop alike."""
    with peer_health() as (servicer, target):
        for loop, connections in ((["--requests", "80", "--concurrency", "4"], 8), (["--rps", "400", "--duration", "0.2s"], 8), (["--requests", "80", "--connections", "5"], 5)):
            servicer.calls.clear()
            code, result = bench(capsys, *target, *loop, *(["--connections", str(connections)] if connections != 8 else []))
            assert code == 0 and result["calls"] == 80 and result["parameters"]["connections"] == connections
            # the first call, alone on a connection of its own, and 80 in turn on the others
            assert sorted(servicer.calls.values()) == [1] + [80 // connections] * connections, loop


def test_a_call_let_through_as_warm_up_is_never_measured(served, capsys, monkeypatch):
    """Whether a call is measured and where its latency starts are read at one instant:
    on a busy machine the clock moves between two readings, and a warm-up call counted
    as measured made `--requests N` measure N + 1."""
    from jobgate.bench import load

    class Stepping:
        """A clock that moves one second at every reading."""

        def __init__(self) -> None:
            self.now = time.monotonic()

        def monotonic(self) -> float:
            self.now += 1.0
            return self.now

    _r, target = served
    monkeypatch.setattr(load, "time", Stepping())
    for call in ("admit", "admit-stream"):
        code, result = bench(capsys, *target, "--call", call, "--requests", "3", "--concurrency", "1", "--warmup", "2.5")
        assert code == 0 and result["calls"] == 3 and result["statuses"] == {"OK": 3}, call


def test_text_and_csv_say_what_ran(served, capsys):
    _r, target = served
    capsys.readouterr()
    assert main(["bench", *target, "--requests", "30", "--rps", "300", "--warmup", "0"]) == 0
    text = capsys.readouterr().out
    assert "open loop at 300 calls/s" in text and "scheduled send time (open loop): queueing is included" in text
    assert "machine" in text and "p99.9" in text and "statuses    OK 30" in text
    assert main(["bench", *target, "--requests", "30", "--warmup", "0", "--format", "csv"]) == 0
    (row,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert row["call"] == "admit" and row["loop"] == "closed" and row["calls"] == "30" and row["ok"] == "30" and float(row["p99_us"]) > 0


def test_two_saved_runs_are_compared_with_intervals(served, capsys, tmp_path):
    _r, target = served
    runs = []
    for name in ("a.json", "b.json"):
        code, result = bench(capsys, *target, "--call", "empty", "--duration", "2s", "--warmup", "0.2")
        assert code == 0
        (tmp_path / name).write_text(json.dumps(result))
        runs.append(str(tmp_path / name))
    capsys.readouterr()
    assert main(["bench", "compare", *runs, "--format", "json"]) == 0
    rows = {r["figure"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"calls/s", "p50 latency", "p90 latency", "p99 latency", "p99.9 latency", "max latency"}  # no documents in the empty RPC
    for r in rows.values():
        assert r["low"] <= r["ratio"] <= r["high"] and r["verdict"] in ("within noise", "better", "worse")
        assert r["ratio"] == pytest.approx(r["b"] / r["a"])
    assert main(["bench", "compare", *runs]) == 0
    assert "95% interval" in capsys.readouterr().out
    (tmp_path / "junk.json").write_text("[1, 2]")
    assert main(["bench", "compare", runs[0], str(tmp_path / "junk.json")]) == 2
    assert "not a saved run" in capsys.readouterr().err
    broken = json.loads((tmp_path / "a.json").read_text())
    broken["timeline"][0]["p99"] = "fast"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert main(["bench", "compare", runs[0], str(tmp_path / "broken.json")]) == 2
    err = capsys.readouterr().err
    assert "broken.json: timeline[0] is not a second of a saved run" in err and "Traceback" not in err


def test_the_plot_is_drawn_and_checked_before_any_load(served, capsys, tmp_path, monkeypatch):
    _r, target = served
    png = tmp_path / "latency.png"
    assert main(["bench", *target, "--requests", "50", "--warmup", "0", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    capsys.readouterr()
    started = time.monotonic()
    assert main(["bench", "--server", f"127.0.0.1:{free_port()}", "--requests", "5", "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib: pip install 'jobgate[plot]'" in err and "UNAVAILABLE" not in err
    assert time.monotonic() - started < 2


def test_bad_options_and_an_unreachable_server_are_exit_2(capsys):
    for args in (["--requests", "0"], ["--rps", "-1"], ["--duration", "soon"], ["--rps", "10", "--concurrency", "3"], ["--concurrency", "2", "--procs", "3"]):
        with pytest.raises(SystemExit) if args[0] == "--duration" else _no_raise():
            assert main(["bench", *args]) == 2
    capsys.readouterr()
    assert main(["bench", "--server", f"127.0.0.1:{free_port()}", "--requests", "5", "--timeout", "2"]) == 2
    assert "UNAVAILABLE" in capsys.readouterr().err


class _no_raise:  # noqa: N801 - a context manager that expects nothing
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_several_processes_share_the_load(served, capsys):
    _r, target = served
    code, result = bench(capsys, *target, "--requests", "60", "--procs", "2", "--connections", "2", "--warmup", "0.2")
    assert code == 0 and result["calls"] == 60 and result["statuses"] == {"OK": 60}
    assert result["parameters"]["procs"] == 2 and result["parameters"]["connections"] == 2


def test_anonymous_server_needs_no_token(tmp_path, capsys):
    r = Running(config_for(tmp_path, allow_anonymous=True).model_copy(update={"server": Server(allow_anonymous=True)}))
    try:
        code, result = bench(capsys, "--server", f"127.0.0.1:{r.port}", "--requests", "10", "--warmup", "0")
        assert code == 0 and result["calls"] == 10
    finally:
        r.close()


# ---- what a call sends: metadata and a request given as proto JSON


def test_metadata_reaches_the_server(tmp_path, capsys, monkeypatch):
    """-H, --metadata and --metadata-file are sent with every call, the probe's too: the
    token as an `authorization` header stands for --token, the request id is the one
    the server logs; the saved run keeps a secret only as a digest."""
    monkeypatch.delenv("JOBGATE_TOKEN", raising=False)
    stream = Collected()
    r = Running(config_for(tmp_path), log_stream=stream)
    try:
        target = ["--server", f"127.0.0.1:{r.port}", "--requests", "20", "--concurrency", "2", "--warmup", "0"]
        (tmp_path / "md.json").write_text(json.dumps({"x-team": ["ml", "infra"]}))
        code, result = bench(capsys, *target, "-H", f"Authorization: Bearer {TOKEN}", "-H", "x-request-id:bench-7", "--metadata", '{"x-client": "ci"}', "-M", str(tmp_path / "md.json"))
        assert code == 0 and result["statuses"] == {"OK": 20}
        digest = hashlib.sha256(f"Bearer {TOKEN}".encode()).hexdigest()[:12]
        assert result["parameters"]["metadata"] == [["x-team", "ml"], ["x-team", "infra"], ["x-client", "ci"], ["authorization", f"<redacted sha256:{digest}>"], ["x-request-id", "bench-7"]]
        capsys.readouterr()
        assert main(["bench", *target, "-H", f"authorization: Bearer {TOKEN}", "-H", "x-request-id: bench-8"]) == 0
        assert "  metadata    authorization: <redacted sha256:" in capsys.readouterr().out
        # a wrong token given as a header is refused at the probe, before any load
        assert main(["bench", *target, "-H", "authorization: Bearer not-the-token"]) == 2
        assert "UNAUTHENTICATED" in capsys.readouterr().err
    finally:
        r.close()
    logged = [e for e in stream.lines() if e.get("rpc") == "Admit"]
    assert len(logged) == 1 + 20 + 1 + 20 + 1  # each run's probe, then its calls
    assert [e["request_id"] for e in logged[:21]] == ["bench-7"] * 21 and [e["request_id"] for e in logged[21:42]] == ["bench-8"] * 21
    assert {e["account"] for e in logged[:42]} == {"alice"} and logged[42]["status"] == "UNAUTHENTICATED"


def test_bad_metadata_is_exit_2_before_any_load(served, capsys):
    _r, target = served
    for args, said in (
        (["-H", "no colon"], "give KEY: VALUE"),
        (["-H", "Bad Key: 1"], "a key is lowercase letters"),
        (["-H", "grpc-timeout: 1S"], "grpc-* keys are gRPC's own"),
        (["-H", "x-id: caf\u00e9"], "printable ASCII"),
        (["-H", "x-trace-bin: not base64!"], "a -bin key takes a base64 value"),
        (["--metadata", '["x"]'], "metadata is a JSON object of strings"),
        (["--metadata", '{"x-n": 1}'], "x-n: a metadata value is a string"),
        (["--metadata", "{"], "--metadata: not JSON"),
    ):
        capsys.readouterr()
        assert main(["bench", *target, "--requests", "5", *args]) == 2, args
        assert said in capsys.readouterr().err, args


def test_a_request_is_given_as_proto_json(served, capsys, tmp_path):
    """--data is parsed into the call's request message: a typed JobSpec, or raw bytes
    in base64; an array is cycled; dry_run follows --dry-run/--open-records."""
    r, target = served
    valid, rejected = sample("jobspec.valid.json"), sample("jobspec.rejected.json")
    typed = {"document": {"jobspec": valid}}
    raw = {"document": {"raw": base64.b64encode(json.dumps(rejected).encode()).decode()}}
    code, result = bench(capsys, *target, "--data", json.dumps([typed, raw]), "--requests", "20", "--concurrency", "2", "--warmup", "0")
    assert code == 0 and result["statuses"] == {"OK": 20}
    assert result["verdicts"] == {"admitted": 10, "refused": 10}
    assert {rule: result["refusing_rules"][rule] for rule in ("forge.name", "forge.data.host_path", "forge.quota.job")} == {"forge.name": 10, "forge.data.host_path": 10, "forge.quota.job": 10}
    request = result["parameters"]["request"]
    assert request["from"] == "data" and request["messages"] == 2 and request["sha256"].startswith("sha256:")
    assert result["parameters"]["documents"] is None
    (tmp_path / "one.json").write_text(json.dumps(typed))
    code, again = bench(capsys, *target, "-D", str(tmp_path / "one.json"), "--requests", "10", "--warmup", "0")
    assert code == 0 and again["verdicts"] == {"admitted": 10, "refused": 0} and again["parameters"]["request"]["messages"] == 1
    assert again["parameters"]["request"]["sha256"] != request["sha256"]
    code, batch = bench(capsys, *target, "--call", "admit-batch", "--data", json.dumps({"documents": [typed["document"], raw["document"], raw["document"]]}), "--requests", "4", "--warmup", "0")
    assert code == 0 and batch["documents"] == 12 and batch["verdicts"] == {"admitted": 4, "refused": 8}
    code, health = bench(capsys, *target, "--call", "empty", "--data", '{"service": ""}', "--requests", "5", "--warmup", "0")
    assert code == 0 and health["statuses"] == {"OK": 5} and health["documents"] == 0
    assert r.store.list() == []  # dry runs, though the JSON said nothing of dry_run
    for args, said in (
        (["--data", json.dumps({**typed, "dry_run": False})], "sets dry_run to false, but the run was asked for dry runs: drop it from the JSON or give --open-records"),
        (["--data", json.dumps({"documnet": {}})], "--data: not a jobgate.v1.AdmitRequest"),
        (["--data", "[]"], "an empty array"),
        (["--data", "[1]"], "--data[0]: a request is a JSON object (jobgate.v1.AdmitRequest)"),
        (["--data", "{"], "--data: not JSON"),
        (["--data", json.dumps(typed), "--document", str(tmp_path / "one.json")], "--document and --data: the request is one or the other"),
        (["-D", str(tmp_path / "missing.json")], "--data-file"),
    ):
        capsys.readouterr()
        assert main(["bench", *target, "--requests", "5", *args]) == 2, args
        assert said in capsys.readouterr().err, args


# ---- ramps


def step_figures(result: dict) -> list[tuple]:
    return [(s["step"], s["rps"], s["from_s"], s["seconds"], s["calls"], s["ok"], s["errors"], s["calls_per_s"]) for s in result["steps"]]


def test_a_ramp_is_reported_per_step(capsys):
    """ghz's step schedule: from --rps, --load-step more every --load-step-duration,
    held at --load-end; with no amount given, every step runs once. Each call belongs
    to the step it was due in."""
    with peer_health() as (servicer, target):
        code, result = bench(capsys, *target, "--rps", "100", "--load-step", "100", "--load-end", "300", "--load-step-duration", "0.5s")
        assert code == 0 and result["calls"] == 300 and result["parameters"]["duration"] == 1.5
        assert result["parameters"]["ramp"] == {"start": 100.0, "step": 100.0, "end": 300.0, "step_duration": 0.5}
        assert step_figures(result) == [(1, 100.0, 0.0, 0.5, 50, 50, 0, 100.0), (2, 200.0, 0.5, 0.5, 100, 100, 0, 200.0), (3, 300.0, 1.0, 0.5, 150, 150, 0, 300.0)]
        for s in result["steps"]:
            assert 0 < s["p50"] <= s["p90"] <= s["p95"] <= s["p99"] <= s["p99.9"] <= s["max"] and "mean" not in s
        assert result["latency_from"] == "scheduled send time (open loop): queueing is included"
        # ghz's spelling, falling, from two processes (the schedule shared between them)
        code, falling = bench(capsys, *target, "--load-schedule", "step", "--load-start", "300", "--load-step", "-100", "--load-end", "100", "--load-step-duration", "0.5s", "--procs", "2")
        assert code == 0 and step_figures(falling) == [(1, 300.0, 0.0, 0.5, 150, 150, 0, 300.0), (2, 200.0, 0.5, 0.5, 100, 100, 0, 200.0), (3, 100.0, 1.0, 0.5, 50, 50, 0, 100.0)]
        # held at its end past the last step; a count that ends the run mid-step
        code, held = bench(capsys, *target, "--rps", "100", "--load-step", "100", "--load-end", "200", "--load-step-duration", "0.25s", "--duration", "1s")
        assert code == 0 and step_figures(held) == [(1, 100.0, 0.0, 0.25, 25, 25, 0, 100.0), (2, 200.0, 0.25, 0.75, 150, 150, 0, 200.0)]
        code, counted = bench(capsys, *target, "--rps", "200", "--load-step", "200", "--load-step-duration", "0.25s", "--requests", "150")
        assert code == 0 and [(s["step"], s["rps"], s["calls"]) for s in counted["steps"]] == [(1, 200.0, 50), (2, 400.0, 100)]
        capsys.readouterr()
        assert main(["bench", *target, "--rps", "100", "--load-step", "100", "--load-end", "200", "--load-step-duration", "0.25s"]) == 0
        text = capsys.readouterr().out
        assert "open loop from 100 calls/s, +100 every 0.25 s up to 200" in text
        assert "    step 1          100       0       25     100.0       0   " in text and "    step 2          200    0.25       50     200.0       0   " in text
        assert main(["bench", *target, "--rps", "100", "--load-step", "100", "--load-end", "200", "--load-step-duration", "0.25s", "--format", "csv"]) == 0
        (row,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        assert (row["loop"], row["rps"], row["load_step"], row["load_end"], row["load_step_duration"], row["calls"]) == ("ramp", "100.0", "100.0", "200.0", "0.25", "75")


def test_a_ramp_asked_wrongly_is_exit_2(capsys):
    for args, said in (
        (["--rps", "100", "--load-step", "100"], "a ramp needs its start (--rps or --load-start), --load-step and --load-step-duration"),
        (["--load-step-duration", "1s"], "--load-step-duration shapes a ramp: give --load-step"),
        (["--rps", "100", "--load-step", "0", "--load-step-duration", "1s"], "--load-step 0 is a constant load"),
        (["--rps", "100", "--load-step", "10", "--load-end", "50", "--load-step-duration", "1s"], "--load-end 50 is not reached from 100 by steps of +10"),
        (["--rps", "100", "--load-step", "-10", "--load-step-duration", "1s"], "a falling ramp needs --load-end"),
        (["--rps", "100", "--load-start", "50", "--load-step", "10", "--load-step-duration", "1s"], "--rps and --load-start both name the rate a ramp starts at"),
        (["--load-schedule", "step", "--load-step", "10", "--load-step-duration", "1s"], "a ramp needs its start"),
    ):
        capsys.readouterr()
        assert main(["bench", "--server", f"127.0.0.1:{free_port()}", *args]) == 2, args
        assert said in capsys.readouterr().err, args


# ---- compare: the same calls, or a refusal


def test_compare_refuses_runs_that_measured_different_calls(served, capsys, tmp_path):
    _r, target = served
    runs = {}
    for name, extra in (
        ("a", ["--concurrency", "2"]),
        ("same", ["--concurrency", "2", "--requests", "60"]),
        ("wider", ["--concurrency", "4"]),
        ("tagged", ["--concurrency", "2", "-H", "x-request-id: other"]),
        ("batch", ["--concurrency", "2", "--call", "admit-batch", "--batch", "2"]),
    ):
        code, result = bench(capsys, *target, "--requests", "40", "--warmup", "0", *extra)
        assert code == 0, name
        runs[name] = tmp_path / f"{name}.json"
        runs[name].write_text(json.dumps(result))
    capsys.readouterr()
    assert main(["bench", "compare", str(runs["a"]), str(runs["same"])]) == 0  # a longer run of the same calls
    for other, said in (
        ("wider", ["concurrency: 2 (A) vs 4 (B)"]),
        ("tagged", ["metadata: authorization: <redacted sha256:", " (A) vs authorization: <redacted sha256:", ", x-request-id: other (B)"]),
        ("batch", ["method: /jobgate.v1.AdmissionService/Admit (A) vs /jobgate.v1.AdmissionService/AdmitBatch (B)", "call: admit (A) vs admit-batch (B)", "request: 2 message(s) from documents, sha256:", "documents per AdmitBatch: 1 (A) vs 2 (B)"]),
    ):
        capsys.readouterr()
        assert main(["bench", "compare", str(runs["a"]), str(runs[other])]) == 2, other
        err = capsys.readouterr().err
        assert f"{runs['a']} and {runs[other]} measured different calls:" in err and "give --allow-different" in err, other
        for line in said:
            assert line in err, (other, line)
        assert main(["bench", "compare", str(runs["a"]), str(runs[other]), "--allow-different"]) == 0, other
        out, err = capsys.readouterr()
        assert err.startswith(f"jobgate: warning: {runs['a']} and {runs[other]} measured different calls:") and "95% interval" in out
    # an open loop against a closed one
    code, opened = bench(capsys, *target, "--rps", "200", "--requests", "40", "--warmup", "0")
    (tmp_path / "open.json").write_text(json.dumps(opened))
    capsys.readouterr()
    assert main(["bench", "compare", str(runs["a"]), str(tmp_path / "open.json")]) == 2
    assert "loop: closed (A) vs open (B)" in capsys.readouterr().err


def test_a_failure_while_recording_a_call_ends_the_run(served, capsys, monkeypatch):
    """Calls end on gRPC's own threads, which log an exception and carry on: one raised
    while a call was recorded stops the run with it, in the closed and the open loop,
    instead of leaving the run waiting for a call that is never sent."""
    from jobgate.bench import results

    def broken(*_args) -> None:
        raise RuntimeError("recorder broke")

    _r, target = served
    monkeypatch.setattr(results.Recorder, "answered", broken)
    for loop in (["--requests", "50", "--concurrency", "2"], ["--rps", "200", "--duration", "0.3s"]):
        capsys.readouterr()
        assert main(["bench", *target, *loop, "--warmup", "0"]) != 0
        assert "RuntimeError: recorder broke" in capsys.readouterr().err, loop
