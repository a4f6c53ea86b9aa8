"""Grants: what an account may do, from its roles and its projects (SPEC §5), and
every refusal made visible.

| role | may |
|---|---|
| `submitter` | admit into its projects (dry runs too), `RecipeStatus`, read and watch the jobs of its projects |
| `reader` | read and watch the jobs of its projects |
| `backend` | append transitions to any job (`MarkJob`), read and watch every job |
| `admin` | everything, in every project |

A job the caller may not see is NOT_FOUND, exactly as an unknown id; an RPC its roles
do not allow is PERMISSION_DENIED naming the roles that would; a JobSpec for a project
outside its grant is the report violation `forge.project.forbidden`, applied by the
core with the projects handed to it. Each refusal is one structured log line (account,
RPC, job or project, what was missing) and a count in `jobgate_denials_total`.

Owns the meaning of the roles and the denial record. Must not read credentials
(`auth`) or judge a document (the core).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NoReturn

import grpc

from jobgate.config import ANONYMOUS, Account
from jobgate.server import errors
from jobgate.server.gate import Grant
from jobgate.server.metrics import Metrics

log = logging.getLogger("jobgate.server")

EVERY_PROJECT = "*"
# The roles that allow each RPC; GetJob, ListJobs and WatchJob are open to every role,
# scoped to the jobs the caller sees.
NEEDS: dict[str, tuple[str, ...]] = {
    "Admit": ("submitter", "admin"),
    "AdmitBatch": ("submitter", "admin"),
    "AdmitStream": ("submitter", "admin"),
    "RecipeStatus": ("submitter", "admin"),
    # Only a backend records what happened to a launch: a submitter marking its own
    # job COMPLETE would get its GPUs back while the job kept running.
    "MarkJob": ("backend", "admin"),
}
# Roles that see every job, whatever their projects.
SEE_ALL = frozenset({"backend", "admin"})
# Why a call or a document was refused: the `reason` label of jobgate_denials_total.
UNAUTHENTICATED, ROLE, PROJECT, NOT_VISIBLE = "unauthenticated", "role", "project", "not_visible"


@dataclass(frozen=True)
class Caller:
    """An authenticated account and its grant."""

    name: str
    roles: frozenset[str]
    projects: tuple[str, ...]
    # Where its spec-bundles are admitted: they name no project.
    home: str

    @classmethod
    def of(cls, name: str, account: Account, default_project: str) -> Caller:
        first = account.projects[0] if account.projects else EVERY_PROJECT
        return cls(name, frozenset(account.roles), tuple(account.projects), default_project if first == EVERY_PROJECT else first)

    @classmethod
    def anonymous(cls, default_project: str) -> Caller:
        """The caller without credentials where server.allow_anonymous lets it in (a
        local demo, on loopback only): an admin."""
        return cls(ANONYMOUS, frozenset({"admin"}), (EVERY_PROJECT,), default_project)

    def may(self, rpc: str) -> bool:
        needs = NEEDS.get(rpc)
        return needs is None or not self.roles.isdisjoint(needs)

    @property
    def grant(self) -> Grant:
        """Where it may admit, as the core and the gate take it."""
        return Grant((EVERY_PROJECT,) if "admin" in self.roles else self.projects, self.home)

    @property
    def visible(self) -> frozenset[str] | None:
        """The projects whose jobs it sees; None for every project."""
        if not self.roles.isdisjoint(SEE_ALL) or EVERY_PROJECT in self.projects:
            return None
        return frozenset(self.projects)

    def sees(self, project: str) -> bool:
        visible = self.visible
        return visible is None or project in visible


class Denials:
    """Records each refusal (a log line and the metric) and ends the call with its
    status where the refusal is the call's."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def record(self, rpc: str, reason: str, account: str | None, missing: str, *, count: int = 1, **fields) -> None:
        """One log line and `count` in the metric (a batch the core judged whole)."""
        self.metrics.denials.labels(rpc, reason).inc(count)
        log.warning("denied", extra={"fields": {"account": account, "rpc": rpc, "reason": reason, "missing": missing, **fields}})

    def unauthenticated(self, context: grpc.ServicerContext, rpc: str, why: str) -> NoReturn:
        self.record(rpc, UNAUTHENTICATED, None, "credentials", why=why)
        errors.abort(context, grpc.StatusCode.UNAUTHENTICATED, why, errors.CREDENTIALS_REFUSED, {"rpc": rpc})

    def permission_denied(self, context: grpc.ServicerContext, caller: Caller, rpc: str, **fields) -> NoReturn:
        """PERMISSION_DENIED naming the roles that would allow `rpc`, with a
        google.rpc.ErrorInfo a client can read them from."""
        needs = NEEDS[rpc]
        missing = f"role {' or '.join(needs)}"
        self.record(rpc, ROLE, caller.name, missing, **fields)
        message = f"{rpc} needs the role {' or '.join(needs)}; account {caller.name!r} holds {', '.join(sorted(caller.roles))}"
        errors.abort(context, grpc.StatusCode.PERMISSION_DENIED, message, errors.ROLE_MISSING, {"account": caller.name, "rpc": rpc, "roles": ",".join(needs)})

    def require(self, context: grpc.ServicerContext, caller: Caller, rpc: str, **fields) -> None:
        """Ends the call with PERMISSION_DENIED unless the caller's roles allow `rpc`;
        `fields` (the job) go to the log line."""
        if not caller.may(rpc):
            self.permission_denied(context, caller, rpc, **fields)

    def hidden(self, context: grpc.ServicerContext, caller: Caller, rpc: str, job_id: str, project: str) -> NoReturn:
        """NOT_FOUND for a job the caller may not see: the same answer as for an
        unknown id, so that no one learns which ids exist outside their grant."""
        self.record(rpc, NOT_VISIBLE, caller.name, f"project {project}", job_id=job_id, project=project)
        errors.job_not_found(context, job_id)
