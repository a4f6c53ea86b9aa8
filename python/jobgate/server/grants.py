"""Grants: what an account may do, from its roles and its projects (SPEC §5), and
every refusal made visible.

| role | may |
|---|---|
| `submitter` | admit into its projects (dry runs too), `RecipeStatus`, read and watch the jobs of its projects |
| `reader` | read and watch the jobs of its projects |
| `backend` | append transitions to any job (`MarkJob`), read and watch every job |
| `admin` | everything, in every project |

The table (`NEEDS`) fails closed: an RPC it does not name is PERMISSION_DENIED to
every role, before any servicer runs (`FailClosed`), and what is open to every caller
is listed as such. A job the caller may not see is NOT_FOUND, exactly as an unknown
id; an RPC its roles do not allow is PERMISSION_DENIED naming the roles that would; a
JobSpec for a project outside its grant is the report violation
`forge.project.forbidden`, applied by the core with the projects handed to it. Each
refusal is one structured log line (request id, account, RPC, job or project, what
was missing) and a count in `jobgate_denials_total`.

Owns the meaning of the roles and the denial record. Must not read credentials
(`auth`) or judge a document (the core).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, NoReturn

import grpc

from jobgate.config import ANONYMOUS, Account
from jobgate.server import errors
from jobgate.server.calls import current_request_id
from jobgate.server.gate import Grant
from jobgate.server.metrics import Metrics
from jobgate.server.shapes import shaped_as

log = logging.getLogger("jobgate.server")

EVERY_PROJECT = "*"
ADMISSION, JOBS = "jobgate.v1.AdmissionService", "jobgate.v1.JobService"
HEALTH = "grpc.health.v1.Health"
EVERY_ROLE = ("submitter", "reader", "backend", "admin")
# Served to every caller, with credentials or without: health and reflection, which
# load balancers and grpcurl ask before any token, and which say nothing about jobs.
OPEN: Final = "open"
# What each RPC ("package.Service/Method") needs: the roles that allow it, or OPEN. An
# RPC missing here is refused to every role: a new one is closed until it is listed.
NEEDS: dict[str, tuple[str, ...] | Literal["open"]] = {
    f"{ADMISSION}/Admit": ("submitter", "admin"),
    f"{ADMISSION}/AdmitBatch": ("submitter", "admin"),
    f"{ADMISSION}/AdmitStream": ("submitter", "admin"),
    f"{ADMISSION}/RecipeStatus": ("submitter", "admin"),
    # Every role reads and watches, scoped to the jobs the caller sees.
    f"{JOBS}/GetJob": EVERY_ROLE,
    f"{JOBS}/ListJobs": EVERY_ROLE,
    f"{JOBS}/WatchJob": EVERY_ROLE,
    # Only a backend records what happened to a launch: a submitter marking its own
    # job COMPLETE would get its GPUs back while the job kept running.
    f"{JOBS}/MarkJob": ("backend", "admin"),
    f"{HEALTH}/Check": OPEN,
    f"{HEALTH}/Watch": OPEN,
    f"{HEALTH}/List": OPEN,
    "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": OPEN,
    "grpc.reflection.v1.ServerReflection/ServerReflectionInfo": OPEN,
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

    def may(self, method: str) -> bool:
        """Whether its roles allow `method` ("package.Service/Method"); never one the
        table does not name."""
        needs = NEEDS.get(method)
        if needs is None:
            return False
        return needs == OPEN or not self.roles.isdisjoint(needs)

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
        """One log line and `count` in the metric (a batch the core judged whole). The
        line carries the call's request id, as its request log line does."""
        self.metrics.denials.labels(rpc, reason).inc(count)
        rid = current_request_id()
        head = {"request_id": rid} if rid is not None else {}
        log.warning("denied", extra={"fields": {**head, "account": account, "rpc": rpc, "reason": reason, "missing": missing, **fields}})

    def unauthenticated(self, context: grpc.ServicerContext, rpc: str, why: str) -> NoReturn:
        self.record(rpc, UNAUTHENTICATED, None, "credentials", why=why)
        errors.abort(context, grpc.StatusCode.UNAUTHENTICATED, why, errors.CREDENTIALS_REFUSED, {"rpc": rpc})

    def permission_denied(self, context: grpc.ServicerContext, caller: Caller, method: str, **fields) -> NoReturn:
        """PERMISSION_DENIED naming the roles that would allow `method`, with a
        google.rpc.ErrorInfo a client can read them from."""
        needs = NEEDS.get(method)
        if not isinstance(needs, tuple):  # unnamed: an OPEN one is never refused
            self.unnamed(context, method, caller.name)
        rpc = method.rpartition("/")[2]
        missing = f"role {' or '.join(needs)}"
        self.record(rpc, ROLE, caller.name, missing, **fields)
        message = f"{rpc} needs the role {' or '.join(needs)}; account {caller.name!r} holds {', '.join(sorted(caller.roles))}"
        errors.abort(context, grpc.StatusCode.PERMISSION_DENIED, message, errors.ROLE_MISSING, {"account": caller.name, "rpc": rpc, "roles": ",".join(needs)})

    def unnamed(self, context: grpc.ServicerContext, method: str, account: str | None) -> NoReturn:
        """PERMISSION_DENIED for an RPC the grants table does not name, whoever calls."""
        rpc = method.rpartition("/")[2]
        self.record(rpc, ROLE, account, "an entry in the grants table", method=method)
        message = f"{method} is not named in this server's grants table: it is refused to every role"
        errors.abort(context, grpc.StatusCode.PERMISSION_DENIED, message, errors.ROLE_MISSING, {"rpc": rpc, "method": method, "roles": ""})

    def require(self, context: grpc.ServicerContext, caller: Caller, method: str, **fields) -> None:
        """Ends the call with PERMISSION_DENIED unless the caller's roles allow `method`
        ("package.Service/Method"); `fields` (the job) go to the log line."""
        if not caller.may(method):
            self.permission_denied(context, caller, method, **fields)

    def hidden(self, context: grpc.ServicerContext, caller: Caller, rpc: str, job_id: str, project: str) -> NoReturn:
        """NOT_FOUND for a job the caller may not see: the same answer as for an
        unknown id, so that no one learns which ids exist outside their grant."""
        self.record(rpc, NOT_VISIBLE, caller.name, f"project {project}", job_id=job_id, project=project)
        errors.job_not_found(context, job_id)


class FailClosed:
    """Every call to an RPC the grants table does not name is PERMISSION_DENIED before
    its servicer runs, whatever the caller's roles or credentials: an RPC added to the
    protos, or a handler registered by a library, is closed until the table names it.
    The RPCs it names pass on to their servicers, which check the caller's roles.
    `wrap` decides once per method, as it is registered (`handlers.Registrar`)."""

    def __init__(self, denials: Denials, identify: Callable[[grpc.ServicerContext], str | None]) -> None:
        self._denials, self._identify = denials, identify

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` of `method` ("/package.Service/Method") when the table names it;
        else one of the same shape refusing every call, its request left unread."""
        method = method.removeprefix("/")
        if method in NEEDS:
            return handler

        def refuse(_request, context):
            self._denials.unnamed(context, method, self._identify(context))

        return shaped_as(handler, refuse, request_deserializer=None, response_serializer=None)
