"""`jobgate check PATH...`: offline checks with the same engine the service uses."""

from __future__ import annotations

import argparse
import sys

from jobgate import KINDS, Validator, load_config, sources, suppressions
from jobgate.cli import formats
from jobgate.cli.usage import EXIT_FAIL, EXIT_PASS, UsageError, named_files
from jobgate.config import Config, environment_config
from jobgate.reports import ReportView


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check documents offline", description="Check JobSpecs and TAO artifacts (JSON or YAML files, directories, or - for stdin).")
    p.add_argument("paths", nargs="*", metavar="PATH", help="documents; with --package, optional (the package's own bundle is checked)")
    p.add_argument("--kind", choices=KINDS, help="the kind of every document (default: detected from its keys)")
    p.add_argument("--config", metavar="FILE", help="jobgate.toml with the deployment rules (catalog, registries, GPU series and limits); JOBGATE_SECTION__KEY variables override it")
    p.add_argument("--format", choices=formats.FORMATS, default="text", help="output format (default: text)")
    formats.add_fail_on(p)
    add_ignore(p)
    files = p.add_mutually_exclusive_group()
    files.add_argument("--root", metavar="DIR", help="verify each bundle's supporting files under this producer root")
    files.add_argument("--package", metavar="FILE", help="verify against a package (tar, tar.gz, tar.zst, zip) holding the bundle and its files")
    p.set_defaults(run=run)


def add_ignore(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="RULE",
        help="suppress this rule's findings in every document (repeatable): they are listed as suppressed and fail nothing; rules that protect the gate itself cannot be suppressed",
    )


def suppressor(args: argparse.Namespace, config: Config | None) -> suppressions.Suppressor:
    """The run's suppressions: `--ignore` (each rule checked, a usage error otherwise),
    the configuration's `[rules.paths]`, and each document's comments."""
    for rule in args.ignore:
        why = suppressions.refusal(rule)
        if why:
            raise UsageError(f"--ignore {rule}: {why}")
    if config is None:
        return suppressions.Suppressor(args.ignore)
    return suppressions.Suppressor(args.ignore, config.path_rules(), config.path_base())


def write_notes(suppressor: suppressions.Suppressor) -> None:
    """What the documents' suppression comments named that suppresses nothing."""
    for note in suppressor.notes:
        print(formats.printable(note), file=sys.stderr)


def judge(validator: Validator, docs: list[sources.Source | sources.TooLarge], args: argparse.Namespace) -> list:
    """A report per document, in order: read documents checked together (or one by one
    with their supporting files), refused ones as the core would refuse them."""
    readable = [d.data for d in docs if isinstance(d, sources.Source)]
    if args.root or args.package:
        checked = iter([validator.check(data, kind=args.kind, root=args.root, package=args.package) for data in readable])
    else:
        checked = iter(validator.check_many(readable, kind=args.kind))
    return [next(checked) if isinstance(d, sources.Source) else ReportView.from_dict(d.report(args.kind)) for d in docs]


def run(args: argparse.Namespace) -> int:
    if not args.paths and not args.package:
        raise UsageError("check needs at least one PATH (or --package FILE)")
    named_files(args.config, args.package)
    config = load_config(args.config) if args.config else environment_config() or Config()
    validator = Validator(config)
    quiet = suppressor(args, config)
    try:
        if not args.paths:  # --package alone: the package's own bundle
            results = [(args.package, quiet.apply(args.package, validator.check(None, kind=args.kind, package=args.package)))]
        else:
            docs = sources.read_all(sources.expand(args.paths), config.limits.max_document_bytes)
            results = [(d.name, quiet.apply(d.name, report, getattr(d, "data", None))) for d, report in zip(docs, judge(validator, docs, args), strict=True)]
    except OSError as e:  # unreadable paths, and a producer root or package that cannot be opened
        raise UsageError(str(e)) from None
    write_notes(quiet)
    print(formats.render(args.format, results))
    return EXIT_FAIL if formats.failing(results, args.fail_on) else EXIT_PASS
