"""jobgate: the admission gate for ML training jobs.

Checks forge/v2 JobSpecs and the TAO artifacts (spec-bundles, job-records,
best_recs) with a compiled Rust core, and reports every violation with a stable
rule id and a JSON Pointer.

    >>> import jobgate
    >>> report = jobgate.Validator().check(b'{"apiVersion": "forge/v2"}')
    >>> report.verdict
    'fail'
"""

from jobgate._core import Report, Staging, Validator, Violation, __version__, fit_reports, read_document, redact, rules
from jobgate.config import Config, ConfigError, load_config

__all__ = [
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
