"""`jobgate bench` against real servers: every call shape, open and closed loops,
refusals and failures counted apart, saved runs compared, the plot checked before
any load is sent."""

from __future__ import annotations

import csv
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
from tests.server.helpers import TOKEN, Running, config_for


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


def test_calls_take_the_connections_in_turn(capsys):
    """`serve --workers N` gives a connection, with every call on it, to one worker:
    bench opens 8 connections unless told, and every call takes the next one, in a
    closed loop with fewer calls in flight than connections and in an open loop alike."""
    servicer = PeerHealth()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        target = ["--server", f"127.0.0.1:{port}", "--call", "empty", "--warmup", "0"]
        for loop, connections in ((["--requests", "80", "--concurrency", "4"], 8), (["--rps", "400", "--duration", "0.2s"], 8), (["--requests", "80", "--connections", "5"], 5)):
            servicer.calls.clear()
            code, result = bench(capsys, *target, *loop, *(["--connections", str(connections)] if connections != 8 else []))
            assert code == 0 and result["calls"] == 80 and result["parameters"]["connections"] == connections
            # the first call, alone on a connection of its own, and 80 in turn on the others
            assert sorted(servicer.calls.values()) == [1] + [80 // connections] * connections, loop
    finally:
        server.stop(None)


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
