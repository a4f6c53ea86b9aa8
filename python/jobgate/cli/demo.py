"""`jobgate demo`: the gate at work on embedded sample documents and the demo catalog."""

from __future__ import annotations

import argparse

from jobgate import Validator, load_config, samples
from jobgate.cli import formats


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="check the embedded sample documents against the demo catalog")
    p.add_argument("--format", choices=formats.FORMATS, default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(samples.path(samples.DEMO_CONFIG))
    validator = Validator(config)
    results = []
    for name in samples.DOCUMENTS:
        data = samples.path(name).read_bytes()
        results.append((f"samples/{name}", validator.check(data, owner="demo-user")))
    print(formats.render(args.format, results))
    if args.format == "text":
        print("\nTwo documents admitted, two refused with their reasons. Check your own with: jobgate check FILE --config jobgate.toml")
    return 0
