"""Job records: the store interface admission and the JobService use, and its backends.

Owns persistence only: ids, transitions, quota accounting. Must not judge documents
(the Rust core does) nor speak gRPC (the server does).
"""

from jobgate.store.base import JobNotFound, JobStore, NewJob, TerminalState
from jobgate.store.sqlite import SqliteStore

__all__ = ["JobNotFound", "JobStore", "NewJob", "SqliteStore", "TerminalState", "open_store"]


def open_store(path: str, url: str | None = None, sqlite_synchronous: str = "normal") -> JobStore:
    """PostgreSQL when a URL is configured (several replicas), else SQLite in `path`."""
    if url:
        from jobgate.store.postgres import PostgresStore

        return PostgresStore(url)
    return SqliteStore(path, sqlite_synchronous)
