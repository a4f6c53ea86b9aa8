"""Two saved runs side by side: the ratio B/A of every figure, with a bootstrap 95%
interval over the runs' per-second samples, so that a change can be told from the
noise of a shared machine.

Each figure is a statistic of the per-second samples (throughput: their mean;
a latency percentile: the median of the per-second percentiles). Resampling the
seconds of each run with replacement and taking the ratio each time gives the
interval; a ratio whose interval holds 1 is within the noise.

Two runs are compared only when they measured the same calls: the same method,
request bodies, metadata and load (loop, calls in flight, rate or ramp, connections,
processes). Otherwise `differences` names what differs and the command refuses,
unless told to compare anyway. How long each ran, the server's address and the
deadline may differ: that is what comparing a change usually needs. A figure a run
saved before it was kept (an older run) is not checked.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

RESAMPLES = 2000
FIGURES = (
    ("calls/s", "calls", "mean", True),
    ("documents/s", "documents", "mean", True),
    ("p50 latency", "p50", "median", False),
    ("p90 latency", "p90", "median", False),
    ("p99 latency", "p99", "median", False),
    ("p99.9 latency", "p99.9", "median", False),
    ("max latency", "max", "max", False),
)


# What makes two runs measure the same calls: (saved parameter, how it is named).
SAME_CALLS = (
    ("method", "method"),
    ("call", "call"),
    ("request", "request"),
    ("metadata", "metadata"),
    ("batch", "documents per AdmitBatch"),
    ("open_records", "open records"),
    ("loop", "loop"),
    ("concurrency", "concurrency"),
    ("rps", "rps"),
    ("ramp", "ramp"),
    ("connections", "connections"),
    ("procs", "processes"),
)


class CompareError(Exception):
    """A run that cannot be compared; the message says why."""


def load(path: str) -> dict[str, Any]:
    try:
        result = json.loads(Path(path).read_text())
    except OSError as e:
        raise CompareError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise CompareError(f"{path}: not a saved run (jobgate bench --format json): {e}") from None
    if not isinstance(result, dict) or not isinstance(result.get("timeline"), list) or not result["timeline"]:
        raise CompareError(f"{path}: not a saved run with a per-second timeline (jobgate bench --format json)")
    keys = {key for _, key, _, _ in FIGURES}
    for n, second in enumerate(result["timeline"]):
        if not isinstance(second, dict) or any(not isinstance(second.get(k), int | float) or isinstance(second.get(k), bool) for k in keys):
            raise CompareError(f"{path}: timeline[{n}] is not a second of a saved run: it needs numbers for {', '.join(sorted(keys))}")
    return result


def _loop(p: dict[str, Any]) -> str:
    return "ramp" if p.get("ramp") else "open" if p.get("rps") else "closed"


def _shown(key: str, value: Any) -> str:
    if key == "request" and isinstance(value, dict):
        return f"{value.get('messages')} message(s) from {value.get('from')}, {value.get('sha256')}"
    if key == "metadata" and isinstance(value, list):
        return ", ".join(f"{k}: {v}" for k, v in value) or "none"
    if key == "ramp" and isinstance(value, dict):
        return f"from {value['start']:g} calls/s, {value['step']:+g} every {value['step_duration']:g} s" + (f" to {value['end']:g}" if value.get("end") is not None else "")
    return "none" if value is None else str(value)


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What makes the two runs measure different calls, one line each; [] when
    they measured the same."""
    pa, pb = dict(a.get("parameters") or {}), dict(b.get("parameters") or {})
    pa["loop"], pb["loop"] = _loop(pa), _loop(pb)
    if pa["loop"] == "closed" and pb["loop"] == "closed":
        pa.pop("rps", None), pb.pop("rps", None)
    elif "admit-stream" not in (pa.get("call"), pb.get("call")):
        pa.pop("concurrency", None), pb.pop("concurrency", None)  # an open loop of unary calls has no bound in flight
    if pa.get("ramp") or pb.get("ramp"):
        pa.pop("rps", None), pb.pop("rps", None)  # a ramp's rate is its start: in the ramp
    out = []
    for key, name in SAME_CALLS:
        if key in pa and key in pb and pa[key] != pb[key]:
            out.append(f"{name}: {_shown(key, pa[key])} (A) vs {_shown(key, pb[key])} (B)")
    return out


def samples(result: dict[str, Any], key: str, how: str) -> list[float]:
    """A run's per-second values of `key`; counts become rates over the second's span,
    and a last second shorter than a quarter is left out when others remain."""
    seconds = result["timeline"]
    kept = [s for s in seconds if s.get("span", 1.0) >= 0.25] or seconds
    if how == "mean":
        return [float(s[key]) / s.get("span", 1.0) for s in kept]
    return [float(s[key]) for s in kept]


def _stat(how: str, values: list[float]) -> float:
    return {"mean": statistics.fmean, "median": statistics.median, "max": max}[how](values)


def compare(a: dict[str, Any], b: dict[str, Any], seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for name, key, how, higher_is_better in FIGURES:
        xs, ys = samples(a, key, how), samples(b, key, how)
        if not any(xs) and not any(ys):
            continue  # a figure neither run has (documents of the empty RPC)
        base, other = _stat(how, xs), _stat(how, ys)
        ratio = other / base if base else float("nan")
        ratios = []
        for _ in range(RESAMPLES):
            rx = _stat(how, rng.choices(xs, k=len(xs)))
            ry = _stat(how, rng.choices(ys, k=len(ys)))
            if rx:
                ratios.append(ry / rx)
        ratios.sort()
        low = ratios[int(0.025 * (len(ratios) - 1))] if ratios else float("nan")
        high = ratios[int(0.975 * (len(ratios) - 1))] if ratios else float("nan")
        if low <= 1 <= high:
            verdict = "within noise"
        else:
            verdict = "better" if (ratio > 1) == higher_is_better else "worse"
        rows.append({"figure": name, "a": base, "b": other, "ratio": ratio, "low": low, "high": high, "verdict": verdict})
    return rows


def text(rows: list[dict[str, Any]], a_path: str, b_path: str) -> str:
    lines = [f"B/A with bootstrap 95% intervals over per-second samples (A = {a_path}, B = {b_path})", f"  {'figure':<15}{'A':>14}{'B':>14}{'B/A':>9}   {'95% interval':<17} verdict"]
    for r in rows:
        unit = "" if r["figure"].endswith("/s") else " µs"
        lines.append(f"  {r['figure']:<15}{r['a']:>11,.1f}{unit or '   '}{r['b']:>11,.1f}{unit or '   '}{r['ratio']:>9.3f}   [{r['low']:.3f}, {r['high']:.3f}]{'':<2} {r['verdict']}")
    return "\n".join(lines)
