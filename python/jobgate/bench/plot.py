"""`--plot FILE.png`: the latency distribution on a log scale with the percentiles
marked, and latency over time (per-second p50, p99 and max). matplotlib is an extra
(`pip install 'jobgate[plot]'`); `require()` is called before a run starts, so a
missing matplotlib never throws a finished run away."""

from __future__ import annotations

from typing import Any


class PlotUnavailable(Exception):
    pass


def require() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'jobgate[plot]'") from None


def draw(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    from jobgate.bench.results import describe, latency_histogram

    h = latency_histogram(result)
    values, counts = [], []
    for item in h.get_recorded_iterator():
        values.append(item.value_iterated_to / 1000)
        counts.append(item.count_at_value_iterated_to)
    fig, (dist, over) = plt.subplots(1, 2, figsize=(13, 4.8))
    dist.bar(values, counts, width=[v * 0.02 for v in values], align="edge", color="#4c72b0")
    dist.set_xscale("log")
    dist.set_xlabel("latency (ms, log scale)")
    dist.set_ylabel("calls")
    marked = [(name, us) for name, us in result["latency_us"].items() if name != "mean"]
    for n, (name, us) in enumerate(marked):
        dist.axvline(us / 1000, color="#c44e52", linestyle=":", linewidth=1)
        height = dist.get_ylim()[1] * (0.97 - 0.12 * (n % 3))  # staggered: close percentiles stay legible
        dist.annotate(name, (us / 1000, height), rotation=90, fontsize=8, va="top", ha="right")
    dist.set_title(f"latency from {result['latency_from'].split(' (')[0]}")
    seconds = [s["second"] for s in result["timeline"]]
    for key, style in (("p50", "-"), ("p99", "--"), ("max", ":")):
        over.plot(seconds, [s[key] / 1000 for s in result["timeline"]], style, marker="o" if len(seconds) < 30 else None, markersize=3, label=key)
    over.set_yscale("log")
    over.yaxis.set_major_formatter(ScalarFormatter())
    dist.xaxis.set_major_formatter(ScalarFormatter())
    over.set_xlabel("second of the run")
    over.set_ylabel("latency (ms, log scale)")
    over.legend()
    over.set_title(f"{result['calls_per_s']:,.0f} calls/s")
    fig.suptitle(describe(result["parameters"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
