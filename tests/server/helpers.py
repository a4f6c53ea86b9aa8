"""A real server on port 0 with a real SQLite file, clients for it, and the
configuration files of `jobgate serve` in a process of its own."""

from __future__ import annotations

import io
import json

import grpc

from jobgate import load_config
from jobgate.config import Account, Server
from jobgate.server import create_server
from jobgate.server.app import wait_serving as wait_serving_at
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2_grpc
from tests.helpers import DEMO_CONFIG

TOKEN = "s3cr3t-token-for-alice"
POLLER = "s3cr3t-token-for-the-poller"
# alice submits into the sample JobSpec's project (my-lab) and one more; the poller
# records what happens to launches.
ACCOUNTS = {
    "alice": {"token": token_hash(TOKEN), "projects": ["my-lab", "other-lab"], "roles": ["submitter"]},
    "poller": {"token": token_hash(POLLER), "roles": ["backend"]},
}


def reads_whole_answers(port: int) -> grpc.Channel:
    """A channel to the loopback `port` that reads a large answer whole without telling
    the server anything meanwhile: a receive window larger than any answer, announced at
    once (no flow-control updates, no bandwidth probes). grpcio closes a connection as
    soon as its last call has answered; a frame the client sends after that makes the
    server's kernel reset the connection, and the end of the answer still unsent is lost
    (the client sees UNAVAILABLE "Connection reset by peer"). A drain test asserts that
    the server lets the call finish, not that race of the transport (README, "The
    service")."""
    options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=options)


def raw(doc) -> admission_pb2.Document:
    """A document as raw JSON bytes."""
    return admission_pb2.Document(raw=json.dumps(doc).encode())


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def config_for(tmp_path, accounts: dict | None = None, **server):
    """The demo deployment on a fresh store, with `accounts` ({name: [accounts.NAME]
    table}, default ACCOUNTS) and `server` settings."""
    base = load_config(DEMO_CONFIG)
    return base.model_copy(
        update={
            "server": Server(**server),
            "accounts": {name: Account(**table) for name, table in (ACCOUNTS if accounts is None else accounts).items()},
            "store": base.store.model_copy(update={"path": str(tmp_path / "store")}),
            "jobs": base.jobs.model_copy(update={"results_root": str(tmp_path / "results")}),
        }
    )


class Collected(io.BytesIO):
    """stderr as the request log's writer sees it: what was written, line by line."""

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.getvalue().splitlines()]


class Running:
    """A server started by `create_server` on a loopback port, and clients for it:
    `server`, `port`, `gate`, `store`, `metrics` and `metrics_port` are those of the
    `Started` it returned. With `log_stream` the request log is written there."""

    def __init__(self, config, store=None, log_stream=None) -> None:
        self.config = config
        self.started = create_server(config, "127.0.0.1:0", store=store, log_stream=log_stream)
        s = self.started
        self.server, self.port, self.gate, self.store, self.metrics, self.metrics_port = s.server, s.port, s.gate, s.store, s.metrics, s.metrics_port
        # A client that reads what the server may send (records of several MiB).
        limit = config.server.max_message_bytes
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)])
        self.admission = admission_pb2_grpc.AdmissionServiceStub(self.channel)
        self.jobs = jobs_pb2_grpc.JobServiceStub(self.channel)
        self.auth = bearer(TOKEN)  # alice, a submitter
        self.backend = bearer(POLLER)  # the poller, a backend

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None).wait()
        self.started.close()


def wait_serving(port: int) -> grpc.Channel:
    """A channel to the server on the loopback `port`, once it answers its health check."""
    return wait_serving_at(f"127.0.0.1:{port}")


def write_config(path, tmp_path, catalog: bool, *, server: tuple[str, ...] = (), accounts: str | None = None) -> None:
    """A jobgate.toml on a store under tmp_path; alice a submitter in my-lab unless
    `accounts` (TOML tables) says otherwise."""
    if accounts is None:
        accounts = f'[accounts.alice]\ntoken = "{token_hash(TOKEN)}"\nprojects = ["my-lab"]\nroles = ["submitter"]'
    lines = [
        "[server]",
        *server,
        accounts,
        "[store]",
        f'path = "{tmp_path / "store"}"',
        "[jobs]",
        f'results_root = "{tmp_path / "results"}"',
    ]
    if catalog:
        lines += [
            "[[catalog]]",
            'recipe = { name = "nemo-rl/grpo", version = "0.7.0", digest = "sha256:6527a24d50352ea67588604d4df476781a3b0f93cd1f0f2e9120c26d8f7ef509" }',
            'framework = { kind = "nemo-rl", version = "0.7.0", runtime_id = "nemo-rl-0.7.0" }',
        ]
    else:
        lines += ["[[catalog]]", 'recipe = { name = "trl/grpo", version = "1", digest = "sha256:6527a24d50352ea67588604d4df476781a3b0f93cd1f0f2e9120c26d8f7ef509" }', 'framework = { runtime_id = "r" }']
    path.write_text("\n".join(lines) + "\n")
