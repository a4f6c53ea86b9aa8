"""`jobgate stage BUNDLE (--root DIR | --package FILE) --job-dir DIR`: verify a bundle's
supporting files, then stage them atomically under `<job_dir>/inputs/action-helpers/`."""

from __future__ import annotations

import argparse
import json
import os
import sys

from jobgate import Validator, sources
from jobgate.cli import formats
from jobgate.cli.usage import EXIT_FAIL, EXIT_PASS, UsageError, named_files


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stage", help="verify and stage a bundle's supporting files", description=__doc__)
    p.add_argument("bundle", metavar="BUNDLE", nargs="?", help="the spec-bundle (optional with --package: its own bundle is used)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--root", metavar="DIR", help="the producer root the sources are relative to")
    where.add_argument("--package", metavar="FILE", help="a package holding the bundle and its sources")
    p.add_argument("--job-dir", metavar="DIR", required=True, help="the job directory (created if missing, never its parents); files go to DIR/inputs/action-helpers/")
    p.add_argument("--config", metavar="FILE", help="jobgate.toml (limits)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.bundle is None and args.root:
        raise UsageError("stage --root needs the BUNDLE document")
    named_files(args.config, args.package)
    parent = os.path.dirname(os.path.abspath(args.job_dir))
    if not os.path.isdir(parent):  # a mistyped path is not a tree to build
        raise UsageError(f"--job-dir {args.job_dir}: {parent} does not exist; the job directory is created if missing, never its parents")
    validator = Validator(args.config) if args.config else Validator()
    try:
        doc = sources.read(args.bundle) if args.bundle else None
        staging = validator.stage(doc.data if doc else None, args.job_dir, root=args.root, package=args.package)
    except (OSError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    source = doc.name if doc else args.package
    if args.format == "json":
        out = formats.as_json([(source, staging.report)])
        out["staging"] = {
            "directory": staging.directory,
            "reused": staging.reused,
            "files": [{"source": s, "destination": d, "sha256": h, "size": n} for s, d, h, n in staging.files],
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(formats.text([(source, staging.report)]))
        if staging.ok:
            verb = "kept the identical staging in" if staging.reused else f"staged {len(staging.files)} file(s) to"
            print(f"{verb} {formats.printable(staging.directory)}")
        else:
            print("nothing was staged", file=sys.stderr)
    return EXIT_PASS if staging.ok else EXIT_FAIL
