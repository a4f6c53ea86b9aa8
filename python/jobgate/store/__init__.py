"""Job records: the store interface admission and the JobService use, and its backends.

Owns persistence only: ids, transitions, quota accounting, idempotency keys, and the
bounds on what is stored. Must not judge documents (the Rust core does) nor speak gRPC
(the server does).
"""

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
    "location",
    "open_configured_store",
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


def open_configured_store(config) -> JobStore:
    """The store a configuration (`jobgate.config.Config`) names, with its bounds."""
    return open_store(
        config.store.path,
        config.store.url,
        config.store.sqlite_synchronous,
        connections=config.store.connections,
        max_message_bytes=config.limits.max_message_bytes,
        max_transitions=config.limits.max_transitions,
    )


def location(path: str, url: str | None = None) -> str:
    """Where `open_store(path, url)` keeps records, fit for a log line: the PostgreSQL
    URL without its password (in the user part, a password= parameter or a
    key=value connection string), else the SQLite directory, resolved."""
    if not url:
        return str(Path(path).resolve())
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):  # a key=value connection string
        return re.sub(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
