"""`RecipeStatus`: how a client's recipe.lock.json stands against the catalog, in the
words `sf recipe status --server` uses.

- malformed: not a lock (no recipe name, version, digest or runtime id);
- runtime_removed: the catalog no longer serves the recipe;
- sdk_incompatible: the client's core version is outside the recipe's requires.core;
- current: version, digest and runtime id are the catalog's: admission accepts it;
- incompatible: another framework, or a lock newer than the catalog's recipe;
- compatible: the same version with other digests or runtime (a rebuilt release);
- upgrade_advised: an older version of the recipe.

Only `current` passes the admission handshake; every other status says what
`sf recipe upgrade` (or a client upgrade) fixes. A lock past the document limits
(`limits.size`, `limits.depth`) is not judged at all: LockUnreadable.
"""

from __future__ import annotations

import json

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

import jobgate
from jobgate.config import Config


class LockUnreadable(ValueError):
    """The lock is larger or deeper than any document may be: a request that cannot be
    handled, not a lock to judge."""


def status(config: Config, lock_bytes: bytes, core_version: str = "") -> tuple[str, str, dict[str, str]]:
    # The core reads the lock within the document limits (a lock of 100,000 "[" is
    # refused there, at depth 64); what it hands back is plain JSON text.
    try:
        text = jobgate.read_document(lock_bytes)
    except ValueError as e:
        rule, _, message = str(e).partition(": ")
        if rule.startswith("limits."):
            raise LockUnreadable(message) from None
        return "malformed", f"the lock is not a recipe.lock.json: {message}", {}
    try:
        lock = json.loads(text)
        recipe, framework = lock["recipe"], lock["framework"]
        name, version, digest = str(recipe["name"]), str(recipe["version"]), str(recipe["digest"])
        runtime_id, kind = str(framework["runtime_id"]), str(framework.get("kind", ""))
    except (ValueError, KeyError, TypeError) as e:
        return "malformed", f"the lock is not a recipe.lock.json: {e}", {}
    entry = next((e for e in config.catalog or () if e.recipe.name == name), None)
    if entry is None:
        served = ", ".join(sorted(e.recipe.name for e in config.catalog or ())) or "none"
        return "runtime_removed", f"the catalog no longer serves {name} (served: {served}); choose another recipe and `sf recipe upgrade`", {}
    catalog = {"catalog_version": entry.recipe.version, "catalog_digest": entry.recipe.digest, "catalog_runtime_id": entry.framework.runtime_id}
    core = core_version or str((lock.get("created_by") or {}).get("core_version") or "")
    if entry.requires.core and core:
        try:
            allowed = SpecifierSet(entry.requires.core).contains(Version(core), prereleases=True)
        except InvalidVersion:
            allowed = False
        if not allowed:
            return "sdk_incompatible", f"client core {core} is outside {entry.requires.core}, which {name} {entry.recipe.version} requires; upgrade the client", catalog
    if (version, digest, runtime_id) == (entry.recipe.version, entry.recipe.digest, entry.framework.runtime_id):
        return "current", f"{name} {version} is the catalog's; admission accepts it", catalog
    try:
        older = Version(version) < Version(entry.recipe.version)
        newer = Version(version) > Version(entry.recipe.version)
    except InvalidVersion:
        older = newer = False
    if (kind and entry.framework.kind and kind != entry.framework.kind) or newer:
        return "incompatible", f"the lock pins {name} {version} ({kind or 'unknown framework'}) but the catalog serves {entry.recipe.version} ({entry.framework.kind}); re-lock with `sf recipe upgrade`", catalog
    if version == entry.recipe.version:
        return "compatible", f"{name} {version} was rebuilt: digest or runtime differ from the catalog's; `sf recipe upgrade` refreshes the lock", catalog
    if older:
        return "upgrade_advised", f"the lock pins {name} {version}; the catalog serves {entry.recipe.version}; run `sf recipe upgrade`", catalog
    return "incompatible", f"the lock pins {name} {version}, which cannot be compared with the catalog's {entry.recipe.version}", catalog
