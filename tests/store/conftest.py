"""Both store backends, each on a real database: a fresh SQLite file, and a fresh
database on the PostgreSQL server that scripts/postgres starts (JOBGATE_TEST_POSTGRES_URL);
a gate on each, and a real server on each."""

from __future__ import annotations

import os
import uuid

import pytest

from jobgate.config import Config
from jobgate.server.gate import Gate
from jobgate.store import open_store
from tests.server.helpers import Running
from tests.store.helpers import config_on


def postgres_url() -> str:
    url = os.environ.get("JOBGATE_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("JOBGATE_TEST_POSTGRES_URL is not set; CI runs the PostgreSQL store tests against a real server")
        pytest.skip("no PostgreSQL server (set JOBGATE_TEST_POSTGRES_URL, or run scripts/dev test)")
    return url


@pytest.fixture
def fresh_postgres():
    import psycopg

    base = postgres_url()
    name = f"jobgate_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = base.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """(store.path, store.url) for a fresh store of each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "store"), None
    return str(tmp_path / "unused"), request.getfixturevalue("fresh_postgres")


@pytest.fixture
def gate(backend, tmp_path):
    path, url = backend
    config = Config.model_validate({"store": {"path": path, "url": url}, "jobs": {"results_root": str(tmp_path / "results")}})
    g = Gate(config, open_store(path, url))
    yield g
    g.close()
    g.store.close()


@pytest.fixture
def served(backend, tmp_path):
    """A real server on port 0 whose store is each backend in turn."""
    r = Running(config_on(backend, tmp_path))
    yield r
    r.close()
