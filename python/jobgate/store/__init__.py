"""Job records: the store interface admission and the JobService use, and its backends.

Owns persistence only: ids, transitions, quota accounting, idempotency keys, and the
bounds on what is stored. Must not judge documents (the Rust core does) nor speak gRPC
(the server does).
"""

from jobgate.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TRANSITIONS
from jobgate.store.base import (
    IdempotencyKey,
    JobNotFound,
    JobStore,
    NewJob,
    RecordFull,
    Remembered,
    StoreFull,
    StoreUnavailable,
    TerminalState,
    Unstorable,
)
from jobgate.store.sqlite import SqliteStore

__all__ = [
    "IdempotencyKey",
    "JobNotFound",
    "JobStore",
    "NewJob",
    "RecordFull",
    "Remembered",
    "SqliteStore",
    "StoreFull",
    "StoreUnavailable",
    "TerminalState",
    "Unstorable",
    "open_store",
]


def open_store(
    path: str,
    url: str | None = None,
    sqlite_synchronous: str = "normal",
    *,
    connections: int = 16,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_transitions: int = DEFAULT_MAX_TRANSITIONS,
) -> JobStore:
    """PostgreSQL when a URL is configured (several replicas), else SQLite in `path`."""
    limits = {"connections": connections, "max_message_bytes": max_message_bytes, "max_transitions": max_transitions}
    if url:
        from jobgate.store.postgres import PostgresStore

        return PostgresStore(url, **limits)
    return SqliteStore(path, sqlite_synchronous, **limits)
