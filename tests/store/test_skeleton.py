"""The stores share one skeleton: every operation of the `JobStore` Protocol is written
once, in `SqlStore`, and a backend is its dialect only; the lifecycle the store writes
is the one the core's job-record kind checks."""

from __future__ import annotations

import jobgate._core as core
from jobgate.store import JobStore
from jobgate.store.base import SOURCES, STATES, TERMINAL
from jobgate.store.postgres import PostgresStore
from jobgate.store.skeleton import SqlStore
from jobgate.store.sqlite import SqliteStore

OPERATIONS = {name for name in vars(JobStore) if not name.startswith("_")}


def test_every_operation_of_the_protocol_is_written_once():
    assert {"admit", "admit_many", "recall", "get", "document", "project", "list", "mark", "transitions", "latest", "usage", "gpus_in_use", "close"} <= OPERATIONS
    assert OPERATIONS <= set(dir(SqlStore))
    for store in (SqliteStore, PostgresStore):
        assert issubclass(store, SqlStore)
        # What a backend may define of its own: closing what it opened.
        assert OPERATIONS & set(vars(store)) == {"close"}, store.__name__


def test_the_lifecycle_is_the_cores():
    assert (STATES, TERMINAL, SOURCES) == (core.RECORD_STATES, core.RECORD_TERMINAL, core.RECORD_SOURCES)
    assert set(TERMINAL) < set(STATES) and STATES[0] == "PENDING"


# What a store gives of its own (`SqlStore`'s dialect): its spellings, its connections,
# its driver's failures, a commit group's round trips and its core writer (the rows it
# takes, what its failures are). Every other member of the
# skeleton is a transaction, written once.
DIALECT = {
    "__init__", "MARK", "LOCKING", "PRUNE", "MIGRATIONS", "syncs_commits", "close",
    "_reading", "_writing", "_recalling", "_translate", "_log_fields", "_migrating", "_migrate_one",
    "_holds", "_loaded", "_message_stored", "_message_read", "_any",
    "_numbers_unread", "_group_read", "_write_group", "_write_unread", "_wrote",
    "_more_numbers", "_failed", "_hand_to_writer",
}  # fmt: skip


def test_a_store_writes_only_its_dialect():
    skeleton = {name for name in vars(SqlStore) if not name.startswith("__") or name == "__init__"}
    assert DIALECT <= skeleton
    assert {"_admit_group", "_open", "_migrate", "_prune", "_export", "mark"} <= skeleton - DIALECT
    for store in (SqliteStore, PostgresStore):
        assert skeleton & set(vars(store)) <= DIALECT, (store.__name__, sorted(skeleton & set(vars(store)) - DIALECT))
