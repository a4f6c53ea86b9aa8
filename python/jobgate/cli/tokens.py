"""`jobgate token new ACCOUNT`: a fresh bearer token for an account. The token is
printed this once; the `[accounts.ACCOUNT]` lines printed after it hold only its hash,
which is all the server keeps. Add them to jobgate.toml and reload the server (SIGHUP)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from jobgate.cli.usage import UsageError
from jobgate.config import ROLES, Account, Server, account_problem

# A TOML bare key; any other account name is written as a quoted key.
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("token", help="make bearer tokens for accounts", description=__doc__)
    actions = p.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    new = actions.add_parser("new", help="a fresh token and the [accounts.ACCOUNT] lines holding its hash", description=__doc__)
    new.add_argument("account", metavar="ACCOUNT")
    new.add_argument("--role", dest="roles", action="append", choices=ROLES, metavar="ROLE", help=f"a role of the account, repeatable: {', '.join(ROLES)} (default: submitter)")
    new.add_argument("--project", dest="projects", action="append", metavar="PROJECT", help="a project it acts in, repeatable; '*' for every project; the first takes its spec-bundles")
    new.set_defaults(run=run_new)


def account_lines(name: str, token_hash: str, projects: list[str], roles: list[str]) -> str:
    key = name if BARE_KEY.fullmatch(name) else json.dumps(name)
    lines = [f"[accounts.{key}]", f"token = {json.dumps(token_hash)}"]
    if projects:
        lines.append(f"projects = {json.dumps(projects, ensure_ascii=False)}")
    lines.append(f"roles = {json.dumps(roles)}")
    return "\n".join(lines)


def run_new(args: argparse.Namespace) -> int:
    # Imported here: jobgate.server.auth (grpc) comes with the server extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    from jobgate.server.auth import new_token, token_hash

    roles = list(dict.fromkeys(args.roles or ["submitter"]))
    projects = list(dict.fromkeys(args.projects or []))
    token = new_token()
    try:
        account = Account(token=token_hash(token), projects=projects, roles=roles)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not projects and {"submitter", "reader"} & set(roles) and not {"backend", "admin"} & set(roles):
        raise UsageError(f"a {' and '.join(r for r in ROLES if r in roles)} acts in projects: give --project PROJECT (repeatable), or --project '*' for every one")
    # The lines printed are lines a server accepts.
    problem = account_problem(args.account, account, Server())
    if problem:
        raise UsageError(problem)
    print(token)
    print()
    print(account_lines(args.account, account.token or "", projects, roles))
    print(
        f"jobgate: the token (first line) is shown this once: hand it to {args.account} (--token or JOBGATE_TOKEN); "
        "add the lines after it to jobgate.toml and reload the server (SIGHUP). The server keeps only the hash.",
        file=sys.stderr,
    )
    return 0
