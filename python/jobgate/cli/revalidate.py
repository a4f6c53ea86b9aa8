"""`jobgate revalidate PATH...`: revalidate archives of documents and job packages
against the current configuration, in parallel, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

from jobgate import KINDS
from jobgate.cli import formats
from jobgate.reports import ReportView

ENGINES = ("local", "ray")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "revalidate",
        help="revalidate archived documents and job packages in batch",
        description=(
            "Revalidate archived documents (.json, .yaml, .yml) and job packages against the current configuration. "
            "A package is an archive (.tar, .tar.gz, .tgz, .tar.zst, .tzst, .zip) or a directory with bundle.json, "
            ".yaml or .yml at its top, holding the bundle and its supporting files. Directories are searched "
            "recursively. Progress goes to stderr on a terminal, never when CI is set."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="documents, packages, or directories holding them")
    p.add_argument("--config", metavar="FILE", help="jobgate.toml with the current catalog and deployment rules (default: document rules only)")
    p.add_argument("--kind", choices=KINDS, help="the kind of every document (default: detected from its keys)")
    p.add_argument("--format", choices=formats.FORMATS, default="text", help="output format (default: text)")
    formats.add_fail_on(p)
    p.add_argument("--engine", choices=ENGINES, default="local", help="local: threads on this machine (default); ray: tasks on a Ray cluster")
    p.add_argument("--address", metavar="ADDR", help="with --engine ray: the cluster to join (host:port, ray://host:port or auto; default: start a private local Ray)")
    p.add_argument("--threads", type=int, metavar="N", help="with --engine local: worker threads (default: every core)")
    p.add_argument("--against", metavar="CANDIDATE.toml", help="judge every item under --config and under this candidate too; report only the items whose verdict or violations change")
    p.add_argument("--cache", metavar="FILE", help="a SQLite file of reports by content: items unchanged since a run with the same configuration and jobgate version are not checked again")
    p.set_defaults(run=run)


def show_progress() -> bool:
    """SPEC §6: progress only on a terminal, and never when CI is set."""
    return sys.stderr.isatty() and not os.environ.get("CI")


def run(args: argparse.Namespace) -> int:
    from jobgate import load_config, revalidation
    from jobgate.cli import EXIT_FAIL, EXIT_PASS, UsageError, named_files

    if args.address and args.engine != "ray":
        raise UsageError("--address is for --engine ray")
    if args.threads is not None and (args.engine != "local" or args.threads < 1):
        raise UsageError("--threads takes a number of at least 1, with --engine local")
    named_files(args.config)
    config = load_config(args.config) if args.config else None
    try:
        items = revalidation.discover(args.paths)
    except OSError as e:
        raise UsageError(str(e)) from None

    from tqdm import tqdm

    candidate = None
    if args.against:
        named_files(args.against)
        candidate = load_config(args.against)

    def judge(config, bar) -> list[dict]:
        def engine(todo: list[revalidation.Item]) -> list[dict]:
            if not todo:
                return []
            if args.engine == "ray":
                return revalidation.run_ray(todo, config, args.kind, bar.update, args.address)
            return revalidation.run_local(todo, config, args.kind, bar.update, args.threads)

        if args.cache:
            return revalidation.run_cached(items, revalidation.ReportCache(args.cache, config, args.kind), bar.update, engine)
        return engine(items)

    configs = [config] if candidate is None else [config, candidate]
    session = revalidation.ray_session(args.address) if args.engine == "ray" and candidate is not None else nullcontext()
    with tqdm(total=len(items) * len(configs), unit="item", disable=not show_progress(), file=sys.stderr, desc="revalidating") as bar:
        try:
            with session:
                judged = [judge(c, bar) for c in configs]
        except (revalidation.EngineError, revalidation.CacheError) as e:
            raise UsageError(str(e)) from None
    if candidate is not None:
        return report_changes(args, items, *judged)
    results = [(item.path, ReportView.from_dict(r)) for item, r in zip(items, judged[0], strict=True)]
    print(formats.render(args.format, results))
    return EXIT_FAIL if formats.failing(results, args.fail_on) else EXIT_PASS


def report_changes(args: argparse.Namespace, items: list, current: list[dict], candidate: list[dict]) -> int:
    """`--against`: the items the candidate judges otherwise, and the counts."""
    from jobgate import Validator, rollout, sources
    from jobgate.cli import EXIT_FAIL, EXIT_PASS

    reader = Validator()

    def project_of(i: int) -> str:
        """A JobSpec's project, read again for the items that changed only; a package's
        bundle names none."""
        if items[i].package:
            return ""
        try:
            facts = reader.facts(sources.read(items[i].path).data, args.kind)
        except (OSError, ValueError, sources.TooLarge):
            return ""
        return facts.project if facts is not None else ""

    changes = rollout.compare([i.path for i in items], current, candidate, project_of)
    print(formats.changes(args.format, changes, rollout.impact(changes, len(items))))
    return EXIT_FAIL if rollout.fails(changes, args.fail_on) else EXIT_PASS
