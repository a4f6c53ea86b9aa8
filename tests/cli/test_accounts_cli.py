"""Accounts in jobgate.toml and `jobgate token new`: a file that cannot be served as
written is refused naming the file, the key and the fix; a new token's lines load as
they are printed, and the server knows the token by them."""

from __future__ import annotations

import hashlib
import tomllib

import pytest

from jobgate import samples
from jobgate.cli import main
from jobgate.config import load_config
from jobgate.server.auth import token_hash

HASH = token_hash("some-token")
OTHER = token_hash("other-token")


@pytest.mark.parametrize(
    "toml, message",
    [
        (
            f'[server]\ntokens = {{ alice = "{HASH}", bob = "{OTHER}" }}\n',
            'server.tokens: replaced by one table per account holding its token hash and its grant: move each entry to [accounts.alice], [accounts.bob] with token = "sha256:…", '
            'projects = ["…"] and roles = ["submitter"] (or reader, backend, admin); `jobgate token new NAME` prints such a table',
        ),
        (f'[accounts.alice]\ntoken = "{HASH}"\nprojects = ["a"]\nroles = ["writer"]\n', "accounts.alice.roles: unknown role 'writer'; the roles are submitter, reader, backend, admin"),
        (f'[accounts.alice]\ntoken = "{HASH}"\nprojects = ["a"]\nroles = []\n', "accounts.alice.roles: an account needs at least one role: submitter, reader, backend, admin"),
        (f'[accounts.alice]\ntoken = "{HASH}"\nprojects = ["a"]\n', "accounts.alice.roles: Field required"),
        ('[accounts.alice]\ntoken = "some-token"\nprojects = ["a"]\nroles = ["submitter"]\n', "accounts.alice.token: must be sha256:<64 lowercase hex>, the hash of the token, never the token"),
        (
            f'[accounts.alice]\ntoken = "{HASH}"\nprojects = ["a"]\nroles = ["submitter"]\n[accounts.bob]\ntoken = "{HASH}"\nroles = ["backend"]\n',
            "accounts: [accounts.alice] and [accounts.bob] hold the same token hash; each account needs a token of its own",
        ),
        ('[accounts.ci]\nprojects = ["a"]\nroles = ["submitter"]\n', "accounts: [accounts.ci] has no token, and without server.tls.client_ca no client certificate can name it: it could never call"),
        (f'[accounts.alice]\ntoken = "{HASH}"\nroles = ["reader"]\n', 'accounts: [accounts.alice] is a reader without projects: list the projects it acts in, or ["*"] for every one'),
        (f'[accounts."a b"]\ntoken = "{HASH}"\nroles = ["admin"]\n', "accounts: [accounts.a b]: an account name is 1 to 128 letters, digits"),
    ],
)
def test_accounts_that_cannot_be_served_are_refused(capsys, tmp_path, toml, message):
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text(toml)
    capsys.readouterr()
    assert main(["check", str(samples.path("jobspec.valid.json")), "--config", str(cfg)]) == 2
    assert capsys.readouterr().err.startswith(f"jobgate: {cfg}: {message}")


def test_two_teams_load(tmp_path):
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text(
        f'[server.tls]\ncert = "s.pem"\nkey = "s.key"\nclient_ca = "ca.pem"\n'
        f'[accounts.alice]\ntoken = "{HASH}"\nprojects = ["vision"]\nroles = ["submitter"]\n'
        f'[accounts.ci-vision]\nprojects = ["vision"]\nroles = ["reader"]\n'
        f'[accounts.slurm-poller]\ntoken = "{OTHER}"\nroles = ["backend"]\n'
    )
    config = load_config(cfg)
    assert {name: (a.token, a.projects, a.roles) for name, a in config.accounts.items()} == {
        "alice": (HASH, ["vision"], ["submitter"]),
        "ci-vision": (None, ["vision"], ["reader"]),
        "slurm-poller": (OTHER, [], ["backend"]),
    }


def test_token_new_prints_the_token_once_and_the_lines_holding_its_hash(capsys, tmp_path):
    capsys.readouterr()
    assert main(["token", "new", "alice", "--project", "vision", "--project", "speech"]) == 0
    out, err = capsys.readouterr()
    token, blank, *lines = out.splitlines()
    assert token.startswith("jg_") and len(token) == 3 + 43 and blank == ""
    assert lines == ["[accounts.alice]", f'token = "sha256:{hashlib.sha256(token.encode()).hexdigest()}"', 'projects = ["vision", "speech"]', 'roles = ["submitter"]']
    assert "shown this once" in err and token not in err
    # the lines load as printed, and a second token is another one
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text("\n".join(lines) + "\n")
    assert load_config(cfg).accounts["alice"].token == token_hash(token)
    assert main(["token", "new", "alice", "--project", "vision"]) == 0
    assert capsys.readouterr().out.splitlines()[0] != token


def test_token_new_for_other_roles_and_names(capsys):
    assert main(["token", "new", "slurm.poller", "--role", "backend"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert lines[0] == '[accounts."slurm.poller"]' and lines[-1] == 'roles = ["backend"]'
    assert tomllib.loads("\n".join(lines))["accounts"]["slurm.poller"]["roles"] == ["backend"]
    for args, message in (
        (["token", "new", "alice", "--role", "reader"], "jobgate: a reader acts in projects: give --project PROJECT (repeatable), or --project '*' for every one"),
        (["token", "new", "anonymous", "--role", "admin"], "jobgate: [accounts.anonymous]: 'anonymous' is the account of callers without credentials"),
    ):
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(message)
