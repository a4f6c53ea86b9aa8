"""Variants of the server side by side: `jobgate serve` from several source trees (or
with several `[server]` settings) beside one bare grpcio echo, driven by h2load as
`python -m benchmarks service` drives them, rounds interleaved (the order flips every
other round), ratios the medians of per-round ratios. How a change to the service is
weighed before it lands: copy `python/` aside, change the copy, and put both here.

    python -m benchmarks.variants [--rounds 9] [--calls 2000] [--methods Record,...]
        NAME=TREE[;SERVER-LINE...][|STORE-LINE] ...

TREE is put first on each server's PYTHONPATH (a copy of `python/`, the core's module
built in it, or `python` itself); SERVER-LINEs are lines of its `[server]` table,
STORE-LINE the body of its `[store]` table (default: SQLite in a directory of its
own). Methods: `Admit` (a dry run of the 2 KB JobSpec), `Record` (the same admitted:
each call opens a record), `Check` (health), `AdmitBatch` (a dry run of 256 of those
JobSpecs, one call at a time, a tenth as many calls). For each method: every server's calls/s
against the echo's, its CPU and context switches per call, and each server's calls/s
against the first's.

    python -m benchmarks.variants --methods Admit,Record base=python "one=python;threads = 1"
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import documents
from benchmarks.service import (
    ADMIT,
    ADMIT_BATCH,
    CHECK,
    H2LOAD_MISSING,
    INFLIGHT,
    Run,
    answer,
    batch_request,
    frame,
    h2load,
    per_round,
    start,
    start_echo,
    stop_all,
    unary_requests,
)

WARM_CALLS = 300
PATHS = {"Admit": ADMIT, "Record": ADMIT, "Check": CHECK, "AdmitBatch": ADMIT_BATCH}
# AdmitBatch: one call at a time (as `benchmarks service` measures it), and a tenth as
# many calls: each is 256 of the others.
BATCH_INFLIGHT, BATCH_SHARE = 1, 10


def calls_of(m: str, n: int) -> int:
    """Calls of method `m` a round, `n` being the unary methods'."""
    return max(1, n // BATCH_SHARE) if m == "AdmitBatch" else n


def inflight_of(m: str) -> int:
    return BATCH_INFLIGHT if m == "AdmitBatch" else INFLIGHT


def requests() -> dict[str, bytes]:
    doc = documents.jobspec()
    dry, real, health = unary_requests(doc)
    return {"Admit": dry, "Record": real, "Check": health, "AdmitBatch": batch_request(doc)}


def methods(text: str) -> list[str]:
    named = [m for m in text.split(",") if m]
    unknown = [m for m in named if m not in PATHS]
    if unknown or not named:
        raise argparse.ArgumentTypeError(f"methods are {', '.join(PATHS)}, comma-separated; not {text!r}")
    return named


def variant(spec: str) -> tuple[str, str, str, str]:
    """NAME=TREE[;SERVER-LINE...][|STORE-LINE] as (name, tree, server lines, store body)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name:
        raise SystemExit(f"variants: {spec!r} is not NAME=TREE[;SERVER-LINE...][|STORE-LINE]")
    rest, _, store = rest.partition("|")
    tree, *lines = rest.split(";")
    if not Path(tree, "jobgate").is_dir():
        raise SystemExit(f"variants: {tree!r} holds no jobgate package")
    return name, str(Path(tree).resolve()), "\n".join(lines), store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000, help="calls per server per round")
    parser.add_argument("--methods", type=methods, default=["Record"], help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("variants", nargs="+", metavar="NAME=TREE[;SERVER-LINE...][|STORE-LINE]")
    args = parser.parse_args(argv)
    if shutil.which("h2load") is None:
        print(f"variants: {H2LOAD_MISSING}", file=sys.stderr)
        return 2
    specs = [variant(spec) for spec in args.variants]
    names = [name for name, *_ in specs]
    if len(set(names)) != len(names):
        raise SystemExit("variants: two variants share a name")
    messages = requests()
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    inherited = os.environ.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="jobgate-variants-") as t:
        tmp = Path(t)
        bodies = {m: tmp / f"{m}.body" for m in messages}
        for m, body in bodies.items():
            body.write_bytes(frame(messages[m]))
        try:
            for name, tree, lines, store in specs:
                os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (tree, inherited)))
                procs[name], ports[name] = start(
                    1, tmp, name=name, server='request_log = "info"\n' + lines, store=store
                )
            os.environ["PYTHONPATH"] = inherited
            first = ports[names[0]]
            # The echo answers what the first variant answers (a record's response is the
            # same size for every job id).
            procs["echo"], echo = start_echo(tmp, {m: answer(first, PATHS[m], messages[m]) for m in args.methods})

            def measure(side: str, m: str, n: int) -> Run:
                port, path = (echo, f"/echo.Echo/{m}") if side == "echo" else (ports[side], PATHS[m])
                return h2load(port, path, bodies[m], calls_of(m, n), procs[side].pid, inflight=inflight_of(m))

            sides = ["echo", *names]
            for m in args.methods:
                for side in sides:
                    measure(side, m, WARM_CALLS)
            runs: dict[str, dict[str, list[Run]]] = {m: {side: [] for side in sides} for m in args.methods}
            for r in range(args.rounds):
                for m in args.methods:
                    for side in sides[:: 1 if r % 2 == 0 else -1]:
                        runs[m][side].append(measure(side, m, args.calls))
        finally:
            os.environ["PYTHONPATH"] = inherited
            stop_all(procs.values(), 30)
    for m in args.methods:
        rates = {side: [run.rate for run in runs[m][side]] for side in ["echo", *names]}
        print(
            f"{m} ({args.rounds} rounds of {calls_of(m, args.calls):,} calls, h2load 1 connection, {inflight_of(m)} in flight)"
        )
        for side in ["echo", *names]:
            x = per_round(rates[side], rates["echo"])
            against_first = (
                f"   x{per_round(rates[side], rates[names[0]]):.3f} {names[0]}"
                if side not in ("echo", names[0])
                else ""
            )
            cpu = statistics.median(run.cpu_us for run in runs[m][side])
            switches = statistics.median(run.switches for run in runs[m][side])
            print(
                f"  {side:16s} {statistics.median(rates[side]):8.0f} calls/s  x{x:.3f} echo   CPU {cpu:4.0f} µs/call, {switches:4.1f} switches/call{against_first}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
