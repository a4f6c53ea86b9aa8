"""The `jobgate` command.

Owns argument parsing, exit codes (0 all passed, 1 some document failed, 2 the
command could not run) and turning errors into one clear line on stderr. Each
subcommand lives in its own module; none of them applies a rule itself.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from jobgate import __version__
from jobgate.cli import bench, check, completion, demo, jobs, revalidate, serve, stage, submit, tokens
from jobgate.cli.formats import printable
from jobgate.cli.usage import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, UsageError, named_files  # noqa: F401 - the commands' API, as before
from jobgate.config import ConfigError

# `pip install jobgate` runs check, stage and revalidate (local engine); the other
# commands import what they need when they run, and each such module comes with an
# extra. A command that finds its module missing names the extra to install.
EXTRA_OF_MODULE = {
    "grpc": "server",
    "grpc_health": "server",
    "grpc_reflection": "server",
    "grpc_status": "server",
    "google": "server",  # protobuf
    "prometheus_client": "server",
    "psycopg": "postgres",
    "ray": "ray",
    "hdrh": "bench",
    "matplotlib": "plot",
}
# A command whose extra brings the gRPC client as well: it is named for it.
EXTRA_OF_COMMAND = {"bench": "bench"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is 2 as well
        self.print_usage(sys.stderr)
        print(f"jobgate: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jobgate", description="The admission gate for ML training jobs.")
    parser.add_argument("--version", action="version", version=f"jobgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    check.add_parser(sub)
    stage.add_parser(sub)
    serve.add_parser(sub)
    submit.add_parser(sub)
    revalidate.add_parser(sub)
    jobs.add_parser(sub)
    tokens.add_parser(sub)
    bench.add_parser(sub)
    demo.add_parser(sub)
    completion.add_parser(sub)
    return parser


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's own parser that `args` were parsed by (`jobgate jobs list`'s,
    not `jobgate`'s), so a usage error shows the usage that helps."""
    while True:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        name = getattr(args, actions[0].dest, None) if actions else None
        if name is None or name not in actions[0].choices:
            return parser
        parser = actions[0].choices[name]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(args.run(args))
    except (UsageError, ConfigError) as e:
        print(f"jobgate: {printable(str(e), keep=chr(10))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("jobgate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as e:  # a bug: one line for the user, the trace on request
        extra = missing_extra(args.command, e.name or "") if isinstance(e, ModuleNotFoundError) else None
        if extra is not None:
            print(f"jobgate: {chosen_parser(parser, args).prog} needs the {extra} extra ({e.name} is not installed): pip install 'jobgate[{extra}]'", file=sys.stderr)
            return EXIT_ERROR
        if os.environ.get("JOBGATE_DEBUG"):
            traceback.print_exc()
        print(f"jobgate: internal error: {type(e).__name__}: {printable(str(e))} (set JOBGATE_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_ERROR


def missing_extra(command: str, module: str) -> str | None:
    """The extra that brings `module` for `command`, or None when no extra does (a
    module missing from an installed extra, or a bug)."""
    extra = EXTRA_OF_MODULE.get(module.split(".")[0])
    if extra is None:
        return None
    if extra == "server" and command in EXTRA_OF_COMMAND:
        return EXTRA_OF_COMMAND[command]
    return extra


if __name__ == "__main__":
    sys.exit(main())
