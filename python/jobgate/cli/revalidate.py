"""`jobgate revalidate PATH...`: revalidate archives of documents and job packages
against the current configuration, in parallel, locally or on a Ray cluster, with the
reports written as the chunks complete (`jobgate.cli.streaming`)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from contextlib import ExitStack
from typing import Any

from jobgate import KINDS, Validator, load_config, rollout, sources
from jobgate.cli import formats, streaming
from jobgate.cli.check import add_ignore, suppressor, write_notes
from jobgate.cli.usage import EXIT_FAIL, EXIT_PASS, UsageError, named_files
from jobgate.config import Config, environment_config

ENGINES = ("local", "ray")
READS = ("auto", "driver", "workers")  # with --engine ray: where the items are read (`revalidation.run_ray`)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "revalidate",
        help="revalidate archived documents and job packages in batch",
        description=(
            "Revalidate archived documents (.json, .yaml, .yml) and job packages against the current configuration. "
            "A package is an archive (.tar, .tar.gz, .tgz, .tar.zst, .tzst, .zip) or a directory with bundle.json, "
            ".yaml or .yml at its top, holding the bundle and its supporting files. Directories are searched "
            "recursively. Items are reported in a stable order: named paths as given, each directory depth first with "
            "its entries sorted by name. Reports are written as they complete, in bounded memory whatever the "
            "archive's size. Progress (items/s, failures so far) goes to stderr on a terminal, never when CI is set."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="documents, packages, or directories holding them")
    p.add_argument("--config", metavar="FILE", help="jobgate.toml with the current catalog and deployment rules (default: document rules only)")
    p.add_argument("--kind", choices=KINDS, help="the kind of every document (default: detected from its keys)")
    p.add_argument(
        "--format",
        choices=streaming.FORMATS,
        default="text",
        help="output format (default: text); jsonl: one JSON object per item (per change with --against), its source on every line, no summary",
    )
    formats.add_fail_on(p)
    add_ignore(p)
    p.add_argument("--engine", choices=ENGINES, default="local", help="local: threads on this machine (default); ray: tasks on a Ray cluster")
    p.add_argument("--address", metavar="ADDR", help="with --engine ray: the cluster to join (host:port, ray://host:port or auto; default: start a private local Ray)")
    p.add_argument(
        "--reads",
        choices=READS,
        default="auto",
        help=(
            "with --engine ray: where the items are read. workers: each task reads its items at their paths "
            "(the cluster sees this machine's files at the same paths); driver: this process reads them and ships "
            "their bytes (no filesystem in common needed); auto (default): workers when the cluster is this machine "
            "alone, run by this user, else driver"
        ),
    )
    p.add_argument("--threads", type=int, metavar="N", help="with --engine local: worker threads (default: every core)")
    p.add_argument("--against", metavar="CANDIDATE.toml", help="judge every item under --config and under this candidate too; report only the items whose verdict or violations change")
    p.add_argument("--cache", metavar="FILE", help="a SQLite file of reports by content: items unchanged since a run with the same configuration and jobgate version are not checked again")
    p.set_defaults(run=run)


def show_progress() -> bool:
    """SPEC §6: progress only on a terminal, and never when CI is set."""
    return sys.stderr.isatty() and not os.environ.get("CI")


class Progress:
    """The bar on stderr: items done, items/s and failures so far. The total is
    counted by a second walk on a thread of its own (names only, no file read), so
    the bar fills while the run goes; until then it counts up."""

    def __init__(self, paths: list[str], shown: bool) -> None:
        self.failed = 0
        self.bar: Any = None
        self.total: int | None = None
        if not shown:
            return
        # Imported here: only a shown progress bar needs tqdm, and importing it costs
        # every command's start more than the rest of this module.
        from tqdm import tqdm

        self.bar = tqdm(unit="item", file=sys.stderr, desc="revalidating", dynamic_ncols=True)
        threading.Thread(target=self._count, args=(paths,), name="jobgate-count", daemon=True).start()

    def _count(self, paths: list[str]) -> None:
        from jobgate import revalidation  # as in `run`

        try:
            self.total = sum(1 for _ in revalidation.discover(paths))
        except OSError:
            pass

    def update(self, items: int, failed: int, label: str = "failed") -> None:
        if self.bar is None:
            return
        self.failed += failed
        if self.total is not None and self.bar.total is None:
            self.bar.total = self.total
        self.bar.set_postfix_str(f"{label}={self.failed}", refresh=False)
        self.bar.update(items)

    def close(self, finished: bool = False) -> None:
        if self.bar is None:
            return
        if finished and self.bar.total is None:  # ended before the count did: the total is what was done
            self.bar.total = self.bar.n
            self.bar.refresh()
        self.bar.close()


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: every command imports this module, and the engines (tarfile, sqlite3,
    # thread pools)
    # would add to the start of each.
    from jobgate import revalidation

    if args.address and args.engine != "ray":
        raise UsageError("--address is for --engine ray")
    if args.reads != "auto" and args.engine != "ray":
        raise UsageError("--reads is for --engine ray")
    if args.threads is not None and (args.engine != "local" or args.threads < 1):
        raise UsageError("--threads takes a number of at least 1, with --engine local")
    if args.ignore and args.against:
        raise UsageError("--ignore is not for --against, which compares what two configurations find, suppressed or not")
    named_files(args.config)
    config = load_config(args.config) if args.config else environment_config()
    quiet = suppressor(args, config)
    candidate = None
    if args.against:
        named_files(args.against)
        candidate = load_config(args.against)
    try:
        items = revalidation.discover(args.paths)
    except OSError as e:
        raise UsageError(str(e)) from None

    configs = [config] if candidate is None else [config, candidate]
    with ExitStack() as stack:
        try:
            judges = []
            for c in configs:
                cache = None
                if args.cache:
                    cache = revalidation.ReportCache(args.cache, c, args.kind)
                    stack.callback(cache.close)
                judges.append(revalidation.Judge(c, args.kind, cache))
            if args.engine == "ray":
                ray = stack.enter_context(revalidation.ray_session(args.address))
                judged = revalidation.run_ray(items, judges, ray, args.reads)
            else:
                judged = revalidation.run_local(items, judges, args.threads)
            progress = Progress(args.paths, show_progress())
            stack.callback(progress.close)
            if candidate is not None:
                return report_changes(args, judged, progress)
            stream = streaming.ReportStream(args.format, sys.stdout, "jobgate revalidate")
            limit = (config or Config()).limits.max_document_bytes
            for chunk in judged:
                reports = [quiet.apply(item.path, r, document_text(item, r, limit)) for item, r in zip(chunk.items, chunk.reports[0], strict=True)]
                stream.write(zip([item.path for item in chunk.items], reports, strict=True))
                progress.update(len(reports), sum(not r.ok for r in reports))
            stream.close()
            write_notes(quiet)
            progress.close(finished=True)
            return EXIT_FAIL if stream.totals.failing(args.fail_on) else EXIT_PASS
        except (revalidation.EngineError, revalidation.CacheError) as e:
            raise UsageError(str(e)) from None


def document_text(item: Any, report: Any, limit: int) -> bytes | None:
    """A document file's text, for the suppression comments in it: read again only
    when its report has findings to suppress; None for a package (its report is the
    package's) or a file that cannot be read now."""
    if not report.violations or item.package or item.unpacked or item.unlisted is not None:
        return None
    try:
        return sources.read(item.path, limit).data
    except (OSError, sources.TooLarge):
        return None


def report_changes(args: argparse.Namespace, judged: Any, progress: Progress) -> int:
    """`--against`: the items the candidate judges otherwise, written as each chunk
    completes, then the counts."""
    reader = Validator()

    def project_of(item) -> str:
        """A JobSpec's project, read again for the items that changed only; a package's
        bundle names none."""
        if item.package or item.unlisted is not None:
            return ""
        try:
            facts = reader.facts(sources.read(item.path).data, args.kind)
        except (OSError, ValueError, sources.TooLarge):
            return ""
        return facts.project if facts is not None else ""

    stream = streaming.ChangesStream(args.format, sys.stdout, "jobgate revalidate")
    impact = rollout.Impact()
    for chunk in judged:
        items = chunk.items
        changes = rollout.compare_reports([item.path for item in items], *chunk.reports, lambda i, items=items: project_of(items[i]))
        for c in changes:
            impact.add(c)
        impact.items += len(items)
        stream.write(changes)
        progress.update(len(items), sum(c.breaks for c in changes), "newly failing")
    stream.close(impact.to_dict())
    progress.close(finished=True)
    return EXIT_FAIL if impact.fails(args.fail_on) else EXIT_PASS
