"""What a run measured: recorded per process, merged, summarized and rendered.

Latencies go into HDR histograms (microseconds, two significant digits: any
percentile is within 1% of the true value), one for the run and one per second of
it; the per-second ones give the timeline and the samples `compare` resamples.
"""

from __future__ import annotations

import csv
import io
import os
import platform
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

import jobgate

LOWEST_US, HIGHEST_US, DIGITS = 1, 3_600_000_000, 2  # 1 µs to an hour, within 1%
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99.9", 99.9))
TOP = 10  # refusing rules and error messages listed


def histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


def encode(h: HdrHistogram) -> str:
    """The histogram as text (HdrHistogram's compressed, base64 encoding)."""
    return h.encode().decode()


def decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode())


@dataclass
class Recorder:
    """One process's measurements. Calls before `measure_from` (the warm-up) are
    sent but not recorded."""

    measure_from: float
    latency: HdrHistogram = field(default_factory=histogram)
    seconds: dict[int, list[Any]] = field(default_factory=dict)  # second -> [calls, documents, histogram]
    statuses: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    rules: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    calls: int = 0
    documents: int = 0
    last: float = 0.0

    def record(self, start: float, end: float, status: str, documents: int = 0, reports=(), message: str = "") -> None:
        """A finished call that began (or was scheduled) at `start`: its status, the
        documents it carried and, when it was answered, their reports."""
        if start < self.measure_from:
            return
        us = max(LOWEST_US, min(HIGHEST_US, round((end - start) * 1e6)))
        self.latency.record_value(us)
        second = self.seconds.get(int(end - self.measure_from))
        if second is None:
            second = self.seconds[int(end - self.measure_from)] = [0, 0, histogram()]
        second[0] += 1
        second[2].record_value(us)
        self.calls += 1
        self.last = max(self.last, end)
        self.statuses[status] += 1
        if status != "OK":
            self.errors[f"{status}: {message}"] += 1
            return
        second[1] += documents
        self.documents += documents
        for report in reports:
            self.verdicts[report.verdict] += 1
            if report.verdict == "fail":
                for rule in {v.rule for v in report.violations if v.severity == "error"}:
                    self.rules[rule] += 1

    def export(self) -> dict[str, Any]:
        """Plain values, to cross from a worker process."""
        return {
            "latency": encode(self.latency),
            "seconds": {s: [c, d, encode(h)] for s, (c, d, h) in self.seconds.items()},
            "statuses": dict(self.statuses),
            "verdicts": dict(self.verdicts),
            "rules": dict(self.rules),
            "errors": dict(self.errors),
            "calls": self.calls,
            "documents": self.documents,
            "last": self.last,
        }


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The exports of every process as one."""
    latency = histogram()
    seconds: dict[int, list[Any]] = {}
    counts = {k: Counter() for k in ("statuses", "verdicts", "rules", "errors")}
    calls = documents = 0
    last = 0.0
    for part in parts:
        latency.add(decode(part["latency"]))
        for s, (c, d, h) in part["seconds"].items():
            slot = seconds.setdefault(int(s), [0, 0, histogram()])
            slot[0] += c
            slot[1] += d
            slot[2].add(decode(h))
        for k, counter in counts.items():
            counter.update(part[k])
        calls += part["calls"]
        documents += part["documents"]
        last = max(last, part["last"])
    return {"latency": latency, "seconds": seconds, **counts, "calls": calls, "documents": documents, "last": last}


def percentiles(h: HdrHistogram) -> dict[str, float]:
    """Microseconds; zeros for an empty histogram."""
    if h.get_total_count() == 0:
        return {**{name: 0.0 for name, _ in PERCENTILES}, "max": 0.0, "mean": 0.0}
    out = {name: float(h.get_value_at_percentile(p)) for name, p in PERCENTILES}
    out["max"] = float(h.get_max_value())
    out["mean"] = float(h.get_mean_value())
    return out


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}", "python": platform.python_version(), "jobgate": jobgate.__version__}


def summary(parameters: dict[str, Any], merged: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """The run as saved and rendered: its parameters, the machine, the figures, the
    per-second timeline and the latency histogram (for `compare` and `plot`)."""
    timeline = []
    for s in sorted(merged["seconds"]):
        calls, docs, h = merged["seconds"][s]
        span = round(min(1.0, max(elapsed - s, 1e-3)), 3)  # the last second may be cut short
        timeline.append({"second": s, "span": span, "calls": calls, "documents": docs, **{k: v for k, v in percentiles(h).items() if k != "mean"}})
    verdicts = merged["verdicts"]
    return {
        "parameters": parameters,
        "machine": machine(),
        "seconds": round(elapsed, 3),
        "calls": merged["calls"],
        "documents": merged["documents"],
        "calls_per_s": merged["calls"] / elapsed if elapsed > 0 else 0.0,
        "documents_per_s": merged["documents"] / elapsed if elapsed > 0 else 0.0,
        "latency_us": percentiles(merged["latency"]),
        "latency_from": "scheduled send time (open loop): queueing is included" if parameters.get("rps") else "send time (closed loop)",
        "statuses": dict(merged["statuses"].most_common()),
        "verdicts": {"admitted": verdicts.get("pass", 0), "refused": verdicts.get("fail", 0)},
        "refusing_rules": dict(merged["rules"].most_common(TOP)),
        "errors": dict(merged["errors"].most_common(TOP)),
        "timeline": timeline,
        "histogram": encode(merged["latency"]),
    }


def latency_histogram(result: dict[str, Any]) -> HdrHistogram:
    """The run's latency histogram back from a saved summary."""
    return decode(result["histogram"])


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}" if us < 10_000 else f"{us / 1000:.1f}"


def describe(p: dict[str, Any]) -> str:
    shape = f"open loop at {p['rps']:g} calls/s" if p.get("rps") else f"closed loop, {p['concurrency']} in flight"
    what = {"admit": "Admit", "admit-batch": f"AdmitBatch of {p['batch']}", "admit-stream": "AdmitStream", "empty": "the empty RPC (health Check)"}[p["call"]]
    mode = "" if p["call"] == "empty" else (" (open records)" if p["open_records"] else " (dry run)")
    amount = f"{p['requests']:,} calls" if p.get("requests") else f"{p['duration']:g} s"
    return f"{what}{mode} against {p['server']}: {shape}, {amount} after {p['warmup']:g} s of warm-up, {p['connections']} connection(s), {p['procs']} process(es)"


def text(result: dict[str, Any]) -> str:
    p, m, lat = result["parameters"], result["machine"], result["latency_us"]
    lines = [
        f"jobgate bench: {describe(p)}",
        f"  machine     {m['cpu']}, {m['cores']} cores, {m['system']}, Python {m['python']}, jobgate {m['jobgate']}",
        f"  measured    {result['calls']:,} calls, {result['documents']:,} documents in {result['seconds']:.2f} s",
        f"  throughput  {result['calls_per_s']:,.1f} calls/s, {result['documents_per_s']:,.1f} documents/s",
        "  latency ms  " + "  ".join(f"{k} {_ms(v)}" for k, v in lat.items() if k != "mean") + f"  (mean {_ms(lat['mean'])})",
        f"              from each call's {result['latency_from']}",
        "  statuses    " + ("  ".join(f"{k} {v:,}" for k, v in result["statuses"].items()) or "none"),
    ]
    if p["call"] != "empty":
        lines.append(f"  verdicts    admitted {result['verdicts']['admitted']:,}  refused {result['verdicts']['refused']:,}")
    for rule, n in result["refusing_rules"].items():
        lines.append(f"    refused by {rule}: {n:,}")
    for message, n in result["errors"].items():
        lines.append(f"  error       {n:,} x {message}")
    return "\n".join(lines)


CSV_FIELDS = ("call", "loop", "concurrency", "rps", "batch", "connections", "procs", "open_records", "seconds", "calls", "documents", "calls_per_s", "documents_per_s", *(f"{k}_us" for k, _ in PERCENTILES), "max_us", "mean_us", "ok", "errors", "admitted", "refused")


def csv_text(result: dict[str, Any]) -> str:
    """One header line and one row: the run's parameters and figures."""
    p, lat = result["parameters"], result["latency_us"]
    row = {
        "call": p["call"],
        "loop": "open" if p.get("rps") else "closed",
        "concurrency": p.get("concurrency") or "",
        "rps": p.get("rps") or "",
        "batch": p["batch"],
        "connections": p["connections"],
        "procs": p["procs"],
        "open_records": p["open_records"],
        "seconds": result["seconds"],
        "calls": result["calls"],
        "documents": result["documents"],
        "calls_per_s": round(result["calls_per_s"], 3),
        "documents_per_s": round(result["documents_per_s"], 3),
        **{f"{k}_us": lat[k] for k, _ in PERCENTILES},
        "max_us": lat["max"],
        "mean_us": round(lat["mean"], 3),
        "ok": result["statuses"].get("OK", 0),
        "errors": result["calls"] - result["statuses"].get("OK", 0),
        "admitted": result["verdicts"]["admitted"],
        "refused": result["verdicts"]["refused"],
    }
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    return out.getvalue().rstrip("\n")
