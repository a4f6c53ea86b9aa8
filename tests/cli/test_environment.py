"""Configuration from the environment: `JOBGATE_SECTION__KEY` over jobgate.toml (or
over the defaults without one), secrets read from files (`KEY_FILE`), and every bad
variable refused naming itself and the key. Judged through `load_config`, `jobgate
check`, and `jobgate serve` in a process of its own configured by variables alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from jobgate import Validator, load_config
from jobgate.cli import main as cli_main
from jobgate.config import ConfigError, environment_config
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2, admission_pb2_grpc
from tests.helpers import DEMO_CONFIG, run_cli, sample
from tests.server.helpers import TOKEN, bearer

HASH = token_hash(TOKEN)


def test_a_variable_overrides_the_file_and_leaves_its_other_keys(tmp_path):
    config = tmp_path / "jobgate.toml"
    config.write_text('[limits]\nmax_depth = 32\nmax_batch = 10\n[gpus]\nseries = ["h100"]\n[server]\nlisten = "127.0.0.1:7000"\n')
    env = {
        "JOBGATE_LIMITS__MAX_DEPTH": "12",
        "JOBGATE_GPUS__SERIES": '["h100", "h200"]',
        "JOBGATE_GPUS__MAX_PER_JOB": "8",
        "JOBGATE_SERVER__ALLOW_INSECURE": "true",
        "JOBGATE_JOBS__IDEMPOTENCY_WINDOW": "2h",
        "JOBGATE_STORE__URL": "postgresql://jobgate@db/jobs",
        "JOBGATE_RULES__forge.resources.series": "warning",
        "JOBGATE_QUOTA__PROJECTS__vision": "16",
        "JOBGATE_TOKEN": "not configuration",
        "JOBGATE_DEBUG": "1",
    }
    c = load_config(config, environ=env)
    assert (c.limits.max_depth, c.limits.max_batch) == (12, 10)  # the variable wins; the file's other key stays
    assert c.gpus.series == ["h100", "h200"] and c.gpus.max_per_job == 8
    assert c.server.listen == "127.0.0.1:7000" and c.server.allow_insecure is True
    assert c.jobs.idempotency_window == 7200.0
    assert c.store.url == "postgresql://jobgate@db/jobs"
    assert c.rules == {"forge.resources.series": "warning"} and c.quota.projects == {"vision": 16}
    assert load_config(config, environ={}).limits.max_depth == 32  # {}: the file alone


def test_the_process_environment_is_read_by_default(tmp_path, monkeypatch):
    config = tmp_path / "jobgate.toml"
    config.write_text("[limits]\nmax_depth = 32\n")
    monkeypatch.setenv("JOBGATE_LIMITS__MAX_DEPTH", "7")
    assert load_config(config).limits.max_depth == 7
    assert environment_config().limits.max_depth == 7
    monkeypatch.delenv("JOBGATE_LIMITS__MAX_DEPTH")
    assert environment_config() is None  # no configuration variable: no configuration


def test_tables_names_and_unsetting():
    env = {
        "JOBGATE_LIMITS": "{ max_depth = 20, max_batch = 5 }",
        "JOBGATE_LIMITS__MAX_BATCH": "6",  # a key within a table given whole applies after it
        "JOBGATE_accounts__CI-Bot__token": HASH,  # sections and keys in any case, the account as written
        "JOBGATE_ACCOUNTS__CI-Bot__ROLES": '["submitter"]',
        "JOBGATE_ACCOUNTS__CI-Bot__PROJECTS": '["vision"]',
        "JOBGATE_RULES__projects__vision__forge.resources.series": "off",
        "JOBGATE_SERVER__METRICS_LISTEN": "",
    }
    c = environment_config(env)
    assert (c.limits.max_depth, c.limits.max_batch) == (20, 6)
    assert list(c.accounts) == ["CI-Bot"] and c.accounts["CI-Bot"].roles == ["submitter"] and c.accounts["CI-Bot"].token == HASH
    assert c.rules == {"projects": {"vision": {"forge.resources.series": "off"}}}
    assert c.server.metrics_listen is None and c.source == "the environment"


def test_an_empty_value_unsets_what_the_file_set(tmp_path):
    config = tmp_path / "jobgate.toml"
    config.write_text('[server]\nmetrics_listen = "127.0.0.1:9100"\n[server.tls]\ncert = "c.pem"\nkey = "k.pem"\n')
    c = load_config(config, environ={"JOBGATE_SERVER__METRICS_LISTEN": "", "JOBGATE_SERVER__TLS": ""})
    assert c.server.metrics_listen is None and c.server.tls is None


def test_the_catalog_is_set_whole(tmp_path):
    entry = '{ recipe = { name = "trl/grpo", version = "1", digest = "sha256:' + "a" * 64 + '" }, framework = { runtime_id = "r" }, custom = true }'
    c = environment_config({"JOBGATE_CATALOG": f"[{entry}]"})
    assert [(e.recipe.name, e.custom) for e in c.catalog] == [("trl/grpo", True)]
    with pytest.raises(ConfigError) as e:
        environment_config({"JOBGATE_CATALOG__0__CUSTOM": "true"})
    assert str(e.value) == "JOBGATE_CATALOG__0__CUSTOM: catalog is a list: set it whole, as a TOML array, in JOBGATE_CATALOG"


def test_a_secret_is_read_from_the_file_a_variable_names(tmp_path):
    secret = tmp_path / "store-url"
    secret.write_text("postgresql://jobgate:hunter2@db/jobs\n")  # as a mounted secret ends
    token = tmp_path / "token-hash"
    token.write_text(HASH)
    c = environment_config({"JOBGATE_STORE__URL_FILE": str(secret), "JOBGATE_ACCOUNTS__ci__TOKEN_FILE": str(token), "JOBGATE_ACCOUNTS__ci__ROLES": '["admin"]'})
    assert c.store.url == "postgresql://jobgate:hunter2@db/jobs" and c.accounts["ci"].token == HASH
    with pytest.raises(ConfigError) as e:
        environment_config({"JOBGATE_STORE__URL_FILE": str(tmp_path / "missing")})
    assert str(e.value) == f"JOBGATE_STORE__URL_FILE: cannot read {tmp_path / 'missing'}: No such file or directory"
    with pytest.raises(ConfigError) as e:
        environment_config({"JOBGATE_STORE__URL_FILE": str(secret), "JOBGATE_STORE__URL": "postgresql://db/other"})
    assert str(e.value) == "JOBGATE_STORE__URL and JOBGATE_STORE__URL_FILE both set store.url: give one"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JOBGATE_LIMITS__MAX_DEPTH": "deep"}, "JOBGATE_LIMITS__MAX_DEPTH: limits.max_depth: Input should be a valid integer, unable to parse string as an integer"),
        ({"JOBGATE_LIMITS__MAX_DEPTH": "5000"}, "JOBGATE_LIMITS__MAX_DEPTH: limits.max_depth: Input should be less than or equal to 1024"),
        ({"JOBGATE_SERVER__ALLOW_INSECURE": "maybe"}, "JOBGATE_SERVER__ALLOW_INSECURE: server.allow_insecure: Input should be a valid boolean, unable to interpret input"),
        ({"JOBGATE_SERVER__LISTN": "0.0.0.0:1"}, "JOBGATE_SERVER__LISTN: server.listn: not a known key; did you mean 'listen'?"),
        ({"JOBGATE_STORE_URL": "postgresql://db/jobs"}, "JOBGATE_STORE_URL: not a configuration variable: a section and its key are joined by two underscores, JOBGATE_STORE__URL"),
        ({"JOBGATE_JOBS__STORAGE_TIER": "Z"}, "JOBGATE_JOBS__STORAGE_TIER: jobs.storage_tier: Input should be 'A', 'B' or 'C'"),
        ({"JOBGATE_JOBS__IDEMPOTENCY_WINDOW": "a while"}, "JOBGATE_JOBS__IDEMPOTENCY_WINDOW: jobs.idempotency_window: 'a while' is not a duration: give seconds, or a number with a unit such as \"90s\", \"30m\", \"24h\" or \"7d\""),
        ({"JOBGATE_ACCOUNTS__ci__TOKEN": "plain-token", "JOBGATE_ACCOUNTS__ci__ROLES": '["admin"]'}, "JOBGATE_ACCOUNTS__ci__TOKEN: accounts.ci.token: must be sha256:<64 lowercase hex>, the hash of the token, never the token (`jobgate token new NAME` prints both)"),
        ({"JOBGATE_ACCOUNTS__ci__TOKEN": HASH}, "the environment (with JOBGATE_ACCOUNTS__ci__TOKEN): accounts.ci.roles: Field required"),
        ({"JOBGATE_SERVER__TLS__CERT": "cert.pem"}, "the environment (with JOBGATE_SERVER__TLS__CERT): server.tls.key: Field required"),
        ({"JOBGATE_LIMITS__": "1"}, "JOBGATE_LIMITS__: an empty key between underscores"),
    ],
)
def test_a_bad_variable_is_refused_naming_it_and_the_key(env, message):
    with pytest.raises(ConfigError) as e:
        environment_config(env)
    assert str(e.value) == message


def test_a_bad_variable_over_a_file_is_told_apart_from_the_file(tmp_path):
    config = tmp_path / "jobgate.toml"
    config.write_text("[limits]\nmax_depth = 0\n")
    with pytest.raises(ConfigError) as e:
        load_config(config, environ={"JOBGATE_LIMITS__MAX_BATCH": "0"})
    assert str(e.value).splitlines() == [
        f"{config}: limits.max_depth: Input should be greater than or equal to 1",
        "JOBGATE_LIMITS__MAX_BATCH: limits.max_batch: Input should be greater than or equal to 1",
    ]


def test_a_rule_that_protects_the_gate_cannot_be_relaxed_from_the_environment_either():
    with pytest.raises(ConfigError) as e:
        environment_config({"JOBGATE_RULES__json.syntax": "off"})
    assert str(e.value).startswith("the environment (with JOBGATE_RULES__json.syntax): rules: json.syntax protects the gate itself")


def test_check_judges_under_the_variables(tmp_path, capsys, monkeypatch):
    """`jobgate check` without --config takes the environment over the defaults, and
    with one over the file: a per-job GPU limit set only in the environment binds."""
    doc = tmp_path / "big.jobspec.json"
    doc.write_text(json.dumps(sample("jobspec.valid.json")))
    assert Validator().check(doc.read_bytes()).ok
    monkeypatch.setenv("JOBGATE_GPUS__MAX_PER_JOB", "1")
    code, out = run_cli(capsys, ["check", str(doc), "--format", "json"])
    assert code == 1 and [v["rule"] for v in json.loads(out)["results"][0]["violations"]] == ["forge.quota.job"]
    code, out = run_cli(capsys, ["check", str(doc), "--config", str(DEMO_CONFIG), "--format", "json"])
    assert code == 1 and "forge.quota.job" in [v["rule"] for v in json.loads(out)["results"][0]["violations"]]
    monkeypatch.setenv("JOBGATE_GPUS__MAX_PER_JOB", "none")
    capsys.readouterr()
    assert cli_main(["check", str(doc)]) == 2
    assert capsys.readouterr().err.strip() == "jobgate: JOBGATE_GPUS__MAX_PER_JOB: gpus.max_per_job: Input should be a valid integer, unable to parse string as an integer"


def test_revalidate_judges_under_the_variables(tmp_path, capsys, monkeypatch):
    """`jobgate revalidate` without --config takes the environment too."""
    (tmp_path / "archive").mkdir()
    doc = tmp_path / "archive" / "big.jobspec.json"
    doc.write_text(json.dumps(sample("jobspec.valid.json")))
    code, out = run_cli(capsys, ["revalidate", str(tmp_path / "archive"), "--format", "json"])
    assert code == 0, out
    monkeypatch.setenv("JOBGATE_GPUS__MAX_PER_JOB", "1")
    code, out = run_cli(capsys, ["revalidate", str(tmp_path / "archive"), "--format", "json"])
    assert code == 1 and [v["rule"] for v in json.loads(out)["results"][0]["violations"]] == ["forge.quota.job"]


class Serving:
    """`jobgate serve` with no --config, in a process of its own, configured by `env`;
    its JSON log lines gathered as they come."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_") or k == "JOBGATE_SHARED"}
        self.proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve"], env={**clean, **env}, cwd=cwd, stderr=subprocess.PIPE)
        self.lines: list[bytes] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self._reader.start()

    def line(self, message: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for raw in list(self.lines):
                entry = json.loads(raw)
                if entry["message"] == message:
                    return entry
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no {message!r} line; stderr: {b''.join(self.lines)[:4000]!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self._reader.join(10)


def deployment(tmp_path: Path) -> dict[str, str]:
    """A deployment in variables alone: loopback, an account whose token hash is a
    mounted secret, a store and results under tmp_path."""
    secret = tmp_path / "alice-token-hash"
    secret.write_text(HASH + "\n")
    return {
        "JOBGATE_SERVER__LISTEN": "127.0.0.1:0",
        "JOBGATE_ACCOUNTS__alice__TOKEN_FILE": str(secret),
        "JOBGATE_ACCOUNTS__alice__PROJECTS": '["my-lab"]',
        "JOBGATE_ACCOUNTS__alice__ROLES": '["submitter"]',
        "JOBGATE_STORE__PATH": str(tmp_path / "store"),
        "JOBGATE_JOBS__RESULTS_ROOT": str(tmp_path / "results"),
    }


def admit_through(serving: Serving) -> tuple[str, grpc.StatusCode]:
    """A job admitted with alice's token, and what a caller without one is told."""
    port = int(serving.line("serving")["address"].rpartition(":")[2])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(sample("jobspec.valid.json")).encode()))
        job_id = stub.Admit(request, metadata=bearer(TOKEN), timeout=30).job_id
        with pytest.raises(grpc.RpcError) as anonymous:
            stub.Admit(request, timeout=30)
    return job_id, anonymous.value.code()


def test_serve_runs_from_variables_alone(tmp_path):
    """No --config and configuration variables set: not the demo deployment (no
    anonymous admin), but the defaults with the variables over them."""
    serving = Serving(deployment(tmp_path), tmp_path)
    try:
        job_id, anonymous = admit_through(serving)
        serving_line = serving.line("serving")
    finally:
        serving.stop()
    assert job_id and anonymous == grpc.StatusCode.UNAUTHENTICATED
    assert serving_line["store"] == str(tmp_path / "store") and serving_line["anonymous"] is False
    assert (tmp_path / "store").is_dir()


def test_serve_on_postgresql_from_a_secret_file_logs_the_url_without_its_password(tmp_path):
    """The store URL, password and all, comes from a file (a mounted secret); the
    "serving" line names the PostgreSQL store actually used, without the password."""
    url = os.environ.get("JOBGATE_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs JOBGATE_TEST_POSTGRES_URL")
        pytest.skip("no PostgreSQL (JOBGATE_TEST_POSTGRES_URL)")
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    user, host = (parts.username or "postgres"), parts.netloc.rpartition("@")[2]
    with_password = urlunsplit((parts.scheme, f"{user}:never-logged-pw@{host}", parts.path, parts.query, ""))
    secret = tmp_path / "store-url"
    secret.write_text(with_password + "\n")
    serving = Serving({**deployment(tmp_path), "JOBGATE_STORE__URL_FILE": str(secret)}, tmp_path)
    try:
        job_id, _ = admit_through(serving)
        serving_line = serving.line("serving")
    finally:
        serving.stop()
    assert job_id
    assert serving_line["store"] == urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, ""))
    assert b"never-logged-pw" not in b"".join(serving.lines)
    assert not (tmp_path / "store").exists()  # not the SQLite path


def test_serve_refuses_a_bad_variable_naming_it(tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    done = subprocess.run([sys.executable, "-m", "jobgate.cli", "serve"], env={**clean, "JOBGATE_SERVER__THREADS": "0"}, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "jobgate: JOBGATE_SERVER__THREADS: server.threads: Input should be greater than or equal to 1"
