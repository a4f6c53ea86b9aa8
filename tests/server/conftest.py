"""A real server on port 0 with a real SQLite file, and clients for it."""

from __future__ import annotations

import grpc
import pytest

from jobgate import load_config
from jobgate.config import Account, Server
from jobgate.server import create_server
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2_grpc, jobs_pb2_grpc
from tests.conftest import DEMO_CONFIG

TOKEN = "s3cr3t-token-for-alice"
POLLER = "s3cr3t-token-for-the-poller"
# alice submits into the sample JobSpec's project (my-lab) and one more; the poller
# records what happens to launches.
ACCOUNTS = {
    "alice": {"token": token_hash(TOKEN), "projects": ["my-lab", "other-lab"], "roles": ["submitter"]},
    "poller": {"token": token_hash(POLLER), "roles": ["backend"]},
}


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


class Running:
    def __init__(self, config, store=None) -> None:
        self.config = config
        self.server, self.port, self.gate = create_server(config, "127.0.0.1:0", store=store)
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


@pytest.fixture
def running(tmp_path):
    r = Running(config_for(tmp_path))
    yield r
    r.close()
