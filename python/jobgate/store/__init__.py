"""Job records: the store interface admission and the JobService use, and its backends.

Owns persistence only: ids, transitions, quota accounting. Must not judge documents
(the Rust core does) nor speak gRPC (the server does).
"""

from jobgate.store.base import JobNotFound, JobStore, NewJob, TerminalState
from jobgate.store.sqlite import SqliteStore

__all__ = ["JobNotFound", "JobStore", "NewJob", "SqliteStore", "TerminalState"]


def open_store(path: str) -> JobStore:
    return SqliteStore(path)
