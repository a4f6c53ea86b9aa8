"""`jobgate.toml`: the one configuration file, as a typed pydantic model.

Owns loading and validating the deployment settings (limits, catalog, registry
allowlist, GPU series and quotas, accounts and their grants) and handing the core its
part of them. Every error names the file and the key. Must not apply any admission
rule itself: rules live in the Rust core; what a grant allows is decided by the
service (`jobgate.server.grants`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from jobgate.sources import NotRegular, open_regular

DEFAULT_MAX_DOCUMENT_BYTES = 1024 * 1024
DEFAULT_MAX_DEPTH = 64
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
    max_document_bytes: int = Field(DEFAULT_MAX_DOCUMENT_BYTES, gt=0)
    max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=1, le=1024)
    max_batch: int = Field(4096, ge=1, description="documents per AdmitBatch / check_many call")
    max_package_bytes: int = Field(1 << 30, gt=0, description="all members of a package, inflated; and each file under a root")
    max_package_members: int = Field(100_000, gt=0)
    max_violations: int = Field(1000, ge=1, description="violations listed per report; the rest are counted in limits.violations")
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=64, description="a transition message as stored, UTF-8; the rest is cut with a marker")
    max_transitions: int = Field(DEFAULT_MAX_TRANSITIONS, ge=2, description="transitions a record keeps; beyond, only a terminal state is still recorded")


DIGEST = r"^sha256:[0-9a-f]{64}$"


class RecipeRef(_Model):
    name: str
    version: str
    digest: str = Field(pattern=DIGEST, description="sha256:<64 lowercase hex>, as recipe.lock.json has it")
    manifest_digest: str | None = Field(None, pattern=DIGEST)
    template_digest: str | None = Field(None, pattern=DIGEST)


class FrameworkRef(_Model):
    kind: str = ""
    version: str = ""
    runtime_id: str


class Requires(_Model):
    core: str | None = None

    @field_validator("core")
    @classmethod
    def _pep440(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                SpecifierSet(value)
            except InvalidSpecifier as e:
                raise ValueError(f"{value!r} is not a PEP 440 specifier ({e})") from None
        return value


class CatalogEntry(_Model):
    """One served recipe, in the shape of `recipe.lock.json`, plus deployment flags.

    ``lock = "path/recipe.lock.json"`` reads recipe, framework and requires from a lock
    file (relative to the configuration file); keys given here override it.
    """

    recipe: RecipeRef
    framework: FrameworkRef
    requires: Requires = Requires()
    observability: Literal["platform", "external"] = "platform"
    custom: bool = False
    # Carried by recipe.lock.json files, accepted so a lock can be used as it is.
    apiVersion: str | None = None  # noqa: N815
    created_by: dict[str, Any] | None = None


class Registry(_Model):
    allow: list[str] | None = None


class Gpus(_Model):
    series: list[str] | None = None
    max_per_job: int | None = Field(None, ge=1)


class Quota(_Model):
    default: int | None = Field(None, ge=0, description="GPUs a project without its own entry may hold")
    projects: dict[str, int] = {}


class Tls(_Model):
    """TLS for the service; with client_ca, mutual TLS: the account is the client
    certificate's common name."""

    cert: str
    key: str
    client_ca: str | None = None


class Server(_Model):
    """How the gRPC service listens and whom it lets in."""

    tls: Tls | None = None
    listen: str = "127.0.0.1:50051"
    # The form before accounts had grants; kept only to refuse it with the way forward
    # (every token holder could do anything: there is no safe grant to guess for it).
    tokens: Any = None
    # Local demos only, refused anywhere but loopback: a caller without credentials is
    # the account "anonymous", which holds the admin role.
    allow_anonymous: bool = False
    max_message_bytes: int = Field(16 << 20, gt=0)
    # host:port of the Prometheus /metrics endpoint; unset turns it off.
    metrics_listen: str | None = None
    # Each open stream (WatchJob, AdmitStream, reflection) holds a servicer thread for
    # as long as it is open: streams get their own threads, up to max_streams, and
    # unary calls and health checks the `threads` others, so no number of streams can
    # starve them. Beyond a limit a stream is refused with RESOURCE_EXHAUSTED.
    max_streams: int = Field(256, ge=1, description="streams open at once, all accounts together")
    max_streams_per_account: int = Field(64, ge=1, description="streams one account may hold open at once")
    threads: int = Field(32, ge=1, description="servicer threads for unary calls and health checks")
    # WatchJob wakes at once for marks made through this server; one shared poll of the
    # store finds those made elsewhere (other replicas, `jobgate jobs mark`).
    watch_poll_seconds: float = Field(0.5, gt=0, le=60)
    # On SIGTERM: health NOT_SERVING, streams ended, then unary calls in flight get
    # this long to answer; the process exits as soon as the last has.
    shutdown_grace_s: float = Field(10.0, ge=0, le=600)

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

    results_root: str = "./results"
    platform: str = Field("local", pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    storage_tier: Literal["A", "B", "C"] = "A"
    # A spec-bundle names no project: it is admitted into its account's first listed
    # project, or into this one for an account whose first entry is "*" (and admins
    # that list none). Its GPUs count in that project's usage.
    default_project: str = Field("default", min_length=1)
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

    path: str = "./.jobgate"
    url: str | None = None
    # SQLite in WAL mode: "normal" survives any process crash (records stay whole or
    # absent) and syncs at checkpoints; "full" also survives power loss, one fsync per commit.
    sqlite_synchronous: Literal["normal", "full"] = "normal"
    # Database connections a server process opens, at most: they are lent to a thread
    # for one operation, so many threads (one per open stream) share a few.
    connections: int = Field(16, ge=1, le=1000)


class Account(_Model):
    """One caller and its grant: `[accounts.NAME]`. With `token` (the hash of a bearer
    token) the account authenticates by that token; without one, by a client
    certificate whose common name is NAME (mutual TLS, `server.tls.client_ca`)."""

    token: str | None = None
    # Where it may submit and whose jobs it may read; "*" for every project. The first
    # listed is where its spec-bundles go (they name no project).
    projects: list[str] = []
    roles: list[str]

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


class Config(_Model):
    limits: Limits = Limits()
    server: Server = Server()
    jobs: Jobs = Jobs()
    store: Store = Store()
    registry: Registry = Registry()
    gpus: Gpus = Gpus()
    quota: Quota = Quota()
    catalog: list[CatalogEntry] | None = None
    accounts: dict[str, Account] = {}
    source: str | None = Field(None, exclude=True, description="the file this was loaded from")

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

    def project_quota(self, project: str) -> int | None:
        return self.quota.projects.get(project, self.quota.default)

    def core_settings(self) -> dict[str, Any]:
        """The part of the configuration the Rust core reads."""
        return {
            "max_document_bytes": self.limits.max_document_bytes,
            "max_depth": self.limits.max_depth,
            "max_package_bytes": self.limits.max_package_bytes,
            "max_package_members": self.limits.max_package_members,
            "max_violations": self.limits.max_violations,
            "registries": self.registry.allow,
            "series": self.gpus.series,
            "max_gpus_per_job": self.gpus.max_per_job,
            "catalog": None
            if self.catalog is None
            else [
                {
                    "name": e.recipe.name,
                    "version": e.recipe.version,
                    "digest": e.recipe.digest,
                    "runtime_id": e.framework.runtime_id,
                    "requires_core": e.requires.core,
                    "observability": e.observability,
                    "custom": e.custom,
                }
                for e in self.catalog
            ],
        }


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


def _format_error(source: str, error: ValidationError) -> str:
    lines = []
    for e in error.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        # Our own checks say what is wrong in full; pydantic's "Value error, " adds nothing.
        message = str(e["ctx"]["error"]) if e["type"] == "value_error" and "error" in e.get("ctx", {}) else e["msg"]
        if e["type"] == "extra_forbidden":
            message = f"not a known key{_did_you_mean(e['loc'])}"
        elif e["type"] == "string_pattern_mismatch" and str(e["loc"][-1]).endswith("digest"):
            message = f"{e['input']!r} is not a digest: write sha256: and 64 lowercase hex digits, as recipe.lock.json has it"
        lines.append(f"{source}: {key}: {message}")
    return "\n".join(lines)


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


def from_mapping(data: dict[str, Any], source: str = "<config>", base: Path | None = None) -> Config:
    data = _read_locks(data, base or Path.cwd(), source)
    try:
        return Config.model_validate({**data, "source": source})
    except ValidationError as e:
        raise ConfigError(_format_error(source, e)) from None


def load_config(path: str | os.PathLike[str]) -> Config:
    """Reads and validates `jobgate.toml`; raises ConfigError naming the file and key."""
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
    return from_mapping(data, str(p), p.parent)


def core_settings(config: Config | dict[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """What `Validator(config)` hands the core, from any accepted form of configuration."""
    if isinstance(config, Config):
        return config.core_settings()
    if isinstance(config, dict):
        return from_mapping(config).core_settings()
    if isinstance(config, str | os.PathLike):
        return load_config(config).core_settings()
    raise TypeError(f"a configuration is a path, a dict or a jobgate.Config, not {type(config).__name__}")
