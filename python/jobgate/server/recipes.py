"""`RecipeStatus`: how a client's recipe.lock.json stands against the catalog, in the
words `sf recipe status --server` uses, as the core judges it (`jobgate._core.recipe_status`,
by the terms of the `forge.handshake.*` checks): malformed, runtime_removed,
sdk_incompatible, current, incompatible, compatible or upgrade_advised.

Owns only the mapping of the core's answer to the RPC's fields; must not judge a lock
itself. A lock past the document limits is not judged at all: LockUnreadable.
"""

from __future__ import annotations

from jobgate import _core
from jobgate.config import Config


class LockUnreadable(ValueError):
    """The lock is larger or deeper than any document may be: a request that cannot be
    handled, not a lock to judge."""


def status(config: Config, lock_bytes: bytes, core_version: str = "") -> tuple[str, str, dict[str, str]]:
    """`(status, message, catalog fields)`; the catalog fields (`catalog_version`,
    `catalog_digest`, `catalog_runtime_id`) are empty when the catalog does not serve
    the lock's recipe."""
    settings = config.core_settings()
    try:
        found = _core.recipe_status(settings, lock_bytes, core_version)
    except ValueError as e:
        raise LockUnreadable(str(e)) from None
    if found.catalog_version is None:
        return found.status, found.message, {}
    catalog = {"catalog_version": found.catalog_version, "catalog_digest": found.catalog_digest, "catalog_runtime_id": found.catalog_runtime_id}
    return found.status, found.message, catalog
