"""The `running` fixture: a real server on port 0 (tests/server/helpers.py)."""

from __future__ import annotations

import pytest

from tests.server.helpers import Running, config_for


@pytest.fixture
def running(tmp_path):
    r = Running(config_for(tmp_path))
    yield r
    r.close()
