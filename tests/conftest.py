"""Fixtures every layer's tests share; the helpers are in tests/helpers.py."""

from __future__ import annotations

import pytest

# The helpers' asserts report as the tests' own do.
pytest.register_assert_rewrite("tests.helpers", "tests.files.helpers", "tests.files.archives", "tests.server.helpers", "tests.store.helpers")

import jobgate  # noqa: E402


@pytest.fixture(scope="session")
def validator() -> jobgate.Validator:
    return jobgate.Validator()
