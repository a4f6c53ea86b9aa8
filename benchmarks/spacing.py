"""`Validator.check_many` of 256 JobSpecs as a server calls it: one call, then a gap
(the transport's time for the next request), then the next. Between two calls the
core's pool threads go to sleep; on a small virtual machine waking one costs a good
part of a call. Beside every spacing, the same documents on one thread
(`threads=1`), what a caller could choose instead of the pool, measured in the same
rounds. The in-process floor of the `service` section's AdmitBatch target is the
spacing 0 (back to back); the server meets the core at a spacing of a millisecond
or more. Medians of per-call times; nothing here is a target.

    python -m benchmarks.spacing [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time

import jobgate
from benchmarks import documents, print_grouped, run_alone
from benchmarks.service import BATCH

GAPS_MS = (0.0, 0.5, 1.5, 5.0)


def timed(fn, gap_s: float, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


def run(quick: bool) -> dict:
    rounds, calls = (3, 100) if quick else (7, 200)
    validator = jobgate.Validator()
    docs = [documents.jobspec()] * BATCH
    sides = {
        "the pool and the caller (default)": lambda: validator.check_many(docs),
        "one thread (threads=1)": lambda: validator.check_many(docs, threads=1),
    }
    rows = []
    for gap in GAPS_MS:
        times: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(rounds):
            for name in list(sides)[:: 1 if r % 2 == 0 else -1]:
                times[name] += timed(sides[name], gap / 1e3, calls)
        one = statistics.median(times["one thread (threads=1)"])
        for name in sides:
            median = statistics.median(times[name])
            rows.append(
                {
                    "bench": f"check_many of {BATCH} 2 KB JobSpecs, {gap:g} ms between calls (median of {rounds} x {calls} calls)",
                    "impl": name,
                    "value": median * 1e3,
                    "unit": "ms/call",
                    "x": median / one,
                }
            )
    return {"rows": rows, "targets": []}


def print_table(result: dict) -> None:
    print_grouped(
        result["rows"],
        lambda r, _first: f"  {r['impl']:38s} {r['value']:6.3f} {r['unit']}  {r['x']:5.2f}x one thread",
        lambda bench: f"{bench}  (x = against one thread at the same spacing)",
    )


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
