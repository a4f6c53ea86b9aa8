"""What a run measured: recorded per process, merged, summarized and rendered.

Latencies go into HDR histograms (microseconds, two significant digits: any
percentile is within 1% of the true value), one for the run and one per second of
it; the per-second ones give the timeline and the samples `compare` resamples. A
ramp keeps one more per step, each call in the step it was due in.
"""

from __future__ import annotations

import csv
import io
import os
import platform
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from hdrh.histogram import HdrHistogram

import jobgate

if TYPE_CHECKING:
    from jobgate.bench.load import Ramp

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


class Recorder:
    """One process's measurements. Calls before `measure_from` (the warm-up) are
    sent but not recorded.

    A call costs the recording little, so that the load is what is measured: its
    latency (whole microseconds) is appended to the list of the second it ended in
    (and of its ramp step), and its answer counted by its bytes, undecoded. The
    histograms are built, and each distinct answer decoded once by `reports` (bytes
    to the reports it holds), when the run is exported; answers that differ call
    after call (the job ids of admissions that open records) are folded in batches."""

    FOLD_AT = 4096  # distinct answers kept undecoded before they are folded

    def __init__(self, measure_from: float, ramp: Ramp | None = None, reports: Callable[[bytes], Iterable] | None = None) -> None:
        self.measure_from = measure_from
        self.ramp = ramp
        self.reports = reports
        self.seconds: dict[int, list[Any]] = {}  # second -> [latencies, documents]
        self.steps: dict[int, list[Any]] = {}  # step of a ramp -> [latencies, ok]
        self.answers: dict[bytes, int] = {}
        self.statuses: Counter = Counter()
        self.verdicts: Counter = Counter()
        self.rules: Counter = Counter()
        self.errors: Counter = Counter()
        self.ok = 0
        self.last = 0.0

    def _latency(self, start: float, end: float, ok: bool) -> list[Any] | None:
        if start < self.measure_from:
            return None
        us = round((end - start) * 1e6)
        s = int(end - self.measure_from)
        second = self.seconds.get(s)
        if second is None:
            second = self.seconds[s] = [array("q"), 0]
        second[0].append(us)
        if self.ramp is not None:
            k = self.ramp.index(start - self.measure_from)
            step = self.steps.get(k)
            if step is None:
                step = self.steps[k] = [array("q"), 0]
            step[0].append(us)
            step[1] += ok
        if end > self.last:
            self.last = end
        return second

    def answered(self, start: float, end: float, answer: bytes, documents: int) -> None:
        """A call that began (or was due) at `start` and got `answer`, carrying
        `documents`."""
        second = self._latency(start, end, True)
        if second is None:
            return
        second[1] += documents
        self.ok += 1
        answers = self.answers
        answers[answer] = answers.get(answer, 0) + 1
        if len(answers) > self.FOLD_AT:
            self._fold()

    def failed(self, start: float, end: float, status: str, message: str) -> None:
        """A call that began (or was due) at `start` and ended with `status`."""
        if self._latency(start, end, False) is not None:
            self.statuses[status] += 1
            self.errors[f"{status}: {message}"] += 1

    def _fold(self) -> None:
        for answer, n in self.answers.items():
            for report in self.reports(answer) if self.reports else ():
                verdict = _name(report, "verdict")
                self.verdicts[verdict] += n
                if verdict == "fail":
                    for rule in {v.rule for v in report.violations if _name(v, "severity") == "error"}:
                        self.rules[rule] += n
        self.answers.clear()

    def export(self) -> dict[str, Any]:
        """Plain values, to cross from a worker process."""
        self._fold()
        statuses = Counter({"OK": self.ok} if self.ok else {})
        statuses.update(self.statuses)
        seconds = {s: [len(lat), d, encode(_histogram(Counter(lat)))] for s, (lat, d) in self.seconds.items()}
        total: Counter = Counter()
        for lat, _ in self.seconds.values():
            total.update(lat)
        return {
            "latency": encode(_histogram(total)),
            "seconds": seconds,
            "steps": {k: [len(lat), ok, encode(_histogram(Counter(lat)))] for k, (lat, ok) in self.steps.items()},
            "statuses": dict(statuses),
            "verdicts": dict(self.verdicts),
            "rules": dict(self.rules),
            "errors": dict(self.errors),
            "calls": sum(len(lat) for lat, _ in self.seconds.values()),
            "documents": sum(d for _, d in self.seconds.values()),
            "last": self.last,
        }


def _histogram(counts: Counter) -> HdrHistogram:
    h = histogram()
    for us, n in counts.items():
        h.record_value(max(LOWEST_US, min(HIGHEST_US, us)), n)
    return h


def _name(message, field: str) -> str:
    """A verdict or severity as the CLI says it, whether the message carries it as a
    string or as an enum (`VERDICT_FAIL` -> "fail")."""
    value = getattr(message, field)
    if isinstance(value, str):
        return value
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    name = enum.values_by_number[value].name.lower()
    prefix = f"{field}_"
    return name[len(prefix) :] if name.startswith(prefix) else name


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The exports of every process as one."""
    latency = histogram()
    seconds: dict[int, list[Any]] = {}
    steps: dict[int, list[Any]] = {}
    counts = {k: Counter() for k in ("statuses", "verdicts", "rules", "errors")}
    calls = documents = sent = 0
    last = cpu = 0.0
    for part in parts:
        latency.add(decode(part["latency"]))
        for s, (c, d, h) in part["seconds"].items():
            slot = seconds.setdefault(int(s), [0, 0, histogram()])
            slot[0] += c
            slot[1] += d
            slot[2].add(decode(h))
        for k, (c, ok, h) in part.get("steps", {}).items():
            step = steps.setdefault(int(k), [0, 0, histogram()])
            step[0] += c
            step[1] += ok
            step[2].add(decode(h))
        for k, counter in counts.items():
            counter.update(part[k])
        calls += part["calls"]
        documents += part["documents"]
        last = max(last, part["last"])
        cpu += part.get("cpu_s", 0.0)
        sent += part.get("sent", 0)
    return {"latency": latency, "seconds": seconds, "steps": steps, **counts, "calls": calls, "documents": documents, "last": last, "cpu_s": cpu, "sent": sent}


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


def step_rows(ramp: Ramp, merged: dict[str, Any], until: float) -> list[dict[str, Any]]:
    """A ramp's steps, as far as the run went (`until`, in seconds of the measured
    run): the rate asked, where the step ran, the calls due in it and how they went."""
    rows = []
    for k in sorted(merged["steps"]):
        calls, ok, h = merged["steps"][k]
        low, high = ramp.span(k)
        span = round(max(min(high, until) - low, 1e-3), 3)
        figures = {name: v for name, v in percentiles(h).items() if name != "mean"}
        rows.append({"step": k + 1, "rps": ramp.rate(k), "from_s": round(low, 3), "seconds": span, "calls": calls, "ok": ok, "errors": calls - ok, "calls_per_s": round(calls / span, 3), **figures})
    return rows


def summary(parameters: dict[str, Any], merged: dict[str, Any], elapsed: float, ramp: Ramp | None = None) -> dict[str, Any]:
    """The run as saved and rendered: its parameters, the machine, the figures, the
    per-second timeline, a ramp's steps and the latency histogram (for `compare` and
    `plot`)."""
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
        "client_cpu_us_per_call": round(merged["cpu_s"] / merged["sent"] * 1e6, 1) if merged.get("sent") else None,
        "calls_sent": merged.get("sent", 0),  # warm-up included: what the server answered
        "latency_from": "scheduled send time (open loop): queueing is included" if parameters.get("rps") else "send time (closed loop)",
        "statuses": dict(merged["statuses"].most_common()),
        "verdicts": {"admitted": verdicts.get("pass", 0), "refused": verdicts.get("fail", 0)},
        "refusing_rules": dict(merged["rules"].most_common(TOP)),
        "errors": dict(merged["errors"].most_common(TOP)),
        "timeline": timeline,
        **({"steps": step_rows(ramp, merged, parameters.get("duration") or elapsed)} if ramp is not None else {}),
        "histogram": encode(merged["latency"]),
    }


def latency_histogram(result: dict[str, Any]) -> HdrHistogram:
    """The run's latency histogram back from a saved summary."""
    return decode(result["histogram"])


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}" if us < 10_000 else f"{us / 1000:.1f}"


def describe(p: dict[str, Any]) -> str:
    shape = f"open loop at {p['rps']:g} calls/s" if p.get("rps") else f"closed loop, {p['concurrency']} in flight"
    if p.get("ramp"):
        r = p["ramp"]
        shape = f"open loop from {r['start']:g} calls/s, {r['step']:+g} every {r['step_duration']:g} s" + (f" up to {r['end']:g}" if r["end"] is not None and r["step"] > 0 else f" down to {r['end']:g}" if r["end"] is not None else "")
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
    if result.get("client_cpu_us_per_call"):
        lines.insert(4, f"  client CPU  {result['client_cpu_us_per_call']:,.0f} µs per call sent (every thread of its processes, the kernel's share included)")
    if p.get("request", {}).get("from") == "data":
        lines.insert(2, f"  request     {p['request']['messages']} message(s) from --data, {p['request']['sha256']}")
    if p.get("metadata"):
        lines.insert(2, "  metadata    " + "  ".join(f"{k}: {v}" for k, v in p["metadata"]))
    if p["call"] != "empty":
        lines.append(f"  verdicts    admitted {result['verdicts']['admitted']:,}  refused {result['verdicts']['refused']:,}")
    for rule, n in result["refusing_rules"].items():
        lines.append(f"    refused by {rule}: {n:,}")
    for message, n in result["errors"].items():
        lines.append(f"  error       {n:,} x {message}")
    if result.get("steps"):
        lines.append(f"  steps       {'rps':>9} {'from s':>7} {'calls':>8} {'calls/s':>9} {'errors':>7}   {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for st in result["steps"]:
            lines.append(f"    step {st['step']:<4} {st['rps']:>9g} {st['from_s']:>7g} {st['calls']:>8,} {st['calls_per_s']:>9,.1f} {st['errors']:>7,}   {_ms(st['p50']):>8} {_ms(st['p90']):>8} {_ms(st['p99']):>8} {_ms(st['max']):>8}")
    return "\n".join(lines)


CSV_FIELDS = ("call", "loop", "concurrency", "rps", "load_step", "load_end", "load_step_duration", "batch", "connections", "procs", "open_records", "seconds", "calls", "documents", "calls_per_s", "documents_per_s", *(f"{k}_us" for k, _ in PERCENTILES), "max_us", "mean_us", "ok", "errors", "admitted", "refused", "client_cpu_us_per_call")


def csv_text(result: dict[str, Any]) -> str:
    """One header line and one row: the run's parameters and figures (a ramp's steps
    are in the text and JSON forms)."""
    p, lat = result["parameters"], result["latency_us"]
    ramp = p.get("ramp")
    row = {
        "call": p["call"],
        "loop": "ramp" if ramp else "open" if p.get("rps") else "closed",
        "concurrency": p.get("concurrency") or "",
        "rps": p.get("rps") or "",
        "load_step": ramp["step"] if ramp else "",
        "load_end": ramp["end"] if ramp and ramp["end"] is not None else "",
        "load_step_duration": ramp["step_duration"] if ramp else "",
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
        "client_cpu_us_per_call": result.get("client_cpu_us_per_call") or "",
    }
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    return out.getvalue().rstrip("\n")
