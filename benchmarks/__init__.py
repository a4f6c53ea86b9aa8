"""jobgate's benchmarks: ratios against the peers, measured side by side in one run."""

from collections.abc import Callable


def print_grouped(rows: list[dict], line: Callable[[dict, dict], str], header: Callable[[str], str] = str) -> None:
    """Rows grouped under their "bench" heading; `line(row, first_row_of_group)`."""
    bench, first = None, None
    for row in rows:
        if row["bench"] != bench:
            bench, first = row["bench"], row
            print(header(bench))
        print(line(row, first))


def run_alone(run: Callable[[bool], dict], print_table: Callable[[dict], None], argv: list[str]) -> None:
    """One section run as `python -m benchmarks.NAME [--quick]`: its table and targets."""
    out = run("--quick" in argv)
    print_table(out)
    for t in out["targets"]:
        print(f"  [{'met ' if t['ok'] else 'MISS'}] {t['target']}: {t['ratio']:.2f} (goal {t['goal']})")
