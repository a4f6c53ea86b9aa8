"""A real server on port 0 with a real SQLite file, and clients for it."""

from __future__ import annotations

import grpc
import pytest

from jobgate import load_config
from jobgate.config import Server
from jobgate.server import create_server
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2_grpc, jobs_pb2_grpc
from tests.conftest import DEMO_CONFIG

TOKEN = "s3cr3t-token-for-alice"


def config_for(tmp_path, **server):
    base = load_config(DEMO_CONFIG)
    settings = {"tokens": {"alice": token_hash(TOKEN)}, **server}
    return base.model_copy(
        update={
            "server": Server(**settings),
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
        self.auth = [("authorization", f"Bearer {TOKEN}")]

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None).wait()


@pytest.fixture
def running(tmp_path):
    r = Running(config_for(tmp_path))
    yield r
    r.close()
