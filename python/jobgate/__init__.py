"""jobgate: the admission gate for ML training jobs.

Checks forge/v2 JobSpecs and the TAO artifacts (spec-bundles, job-records,
best_recs) with a compiled Rust core, and reports every violation with a stable
rule id and a JSON Pointer.

    >>> import jobgate
    >>> report = jobgate.Validator().check(b'{"apiVersion": "forge/v2"}')
    >>> report.verdict
    'fail'

Owns the public names and the one step between them and the core: turning a
configuration into the core's settings (`Validator`). Must not apply rules: they live
in the core (`jobgate._core`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from jobgate import _core
from jobgate._core import KINDS, Report, Staging, Violation, __version__, fit_reports, read_document, redact, rules
from jobgate.config import Config, ConfigError, core_settings, load_config


class Validator(_core.Validator):
    """A compiled validator: built once, thread-safe, reused for every document.

    ``config`` is a path to ``jobgate.toml`` (read with the environment's
    ``JOBGATE_SECTION__KEY`` overrides, as `load_config` reads it), a
    :class:`jobgate.Config`, or a mapping in the TOML's shape; it is validated here
    (errors name the file or the variable, and the key) and handed to the core as its
    settings. Without one, only the rules that need no
    deployment apply.
    """

    __slots__ = ()

    def __new__(cls, config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None) -> Validator:
        return super().__new__(cls, None if config is None else core_settings(config))


__all__ = [
    "KINDS",
    "Config",
    "ConfigError",
    "Report",
    "Staging",
    "Validator",
    "Violation",
    "__version__",
    "fit_reports",
    "load_config",
    "read_document",
    "redact",
    "rules",
]
