"""The store interface: what admission and the JobService need from any backend."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

STATES = ("PENDING", "RUNNING", "COMPLETE", "ERROR", "CANCELED", "UNKNOWN")
TERMINAL = ("COMPLETE", "ERROR", "CANCELED")
SOURCES = ("agent", "poller", "backend-hook")
ERR_CLASSES = ("ERR_INFRA", "ERR_PROGRAM")


class JobNotFound(LookupError):
    """No record has this id."""


class TerminalState(ValueError):
    """A transition out of a terminal state."""


@dataclass(frozen=True)
class NewJob:
    """Everything a record is opened with; the store adds the id and the timestamps."""

    id_prefix: str
    project: str
    owner: str
    gpus: int
    image: str
    network_arch: str
    action: str
    platform: str
    storage_tier: str
    results_root: str
    document: bytes
    upload_excludes: list[str] = field(default_factory=list)


def job_suffix(prefix: str, number: int) -> str:
    """`<prefix>-<hex>`: a number no other job has (a sequence, never reused) followed by
    random hex, so ids cannot collide and are not guessable from one another."""
    return f"{prefix}-{number:06x}{secrets.token_hex(3)}"


def opened_record(job: NewJob, job_id: str, ts: str) -> dict[str, Any]:
    """The record as admission opens it (its one PENDING transition is stored apart)."""
    return {
        "schema_version": 1,
        "id": job_id,
        "platform": job.platform,
        "backend_ref": None,
        "image": job.image,
        "network_arch": job.network_arch,
        "action": job.action,
        "results_dir": f"{job.results_root.rstrip('/')}/{job_id}",
        "storage_tier": job.storage_tier,
        "upload_excludes": job.upload_excludes,
        "submitted_at": ts,
        "terminal_state": None,
        "redacted": True,
    }


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


# The credential shapes of tao.record.secret, replaced before anything is stored.
_REDACT = [
    (re.compile(r"(?<![A-Za-z0-9_])(hf_|ghp_)[A-Za-z0-9]{8,}"), r"\1***"),
    (re.compile(r"(?<![A-Za-z0-9_])(nvapi-|sk-)[A-Za-z0-9_-]{8,}"), r"\1***"),
    (re.compile(r"(?<![A-Za-z0-9_])AKIA[0-9A-Z]{16}"), "AKIA***"),
    (re.compile(r"(://[^/\s:@]+:)[^/\s@]+@"), r"\1***@"),
    (re.compile(r"(?i)\b([A-Za-z0-9_-]*(?:SECRET|PASSWORD|TOKEN|API[_-]?KEY))=(?![\"']?\$)(\"[^\"]*\"|'[^']*'|[^\s;&]+)"), r"\1=***"),
]


def redact(text: str) -> str:
    for pattern, replacement in _REDACT:
        text = pattern.sub(replacement, text)
    return text


def list_filter(mark: str, *, state: str, project: str, owner: str, terminal: bool | None, after: str) -> tuple[str, list[Any]]:
    """The WHERE clause of ListJobs and its arguments, with `mark` as the placeholder."""
    clauses, args = [f"seq > {mark}"], [int(after or 0)]
    for column, value in (("state", state), ("project", project), ("owner", owner)):
        if value:
            clauses.append(f"{column} = {mark}")
            args.append(value)
    if terminal is not None:
        clauses.append(f"terminal = {mark}")
        args.append(terminal)
    return " AND ".join(clauses), args


def check_mark(state: str, source: str, err_class: str) -> None:
    """Refuses a transition outside the fixed vocabulary, before any store is touched."""
    if state not in STATES:
        raise ValueError(f"state {state!r} is not one of {', '.join(STATES)}")
    if source not in SOURCES:
        raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
    if err_class and err_class not in ERR_CLASSES:
        raise ValueError(f"err_class {err_class!r} is not one of {', '.join(ERR_CLASSES)}")


def apply_mark(job_id: str, record: dict[str, Any], current: str, terminal: bool, state: str, source: str, backend_ref: str, err_class: str) -> bool:
    """Updates `record` for a mark; returns whether a transition is appended. A terminal
    job refuses any other state; the same terminal state may only fill in what was missing."""
    if terminal:
        if state != current:
            raise TerminalState(f"job {job_id} is {current}, a terminal state; it cannot become {state}")
        if backend_ref and record.get("backend_ref") is None:
            record["backend_ref"] = backend_ref
        if err_class and record.get("err_class") is None:
            record["err_class"] = err_class
        return False
    if backend_ref:
        record["backend_ref"] = backend_ref
    if state in TERMINAL:
        record["terminal_state"] = state
        record["terminal_write_by"] = source
        if err_class:
            record["err_class"] = err_class
    return True


class JobStore(Protocol):
    def admit(self, job: NewJob, decide: Callable[[int], bool]) -> str | None:
        """Atomically: reads the project's GPUs in unfinished jobs, calls `decide(in_use)`,
        and opens the record (one PENDING transition) only when it returns True."""

    def admit_many(self, items: list[tuple[NewJob, Callable[[int], bool]]]) -> list[str | None]:
        """`admit` for several jobs in order, in one transaction (one commit)."""

    def gpus_in_use(self, project: str) -> int: ...

    def usage(self) -> dict[str, int]:
        """GPUs held by unfinished jobs, per project (projects holding none may be left out)."""

    def get(self, job_id: str) -> dict[str, Any]:
        """The record as exported (job_record.schema.json); raises JobNotFound."""

    def list(self, *, state: str = "", project: str = "", owner: str = "", terminal: bool | None = None, limit: int = 50, after: str = "") -> list[dict[str, Any]]: ...

    def mark(self, job_id: str, state: str, message: str, source: str, backend_ref: str = "", err_class: str = "") -> dict[str, Any]:
        """Appends a transition; raises JobNotFound or TerminalState."""

    def transitions(self, job_id: str, after: int = 0) -> Iterator[tuple[int, dict[str, Any]]]: ...

    def close(self) -> None: ...
