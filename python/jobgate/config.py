"""`jobgate.toml`: the one configuration file, as a typed pydantic model.

Owns loading and validating the deployment settings (limits, catalog, registry
allowlist, GPU series and quotas, accounts and their grants) and handing the core its
part of them, with the environment's overrides (`JOBGATE_SECTION__KEY`) on top of the
file. Every error names the file or the variable, and the key. Must not apply any
admission rule itself: rules live in the Rust core; what a grant allows is decided by
the service (`jobgate.server.grants`).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from jobgate import _core, suppressions
from jobgate.sources import NotRegular, open_regular

RULE_IDS = [r["rule"] for r in _core.rules()]  # for "did you mean" on a [rules] typo

# The defaults of the limits the core reads are the core's own (rust/src/limits.rs).
CORE_LIMITS: dict[str, int] = dict(_core.DEFAULT_LIMITS)
DEFAULT_MAX_DOCUMENT_BYTES = CORE_LIMITS["max_document_bytes"]
DEFAULT_MAX_DEPTH = CORE_LIMITS["max_depth"]
# A transition's message as stored; longer ones keep their head and a marker.
DEFAULT_MAX_MESSAGE_BYTES = 4096
# With the defaults a record (at most 512 messages of 4 KiB, plus what its document
# gave it, at most max_document_bytes) fits in 4 MiB, gRPC's default receive limit.
DEFAULT_MAX_TRANSITIONS = 512
# The roles an account may hold; what each allows is fixed (README, "Accounts and grants").
ROLES = ("submitter", "reader", "backend", "admin")
# The account of callers without credentials where server.allow_anonymous lets them in.
ANONYMOUS = "anonymous"
# An account's name: its [accounts.NAME] key, the common name of its client certificate,
# and the owner stamped on its documents.
ACCOUNT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
TOKEN_HASH = re.compile(r"sha256:[0-9a-f]{64}")
# An admission's idempotency key is remembered for a day unless [jobs] says otherwise.
DEFAULT_IDEMPOTENCY_WINDOW = 24 * 3600.0
DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d)")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class ConfigError(Exception):
    """A configuration that cannot be used; the message names the file and the key."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Model):
    max_document_bytes: int = Field(DEFAULT_MAX_DOCUMENT_BYTES, gt=0, description="the largest document checked (limits.size beyond); also a package's bundle document")
    max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=1, le=CORE_LIMITS["max_depth_ceiling"], description="the deepest nesting a document may have (limits.depth beyond)")
    max_batch: int = Field(4096, ge=1, description="documents per AdmitBatch / check_many call")
    max_package_bytes: int = Field(CORE_LIMITS["max_package_bytes"], gt=0, description="all members of a package, inflated; and each file under a root")
    max_package_members: int = Field(CORE_LIMITS["max_package_members"], gt=0, description="members a package may hold")
    max_package_ratio: int = Field(CORE_LIMITS["max_package_ratio"], ge=1, description="bytes a package may inflate to per byte of its own, once past 16 MiB (limits.size beyond): bounds the work of reading one, as max_package_bytes bounds what it holds")
    package_cache_bytes: int = Field(CORE_LIMITS["package_cache_bytes"], ge=0, description="memory, per process, for packages verified once and then served by the BLAKE3 of their bytes (a hit reports exactly what a miss would); 0 turns it off")
    max_violations: int = Field(CORE_LIMITS["max_violations"], ge=1, description="violations listed per report; the rest are counted in limits.violations")
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=64, description="a transition message as stored, UTF-8; the rest is cut with a marker")
    max_transitions: int = Field(DEFAULT_MAX_TRANSITIONS, ge=2, description="transitions a record keeps; beyond, only a terminal state is still recorded")


DIGEST = r"^sha256:[0-9a-f]{64}$"


class RecipeRef(_Model):
    name: str = Field(description="<framework>/<method>, as in recipe.lock.json")
    version: str = Field(description="the recipe version the catalog serves (forge.handshake.version)")
    digest: str = Field(pattern=DIGEST, description="sha256:<64 lowercase hex>, as recipe.lock.json has it")
    manifest_digest: str | None = Field(None, pattern=DIGEST, description="carried by recipe.lock.json; not compared")
    template_digest: str | None = Field(None, pattern=DIGEST, description="carried by recipe.lock.json; not compared")


class FrameworkRef(_Model):
    kind: str = Field("", description="the framework, as recipe.lock.json names it")
    version: str = Field("", description="its version, as recipe.lock.json names it")
    runtime_id: str = Field(description="the runtime a JobSpec's framework.runtime_id must name (forge.handshake.runtime_id)")


class Requires(_Model):
    core: str | None = Field(None, description="PEP 440 range of provenance.core_version (forge.core_version.unsupported)")

    @field_validator("core")
    @classmethod
    def _pep440(cls, value: str | None) -> str | None:
        # Read as the core reads it for forge.core_version.unsupported and RecipeStatus.
        if value is not None:
            try:
                _core.check_version_range(value)
            except ValueError as e:
                raise ValueError(f"{value!r} is not a PEP 440 specifier ({e})") from None
        return value


class CatalogEntry(_Model):
    """One served recipe, in the shape of `recipe.lock.json`, plus deployment flags.

    ``lock = "path/recipe.lock.json"`` reads recipe, framework and requires from a lock
    file (relative to the configuration file); keys given here override it.
    """

    recipe: RecipeRef = Field(description="name, version and digest of the served recipe")
    framework: FrameworkRef = Field(description="the framework and runtime it runs on")
    requires: Requires = Field(Requires(), description="what it needs of the client")
    observability: Literal["platform", "external"] = Field("platform", description="external: a JobSpec must give observability_url; platform: it must not")
    custom: bool = Field(False, description="a custom recipe: a JobSpec must give framework.image")
    # Carried by recipe.lock.json files, accepted so a lock can be used as it is.
    apiVersion: str | None = Field(None, description="carried by recipe.lock.json; ignored")  # noqa: N815
    created_by: dict[str, Any] | None = Field(None, description="carried by recipe.lock.json; ignored")


class Registry(_Model):
    allow: list[str] | None = Field(None, description='registry hosts images may come from ("*.corp.example.com" patterns); unset allows any (forge.framework.image_registry)')


class Gpus(_Model):
    series: list[str] | None = Field(None, description="GPU series pools may ask for; unset allows any (forge.resources.series)")
    max_per_job: int | None = Field(None, ge=1, description="GPUs one job may ask for, JobSpec or spec-bundle (forge.quota.job)")


class Quota(_Model):
    default: int | None = Field(None, ge=0, description="GPUs a project without its own entry may hold")
    projects: dict[str, int] = Field({}, description="GPUs each named project may hold in unfinished jobs, JobSpecs and spec-bundles alike (forge.quota.project)")


class Tls(_Model):
    """TLS for the service; with client_ca, mutual TLS: the account is the client
    certificate's common name."""

    cert: str = Field(description="the server's certificate chain (PEM file)")
    key: str = Field(description="its private key (PEM file)")
    client_ca: str | None = Field(None, description="the CA of client certificates: mutual TLS, the account is the certificate's common name")


class Server(_Model):
    """How the gRPC service listens and whom it lets in."""

    tls: Tls | None = Field(None, description="serve TLS; unset serves plaintext")
    listen: str = Field("127.0.0.1:50051", description="host:port the service listens on")
    # The form before accounts had grants; kept only to refuse it with the way forward
    # (every token holder could do anything: there is no safe grant to guess for it).
    tokens: Any = Field(None, description="refused: the form before [accounts.NAME]; the error says how to move each entry")
    # Local demos only, refused anywhere but loopback: a caller without credentials is
    # the account "anonymous", which holds the admin role.
    allow_anonymous: bool = Field(False, description="callers without credentials are the admin account anonymous; loopback only")
    # Bearer tokens in plaintext can be read off the wire: off loopback they need TLS,
    # here or in a proxy in front of the service that terminates it.
    allow_insecure: bool = Field(False, description="accept bearer tokens without TLS off loopback (TLS is terminated in front of the service); without it, serve refuses to")
    max_message_bytes: int = Field(16 << 20, gt=0, description="the largest request or response message; a batch's reports are cut to fit")
    # host:port of the Prometheus /metrics endpoint; unset turns it off.
    metrics_listen: str | None = Field(None, description="host:port of the Prometheus /metrics endpoint; unset turns it off")
    # Each open stream (WatchJob, AdmitStream, reflection) holds a servicer thread for
    # as long as it is open: streams get their own threads, up to max_streams, and
    # unary calls and health checks the `threads` others, so no number of streams can
    # starve them. Beyond a limit a stream is refused with RESOURCE_EXHAUSTED.
    max_streams: int = Field(256, ge=1, description="streams open at once, all accounts together")
    max_streams_per_account: int = Field(64, ge=1, description="streams one account may hold open at once")
    # Unset, by the store (`server.app.unary_threads`): few threads serve more calls a
    # second than many, unless the calls wait on a database server's commits.
    threads: int | None = Field(None, ge=1, description="servicer threads for unary calls and health checks; unset: 2 with SQLite, 32 with a database server (store.url)")
    # WatchJob wakes at once for marks made through this server; one shared poll of the
    # store finds those made elsewhere (other replicas, `jobgate jobs mark`).
    watch_poll_seconds: float = Field(0.5, gt=0, le=60, description="how often WatchJob looks for marks made elsewhere")
    # On SIGTERM: health NOT_SERVING, streams ended, then unary calls in flight get
    # this long to answer; the process exits as soon as the last has.
    shutdown_grace_s: float = Field(10.0, ge=0, le=600, description="on SIGTERM, how long calls in flight may take to answer; a call still running 2 s after that is left behind and the process exits 1")
    request_log: Literal["info", "warning", "off"] = Field("info", description="info: one JSON line per call on stderr (request id, account, RPC, status, verdict, job id, rule ids, latency); off or warning: none")

    @field_validator("tokens")
    @classmethod
    def _moved(cls, tokens: Any) -> None:
        names = ", ".join(f"[accounts.{name}]" for name in tokens) if isinstance(tokens, dict) and tokens else "[accounts.NAME]"
        raise ValueError(
            f"replaced by one table per account holding its token hash and its grant: move each entry to {names} "
            'with token = "sha256:…", projects = ["…"] and roles = ["submitter"] (or reader, backend, admin); '
            "`jobgate token new NAME` prints such a table"
        )


class Jobs(_Model):
    """What admission writes into each job record."""

    results_root: str = Field("./results", description="a job's results_dir is <results_root>/<job_id>; the store must lie outside it")
    platform: str = Field("local", pattern=r"^[a-z0-9][a-z0-9-]{0,31}$", description="the platform written into each record")
    storage_tier: Literal["A", "B", "C"] = Field("A", description="the storage tier written into each record")
    # A spec-bundle names no project: it is admitted into its account's first listed
    # project, or into this one for an account whose first entry is "*" (and admins
    # that list none). Its GPUs count in that project's usage.
    default_project: str = Field("default", min_length=1, description="the project of a spec-bundle whose account lists no project but \"*\"")
    # How long an admission's idempotency key is remembered: a retry within it gets the
    # first response. Seconds, or a number with a unit: "90s", "30m", "24h", "7d".
    idempotency_window: float = Field(DEFAULT_IDEMPOTENCY_WINDOW, gt=0, description="seconds an idempotency key is remembered")

    @field_validator("idempotency_window", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = DURATION.fullmatch(value.strip())
        if match is None:
            raise ValueError(f'{value!r} is not a duration: give seconds, or a number with a unit such as "90s", "30m", "24h" or "7d"')
        return float(match[1]) * DURATION_UNITS[match[2]]


class Store(_Model):
    """Where job records live: SQLite by default, PostgreSQL by URL."""

    path: str = Field("./.jobgate", description="the SQLite store's directory")
    url: str | None = Field(None, description="a PostgreSQL URL (postgresql://…): the store for several replicas; path is then unused. Unless it sets them (or names a libpq service), connections get connect_timeout=10, tcp_user_timeout=30000 and keepalives")
    # SQLite in WAL mode: "normal" survives any process crash (records stay whole or
    # absent) and syncs at checkpoints; "full" also survives power loss, one fsync per commit.
    sqlite_synchronous: Literal["normal", "full"] = Field("normal", description="normal survives any process crash; full also power loss, one fsync per commit")
    # Database connections a server process opens, at most: they are lent to a thread
    # for one operation, so many threads (one per open stream) share a few.
    connections: int = Field(16, ge=1, le=1000, description="database connections a server process opens, at most, besides its core writer's one")


class Account(_Model):
    """One caller and its grant: `[accounts.NAME]`. With `token` (the hash of a bearer
    token) the account authenticates by that token; without one, by a client
    certificate whose common name is NAME (mutual TLS, `server.tls.client_ca`)."""

    token: str | None = Field(None, description="sha256:<hex> of its bearer token; absent for an account named by its client certificate")
    # Where it may submit and whose jobs it may read; "*" for every project. The first
    # listed is where its spec-bundles go (they name no project).
    projects: list[str] = Field([], description='projects it may submit to and read ("*" for every one); the first is its spec-bundles\' project')
    roles: list[str] = Field(description="submitter, reader, backend and/or admin")

    @field_validator("token")
    @classmethod
    def _hashed(cls, token: str | None) -> str | None:
        if token is not None and not TOKEN_HASH.fullmatch(token):
            raise ValueError("must be sha256:<64 lowercase hex>, the hash of the token, never the token (`jobgate token new NAME` prints both)")
        return token

    @field_validator("projects")
    @classmethod
    def _named(cls, projects: list[str]) -> list[str]:
        if any(not p.strip() for p in projects):
            raise ValueError('a project is a non-empty name, or "*" for every project')
        return projects

    @field_validator("roles")
    @classmethod
    def _known(cls, roles: list[str]) -> list[str]:
        if not roles:
            raise ValueError(f"an account needs at least one role: {', '.join(ROLES)}")
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise ValueError(f"unknown role {unknown[0]!r}; the roles are {', '.join(ROLES)}")
        return roles


def account_problem(name: str, account: Account, server: Server) -> str | None:
    """Why `[accounts.NAME]` cannot be used on `server`, or None: what a start and
    every reload refuse beside the shape of each field."""
    if name == ANONYMOUS:
        return f"[accounts.{name}]: {name!r} is the account of callers without credentials (server.allow_anonymous); choose another name"
    if not ACCOUNT_NAME.fullmatch(name):
        return f"[accounts.{name}]: an account name is 1 to 128 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
    if account.token is None and (server.tls is None or server.tls.client_ca is None):
        return f"[accounts.{name}] has no token, and without server.tls.client_ca no client certificate can name it: it could never call"
    roles = set(account.roles)
    if not account.projects and roles & {"submitter", "reader"} and not roles & {"backend", "admin"}:
        return f'[accounts.{name}] is a {" and ".join(r for r in ROLES if r in roles)} without projects: list the projects it acts in, or ["*"] for every one'
    return None


def shared_token(accounts: dict[str, Account]) -> tuple[str, str] | None:
    """Two accounts holding the same token hash, or None: such a token would name
    whichever was read last."""
    holders: dict[str, str] = {}
    for name, account in accounts.items():
        if account.token is None:
            continue
        if account.token in holders:
            return holders[account.token], name
        holders[account.token] = name
    return None


def shared_token_problem(first: str, second: str) -> str:
    return f"[accounts.{first}] and [accounts.{second}] hold the same token hash; each account needs a token of its own"


class Shadow(_Model):
    """Shadow admission: each admission judged under a candidate configuration as well."""

    config: str | None = Field(None, description="a candidate jobgate.toml (relative to this file): every admission is judged under it too, off the request's path, and each disagreement logged and counted; responses never change. Unset: off")
    queue: int = Field(1024, ge=1, le=1_000_000, description="admissions waiting for their shadow judgment, at most; beyond, they are dropped (and counted)")
    queue_bytes: int = Field(64 << 20, ge=1 << 20, description="bytes of documents and packages waiting, at most; beyond, they are dropped (and counted)")


class Config(_Model):
    limits: Limits = Field(Limits(), description="sizes and counts every request is held to")
    server: Server = Field(Server(), description="how the service listens and whom it lets in")
    jobs: Jobs = Field(Jobs(), description="what admission writes into each job record")
    store: Store = Field(Store(), description="where job records live")
    registry: Registry = Field(Registry(), description="where images may come from")
    gpus: Gpus = Field(Gpus(), description="GPU series and the per-job limit")
    quota: Quota = Field(Quota(), description="GPUs each project may hold in unfinished jobs")
    shadow: Shadow = Field(Shadow(), description="a candidate configuration every admission is also judged under, to see whom it would refuse before it is served")
    rules: dict[str, Any] = Field(
        {},
        description='the severity of a rule for this deployment: "rule.id" = "error", "warning" or "off" (an off violation is still listed); [rules.projects.NAME] for one project\'s JobSpecs, before the deployment\'s; [rules.paths."GLOB"] with ignore = ["rule.id", ...] suppresses findings in the documents `check` and `revalidate` read at matching paths (README, "Suppressing a finding"); rules that protect the gate itself (json.*, limits.*, tao.supporting_file.*, tao.staging.*, forge.quota.*, forge.project.forbidden, kind.unknown, credentials) cannot be changed nor suppressed',
    )
    catalog: list[CatalogEntry] | None = Field(None, description='the served recipes, one [[catalog]] table each; `lock = "recipe.lock.json"` reads recipe, framework and requires from a lock file; unset turns the handshake rules off')
    accounts: dict[str, Account] = Field({}, description="one table per account: who may call, and their grant")
    source: str | None = Field(None, exclude=True, description="the file this was loaded from")

    @field_validator("rules")
    @classmethod
    def _enforceable(cls, rules: dict[str, Any]) -> dict[str, Any]:
        deployment, projects = split_rules(rules)
        paths = rules.get("paths", {})
        if not isinstance(paths, dict):
            raise ValueError('rules.paths: one table per path glob, [rules.paths."GLOB"] with ignore = ["rule.id", ...]')
        suppressions.path_rules(paths)
        try:
            _core.validate_rules(deployment, projects)  # the core's catalogue says which rules may change
        except ValueError as e:
            message = str(e).removeprefix("rules: ")
            unknown = [r for r in (*deployment, *(r for p in projects.values() for r in p)) if r not in RULE_IDS]
            if unknown:
                close = difflib.get_close_matches(unknown[0], RULE_IDS, n=1)
                message += f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(message) from None
        return rules

    def enforcement(self) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        """`[rules]` as the core takes it: the deployment's levels, and each project's."""
        return split_rules(self.rules)

    def path_rules(self) -> list[suppressions.PathRule]:
        """`[rules.paths]`: the rules suppressed in the documents at matching paths."""
        return suppressions.path_rules(self.rules.get("paths", {}))

    def path_base(self) -> Path:
        """Where `[rules.paths]` globs start: the configuration file's directory, or the
        working directory for a configuration that is not a file."""
        return Path(self.source).parent if self.source and self.source != ENVIRONMENT and Path(self.source).exists() else Path.cwd()

    @field_validator("accounts")
    @classmethod
    def _usable(cls, accounts: dict[str, Account], info: ValidationInfo) -> dict[str, Account]:
        server = info.data.get("server")
        if server is None:
            return accounts  # the [server] error is reported on its own
        for name, account in accounts.items():
            problem = account_problem(name, account, server)
            if problem:
                raise ValueError(problem)
        shared = shared_token(accounts)
        if shared:
            raise ValueError(shared_token_problem(*shared))
        return accounts

    @model_validator(mode="after")
    def _unique_recipes(self) -> Config:
        names = [e.recipe.name for e in self.catalog or ()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"catalog lists recipe {dupes[0]!r} more than once")
        return self

    def core_settings(self) -> _core.Settings:
        """The part of the configuration the Rust core reads, every key named."""
        rules, project_rules = self.enforcement()
        return _core.Settings(
            max_document_bytes=self.limits.max_document_bytes,
            max_depth=self.limits.max_depth,
            max_package_bytes=self.limits.max_package_bytes,
            max_package_members=self.limits.max_package_members,
            max_package_ratio=self.limits.max_package_ratio,
            package_cache_bytes=self.limits.package_cache_bytes,
            max_violations=self.limits.max_violations,
            registries=self.registry.allow,
            series=self.gpus.series,
            max_gpus_per_job=self.gpus.max_per_job,
            rules=rules,
            project_rules=project_rules,
            catalog=None
            if self.catalog is None
            else [
                _core.CatalogEntry(
                    name=e.recipe.name,
                    version=e.recipe.version,
                    digest=e.recipe.digest,
                    runtime_id=e.framework.runtime_id,
                    framework_kind=e.framework.kind,
                    requires_core=e.requires.core,
                    observability=e.observability,
                    custom=e.custom,
                )
                for e in self.catalog
            ],
        )


def split_rules(rules: dict[str, Any]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """`[rules]` apart: rule id → level, and `projects` → project → rule id → level
    (`paths`, the suppressions of `check`, is not the core's). Raises ValueError on
    anything else."""
    deployment: dict[str, str] = {}
    projects: dict[str, dict[str, str]] = {}
    for key, value in rules.items():
        if key == "paths":
            continue
        if key == "projects":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise ValueError("rules.projects: one table per project, [rules.projects.NAME]")
            for project, levels in value.items():
                bad = next((f"{k} = {v!r}" for k, v in levels.items() if not isinstance(v, str)), None)
                if bad:
                    raise ValueError(f'rules.projects.{project}: {bad}: a level is "error", "warning" or "off"')
                projects[project] = dict(levels)
        elif isinstance(value, str):
            deployment[key] = value
        else:
            raise ValueError(f'rules: {key} = {value!r}: a level is "error", "warning" or "off" (or [rules.projects.NAME])')
    return deployment, projects


def _read_locks(data: dict[str, Any], base: Path, source: str) -> dict[str, Any]:
    """Expands `lock = "file"` catalog entries into the lock file's content."""
    catalog = data.get("catalog")
    if not isinstance(catalog, list):
        return data
    entries = []
    for i, entry in enumerate(catalog):
        if isinstance(entry, dict) and "lock" in entry:
            entry = dict(entry)
            lock_path = base / str(entry.pop("lock"))
            try:
                lock = json.loads(lock_path.read_bytes())
            except (OSError, ValueError) as e:
                raise ConfigError(f"{source}: catalog[{i}].lock: cannot read {lock_path}: {e}") from None
            if not isinstance(lock, dict):
                raise ConfigError(f"{source}: catalog[{i}].lock: {lock_path} is not a recipe lock object")
            entry = {**lock, **entry}
        entries.append(entry)
    return {**data, "catalog": entries}


def _format_error(source: str, error: ValidationError, overrides: list[Override] = ()) -> str:
    lines = []
    for e in error.errors():
        loc = tuple(str(p) for p in e["loc"])
        key = ".".join(loc) or "(top level)"
        # Our own checks say what is wrong in full; pydantic's "Value error, " adds nothing.
        message = str(e["ctx"]["error"]) if e["type"] == "value_error" and "error" in e.get("ctx", {}) else e["msg"]
        if e["type"] == "extra_forbidden":
            message = f"not a known key{_did_you_mean(e['loc'])}"
        elif e["type"] == "string_pattern_mismatch" and str(e["loc"][-1]).endswith("digest"):
            message = f"{e['input']!r} is not a digest: write sha256: and 64 lowercase hex digits, as recipe.lock.json has it"
        # a key found missing belongs to the table that lacks it
        lines.append(f"{_where(source, loc[:-1] if e['type'] == 'missing' else loc, overrides)}: {key}: {message}")
    return "\n".join(lines)


def _where(source: str, loc: tuple[str, ...], overrides: list[Override]) -> str:
    """What set the key at `loc`: the variable that names it (or a table holding it),
    else the file, with the variables that set keys within it."""
    setting = [o for o in overrides if loc[: len(o.path)] == o.path]
    if setting:
        return max(setting, key=lambda o: len(o.path)).variable
    within = [o.variable for o in overrides if o.path[: len(loc)] == loc]
    return f"{source} (with {', '.join(within)})" if within else source


def _did_you_mean(loc: tuple) -> str:
    """", did you mean 'max_depth'?" for a key close to one the model knows there."""
    import difflib

    model: Any = Config
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return ""
        inner = field.annotation
        for candidate in getattr(inner, "__args__", ()) or (inner,):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
        else:
            return ""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def from_mapping(data: dict[str, Any], source: str = "<config>", base: Path | None = None, overrides: list[Override] = ()) -> Config:
    data = _read_locks(data, base or Path.cwd(), source)
    shadow = data.get("shadow")
    if isinstance(shadow, dict) and isinstance(shadow.get("config"), str):  # relative to this file, as lock files are
        data = {**data, "shadow": {**shadow, "config": str((base or Path.cwd()) / shadow["config"])}}
    try:
        return Config.model_validate({**data, "source": source})
    except ValidationError as e:
        raise ConfigError(_format_error(source, e, overrides)) from None


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Config:
    """Reads and validates `jobgate.toml`, with the configuration variables of
    `environ` (default: this process's environment; {} for none) over it; raises
    ConfigError naming the file or the variable, and the key."""
    p = Path(path)
    try:
        with open_regular(str(p)) as f:  # a FIFO named as the configuration never hangs
            raw = f.read()
    except NotRegular as e:
        raise ConfigError(f"{p}: cannot read the configuration: it {e.why}") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the configuration: {e.strerror or e}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    overrides = environment_overrides(os.environ if environ is None else environ)
    return from_mapping(with_overrides(data, overrides), str(p), p.parent, overrides)


def environment_config(environ: Mapping[str, str] | None = None) -> Config | None:
    """The configuration the environment gives without a file (the defaults, with its
    variables over them), or None when it sets no configuration variable."""
    overrides = environment_overrides(os.environ if environ is None else environ)
    if not overrides:
        return None
    return from_mapping(with_overrides({}, overrides), ENVIRONMENT, None, overrides)


# The environment: JOBGATE_<SECTION>__<KEY>[__<KEY>...] sets the key that `key` in
# [section] (or in its nested tables) sets in jobgate.toml; docs/configuration.md
# says how (ENVIRONMENT_DOC).
ENV_PREFIX = "JOBGATE_"
ENV_SEPARATOR = "__"
ENV_FILE_SUFFIX = "_FILE"
ENVIRONMENT = "the environment"


class Override(typing.NamedTuple):
    """One configuration variable: its name, the key it sets (as the model names it;
    names the deployment chose as written) and its value, read for the key's type."""

    variable: str
    path: tuple[str, ...]
    value: Any


def environment_overrides(environ: Mapping[str, str]) -> list[Override]:
    """The configuration variables of `environ`, shallowest key first. A variable
    whose first part is no section (JOBGATE_TOKEN, JOBGATE_DEBUG) is not one of them;
    one that reads as a section and a key joined by one underscore is refused with
    the spelling it meant. Raises ConfigError naming the variable."""
    sections = {name.upper(): name for name, field in Config.model_fields.items() if not field.exclude}
    found: dict[tuple[str, ...], Override] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        parts = variable[len(ENV_PREFIX) :].split(ENV_SEPARATOR)
        if parts[0].upper() not in sections:
            meant = next((s for s in sections if parts[0].upper().startswith(s + "_")), None)
            if meant is not None:
                spelled = ENV_SEPARATOR.join([parts[0][len(meant) + 1 :], *parts[1:]])
                raise ConfigError(f"{variable}: not a configuration variable: a section and its key are joined by two underscores, {ENV_PREFIX}{meant}{ENV_SEPARATOR}{spelled}")
            continue
        path, annotation, from_file = _resolve(variable, parts)
        raw = environ[variable]
        if from_file:
            raw = _read_secret(variable, raw)
        if path in found:
            raise ConfigError(f"{found[path].variable} and {variable} both set {'.'.join(path)}: give one")
        found[path] = Override(variable, path, _read_value(raw, annotation))
    return sorted(found.values(), key=lambda o: len(o.path))


def _read_secret(variable: str, path: str) -> str:
    """The value a KEY_FILE variable names: the file's text, without its last line
    break (a mounted Kubernetes or Docker secret, a credentials file of systemd)."""
    try:
        with open_regular(path) as f:
            text = f.read().decode("utf-8")
    except NotRegular as e:
        raise ConfigError(f"{variable}: cannot read {path}: it {e.why}") from None
    except OSError as e:
        raise ConfigError(f"{variable}: cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{variable}: {path} is not UTF-8 text") from None
    return text.removesuffix("\n").removesuffix("\r")


def _resolve(variable: str, parts: list[str]) -> tuple[tuple[str, ...], Any, bool]:
    """The key `parts` name, its type (Any where the model does not say), and whether
    the variable names a file holding the value (KEY_FILE). Section and key names
    match in any case; names the deployment chose (accounts, projects, rule ids) are
    kept as written."""
    path: list[str] = []
    annotation: Any = Config
    from_file = False
    for n, part in enumerate(parts):
        if not part:
            raise ConfigError(f"{variable}: an empty key between underscores")
        model, shape = _shape(annotation)
        if model is not None:
            fields = {name.upper(): name for name, field in model.model_fields.items() if not field.exclude}
            name = fields.get(part.upper())
            last = n == len(parts) - 1
            stem = part.upper().removesuffix(ENV_FILE_SUFFIX)
            if name is None and last and stem != part.upper() and stem in fields:
                name, from_file = fields[stem], True
            if name is None:  # the model refuses it, naming the closest key
                return (*path, part.lower(), *parts[n + 1 :]), Any, False
            path.append(name)
            annotation = model.model_fields[name].annotation
        elif shape is dict:
            path.append(part)
            args = typing.get_args(_without_none(annotation))
            annotation = args[1] if len(args) == 2 else Any
        elif shape is list:
            whole = ENV_PREFIX + ENV_SEPARATOR.join(parts[:n]).upper()
            raise ConfigError(f"{variable}: {'.'.join(path)} is a list: set it whole, as a TOML array, in {whole}")
        else:
            path.append(part)
            annotation = Any
    return tuple(path), annotation, from_file


def _without_none(annotation: Any) -> Any:
    """`X | None` as X; anything else as it is."""
    if typing.get_origin(annotation) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _shape(annotation: Any) -> tuple[type[BaseModel] | None, type | None]:
    """The model of a key that holds a table, else dict or list for a mapping or an
    array, else (None, None)."""
    inner = _without_none(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner, None
    origin = typing.get_origin(inner)
    return None, origin if origin in (dict, list) else None


def _read_value(raw: str, annotation: Any) -> Any:
    """A variable's text as the value of a key of type `annotation`: as it is for
    text; empty for unset where the key may be unset; else a TOML value (a number,
    true or false, an array, an inline table), or the text where it is none, for the
    model to judge (a duration such as 24h, a level such as off)."""
    inner = _without_none(annotation)
    if raw == "" and inner is not annotation:
        return None
    if inner is str or (typing.get_origin(inner) is Literal and all(isinstance(a, str) for a in typing.get_args(inner))):
        return raw
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw


ENVIRONMENT_DOC = """
## From the environment

`JOBGATE_<SECTION>__<KEY>` sets `key` of `[section]`, over the file: two underscores
join a section, its tables and their keys (`JOBGATE_SERVER__TLS__CERT` is `cert` of
`[server.tls]`, `JOBGATE_STORE__URL` is `url` of `[store]`). The order is: the
model's defaults, then the file, then the environment; a variable that names a table
(`JOBGATE_LIMITS='{ max_depth = 32 }'`) replaces the file's table, and variables
naming keys within it apply after it.

- Names: sections and keys match in any case (`JOBGATE_LIMITS__MAX_DEPTH`); names
  the deployment chose (an account, a project, a rule id) are written as in the file:
  `JOBGATE_ACCOUNTS__ci__TOKEN`, `JOBGATE_QUOTA__PROJECTS__vision=8`,
  `JOBGATE_RULES__forge.resources.series=warning`,
  `JOBGATE_RULES__projects__vision__forge.resources.series=off`.
- Values: text keys take the value as it is; other keys a TOML value: `8`, `true`,
  `["h100", "h200"]`, `{ token = "sha256:…", roles = ["admin"] }` (a duration may be
  `24h`). An empty value unsets a key that may be unset (`JOBGATE_SERVER__TLS=`). An
  array of tables (`[[catalog]]`) is set whole: `JOBGATE_CATALOG='[{ lock = "…" }]'`.
- Secrets: `<VARIABLE>_FILE` reads the value from a file (its last line break
  dropped), for mounted Kubernetes or Docker secrets and systemd credentials:
  `JOBGATE_STORE__URL_FILE=/run/secrets/store-url`.
- Errors name the variable and the key
  (`JOBGATE_LIMITS__MAX_DEPTH: limits.max_depth: Input should be less than or equal
  to 1024`); a variable the model does not know is refused with the closest key, and
  a section joined to its key by one underscore (`JOBGATE_STORE_URL`) with the
  spelling meant. Other `JOBGATE_` variables (`JOBGATE_TOKEN`, `JOBGATE_DEBUG`) are
  not configuration.
- Where: every configuration file jobgate reads is read with the environment over it
  (`--config`, a SIGHUP reload, a `[shadow]` candidate, `--against`), so a candidate
  is judged as it would be served here. Without `--config`, `serve`, `check` and
  `jobs` take the defaults with the environment over them (`serve` runs its demo
  deployment only when no configuration variable is set).
"""


def with_overrides(data: dict[str, Any], overrides: list[Override]) -> dict[str, Any]:
    """`data` (a parsed jobgate.toml) with each override's key set, shallowest first:
    a table given whole, then keys within it."""
    merged = copy.deepcopy(data)
    for override in overrides:
        node = merged
        for key in override.path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[override.path[-1]] = override.value
    return merged


def core_settings(config: Config | dict[str, Any] | str | os.PathLike[str]) -> _core.Settings:
    """What `jobgate.Validator(config)` hands the core, from any accepted form of
    configuration: a Config, a mapping in the shape of `jobgate.toml`, or its path."""
    if isinstance(config, Config):
        return config.core_settings()
    if isinstance(config, dict):
        return from_mapping(config).core_settings()
    if isinstance(config, str | os.PathLike):
        return load_config(config).core_settings()
    raise TypeError(f"a configuration is a path, a dict or a jobgate.Config, not {type(config).__name__}")


def reference() -> str:
    """`docs/configuration.md`: every key of `jobgate.toml` with its type, default and
    meaning, from this model (`scripts/dev docs` writes it; a test fails when the file
    drifts from the model)."""
    import typing

    def type_name(annotation: Any) -> str:
        text = str(annotation) if typing.get_origin(annotation) else getattr(annotation, "__name__", str(annotation))
        return text.replace("typing.", "").replace("NoneType", "None").replace("jobgate.config.", "").replace("|", "\\|")

    def default(field: Any) -> str:
        if field.is_required():
            return "required"
        value = field.default
        if isinstance(value, BaseModel):
            return "(table)"
        if value is None:
            return "unset"
        return f"`{json.dumps(value)}`" if not isinstance(value, float) or value != int(value) else f"`{int(value)}`"

    def model_of(annotation: Any) -> type[BaseModel] | None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
        for candidate in typing.get_args(annotation):
            found = model_of(candidate)
            if found:
                return found
        return None

    lines = [
        "# `jobgate.toml`: every key",
        "",
        "Generated from the configuration model (`python/jobgate/config.py`) by",
        "`scripts/dev docs`; a test fails when this file and the model disagree. A key the",
        "model does not know is refused at load, naming the file, the key and the closest",
        "known one. Every key can also be set from the environment (the `environment`",
        "column; [From the environment](#from-the-environment) says how).",
        "",
        *ENVIRONMENT_DOC.strip().splitlines(),
        "",
    ]

    def table(model: type[BaseModel], prefix: str, about: str = "", variable: str | None = "JOBGATE") -> None:
        """`variable`: the variable of this table (its keys' are it, two underscores and
        the key), or None within an array of tables, set whole."""
        rows, nested = [], []
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            sub = model_of(field.annotation)
            if sub is not None and sub is not model:
                nested.append((name, field, sub))
                continue
            env = f"`{variable}{'_' if variable == 'JOBGATE' else ENV_SEPARATOR}{name.upper()}`" if variable else "(whole array)"
            rows.append(f"| `{name}` | `{type_name(field.annotation)}` | {default(field)} | {env} | {field.description or ''} |")
        if rows or about:
            lines.extend([f"## `{prefix or '(top level)'}`", ""])
            if about:
                lines.extend([about[0].upper() + about[1:] + ".", ""])
            if rows:
                lines.extend(["| key | type | default | environment | meaning |", "|---|---|---|---|---|", *rows, ""])
        for name, field, sub in nested:
            shapes = [typing.get_origin(a) for a in (field.annotation, *typing.get_args(field.annotation))]
            path = f"{prefix}.{name}" if prefix else name
            inner = f"{variable}{'_' if variable == 'JOBGATE' else ENV_SEPARATOR}{name.upper()}" if variable else None
            if dict in shapes:
                path, inner = f"{path}.NAME", inner and f"{inner}{ENV_SEPARATOR}NAME"
            elif list in shapes:
                path = f"[{path}]"
                about = f"{field.description or ''}. From the environment, the whole array in `{inner}`, as a TOML array of inline tables"
                table(sub, path, about, None)
                continue
            table(sub, path, field.description or "", inner)

    table(Config, "")
    return "\n".join(lines).rstrip() + "\n"

