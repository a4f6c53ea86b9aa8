"""`jobgate check PATH...`: offline checks with the same engine the service uses."""

from __future__ import annotations

import argparse

from jobgate import Validator
from jobgate.cli import formats, sources

KINDS = ("jobspec", "spec_bundle", "job_record", "best_rec")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check documents offline", description="Check JobSpecs and TAO artifacts (JSON or YAML files, directories, or - for stdin).")
    p.add_argument("paths", nargs="*", metavar="PATH", help="documents; with --package, optional (the package's own bundle is checked)")
    p.add_argument("--kind", choices=KINDS, help="the kind of every document (default: detected from its keys)")
    p.add_argument("--config", metavar="FILE", help="jobgate.toml with the deployment rules (catalog, registries, GPU series and limits)")
    p.add_argument("--format", choices=formats.FORMATS, default="text", help="output format (default: text)")
    files = p.add_mutually_exclusive_group()
    files.add_argument("--root", metavar="DIR", help="verify each bundle's supporting files under this producer root")
    files.add_argument("--package", metavar="FILE", help="verify against a package (tar, tar.gz, tar.zst, zip) holding the bundle and its files")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jobgate.cli import EXIT_FAIL, EXIT_PASS, UsageError

    if not args.paths and not args.package:
        raise UsageError("check needs at least one PATH (or --package FILE)")
    validator = Validator(args.config) if args.config else Validator()
    try:
        names = sources.expand(args.paths)
        docs = [sources.read(n) for n in names]
    except OSError as e:
        raise UsageError(str(e)) from None
    if args.root or args.package:
        results = []
        try:
            if not docs:
                results.append((args.package, validator.check(None, kind=args.kind, package=args.package)))
            for d in docs:
                results.append((d.name, validator.check(d.data, kind=args.kind, root=args.root, package=args.package)))
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
    else:
        reports = validator.check_many([d.data for d in docs], kind=args.kind)
        results = [(d.name, r) for d, r in zip(docs, reports, strict=True)]
    print(formats.render(args.format, results))
    return EXIT_PASS if all(r.ok for _, r in results) else EXIT_FAIL
