"""`jobgate.toml`: the one configuration file, as a typed pydantic model.

Owns loading and validating the deployment settings (limits, catalog, registry
allowlist, GPU series and quotas) and handing the core its part of them. Every error
names the file and the key. Must not apply any admission rule itself: rules live in
the Rust core.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jobgate.sources import NotRegular, open_regular

DEFAULT_MAX_DOCUMENT_BYTES = 1024 * 1024
DEFAULT_MAX_DEPTH = 64
# A transition's message as stored; longer ones keep their head and a marker.
DEFAULT_MAX_MESSAGE_BYTES = 4096
# With the defaults a record (at most 512 messages of 4 KiB, plus what its document
# gave it, at most max_document_bytes) fits in 4 MiB, gRPC's default receive limit.
DEFAULT_MAX_TRANSITIONS = 512


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


class RecipeRef(_Model):
    name: str
    version: str
    digest: str
    manifest_digest: str | None = None
    template_digest: str | None = None


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
    # account -> "sha256:<hex of the token>"; plaintext tokens never appear in the file.
    tokens: dict[str, str] = {}
    # Local demos only: a caller without a token is the account "anonymous".
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

    @field_validator("tokens")
    @classmethod
    def _hashed(cls, tokens: dict[str, str]) -> dict[str, str]:
        for account, digest in tokens.items():
            hexpart = digest.removeprefix("sha256:")
            if not digest.startswith("sha256:") or len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
                raise ValueError(f"the token of {account!r} must be given as sha256:<64 lowercase hex>, the hash of the token")
        return tokens


class Jobs(_Model):
    """What admission writes into each job record."""

    results_root: str = "./results"
    platform: str = Field("local", pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    storage_tier: Literal["A", "B", "C"] = "A"


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


class Config(_Model):
    limits: Limits = Limits()
    server: Server = Server()
    jobs: Jobs = Jobs()
    store: Store = Store()
    registry: Registry = Registry()
    gpus: Gpus = Gpus()
    quota: Quota = Quota()
    catalog: list[CatalogEntry] | None = None
    source: str | None = Field(None, exclude=True, description="the file this was loaded from")

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
        lines.append(f"{source}: {key}: {e['msg']}")
    return "\n".join(lines)


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
