//! The deployment settings as Python hands them over: `Settings` and its
//! `CatalogEntry`s, built with every key named (keyword-only, none optional), so a
//! missing or unknown key is a TypeError rather than a rule silently turned off.
//! `jobgate.config` builds them from `jobgate.toml` (`Config.core_settings`), where
//! errors name the file and the key; here they only become `CoreConfig`.
//!
//! Also what a configuration is checked with where the rules read it: the per-project
//! quota lookup (for the service to ask before it reads a project's usage) and the
//! PEP 440 reading of `requires.core`.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::admission::QuotaTable;
use crate::config::{self as core, CoreConfig, Observability};
use crate::limits::{Limits, PackageLimits, ReportLimits, MAX_DEPTH_CEILING};

/// The defaults of the `[limits]` keys the core reads, by key, and `max_depth_ceiling`
/// (the deepest nesting a configuration may allow): `jobgate.config` takes its defaults
/// from here, so the two languages cannot disagree on them.
pub fn default_limits(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (limits, package, report) = (
        Limits::default(),
        PackageLimits::default(),
        ReportLimits::default(),
    );
    let out = PyDict::new(py);
    out.set_item("max_document_bytes", limits.max_bytes)?;
    out.set_item("max_depth", limits.max_depth)?;
    out.set_item("max_depth_ceiling", MAX_DEPTH_CEILING)?;
    out.set_item("max_package_bytes", package.max_bytes)?;
    out.set_item("max_package_members", package.max_members)?;
    out.set_item("max_package_ratio", package.max_ratio)?;
    out.set_item("package_cache_bytes", package.cache_bytes)?;
    out.set_item("max_violations", report.max_violations)?;
    Ok(out)
}

/// `[rules]` as the core applies them: each id a catalogued rule that may be relaxed,
/// each level `error`, `warning` or `off`; ValueError naming the table and rule.
fn severities(
    set: &HashMap<String, String>,
    table: &str,
) -> PyResult<HashMap<crate::rules::Rule, crate::rules::Severity>> {
    let mut out = HashMap::new();
    for (id, level) in set {
        let rule = crate::rules::Rule::parse(id).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{table}: {id:?} is not a rule of the catalogue (jobgate.rules())"
            ))
        })?;
        if !rule.relaxable() {
            return Err(PyValueError::new_err(format!(
                "{table}: {id} protects the gate itself (reading, limits, supporting files, staging, quotas, projects, credentials) and cannot be changed"
            )));
        }
        let severity = crate::rules::Severity::parse(level).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{table}: {id} = {level:?}: the level is error, warning or off"
            ))
        })?;
        out.insert(rule, severity);
    }
    Ok(out)
}

/// Checks `[rules]` (`rules`) and `[rules.projects.NAME]` (`project_rules`) as the
/// core would apply them; ValueError naming the table and the rule otherwise. Called
/// when a configuration is loaded, so a bad one is refused before it is served.
#[pyfunction]
pub fn validate_rules(
    rules: HashMap<String, String>,
    project_rules: HashMap<String, HashMap<String, String>>,
) -> PyResult<()> {
    severities(&rules, "rules")?;
    for (project, set) in &project_rules {
        severities(set, &format!("rules.projects.{project}"))?;
    }
    Ok(())
}

/// What the core reads of a deployment's configuration.
#[pyclass(module = "jobgate._core", frozen)]
pub struct Settings {
    pub(super) core: CoreConfig,
}

#[pymethods]
impl Settings {
    #[new]
    #[pyo3(signature = (*, max_document_bytes, max_depth, max_package_bytes, max_package_members, max_package_ratio, package_cache_bytes, max_violations, registries, series, max_gpus_per_job, catalog, rules, project_rules))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_document_bytes: usize,
        max_depth: usize,
        max_package_bytes: u64,
        max_package_members: usize,
        max_package_ratio: u64,
        package_cache_bytes: usize,
        max_violations: usize,
        registries: Option<Vec<String>>,
        series: Option<Vec<String>>,
        max_gpus_per_job: Option<u64>,
        catalog: Option<Vec<PyRef<'_, CatalogEntry>>>,
        rules: HashMap<String, String>,
        project_rules: HashMap<String, HashMap<String, String>>,
    ) -> PyResult<Self> {
        let mut config = CoreConfig::with_limits(max_document_bytes, max_depth)
            .map_err(PyValueError::new_err)?;
        config.package.max_bundle_bytes = max_document_bytes as u64;
        config.package.max_bytes = max_package_bytes;
        config.package.max_members = max_package_members;
        config.package.max_ratio = max_package_ratio.max(1);
        config.package.cache_bytes = package_cache_bytes;
        config.report.max_violations = max_violations.max(1);
        config.registries = registries;
        config.series = series;
        config.max_gpus_per_job = max_gpus_per_job;
        if let Some(catalog) = catalog {
            config.set_catalog(catalog.iter().map(|e| e.entry.clone()).collect());
        }
        config.enforcement.deployment = severities(&rules, "rules")?;
        for (project, set) in &project_rules {
            let levels = severities(set, &format!("rules.projects.{project}"))?;
            config.enforcement.projects.insert(project.clone(), levels);
        }
        Ok(Settings { core: config })
    }

    fn __repr__(&self) -> String {
        let c = &self.core;
        format!(
            "Settings(catalog={}, max_document_bytes={}, max_depth={})",
            c.catalog.as_ref().map_or(0, |c| c.len()),
            c.limits.max_bytes,
            c.limits.max_depth
        )
    }
}

/// One recipe the deployment serves, in the shape of `recipe.lock.json`.
#[pyclass(module = "jobgate._core", frozen)]
pub struct CatalogEntry {
    entry: core::CatalogEntry,
}

#[pymethods]
impl CatalogEntry {
    #[new]
    #[pyo3(signature = (*, name, version, digest, runtime_id, framework_kind, requires_core, observability, custom))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        version: &str,
        digest: &str,
        runtime_id: &str,
        framework_kind: String,
        requires_core: Option<&str>,
        observability: &str,
        custom: bool,
    ) -> PyResult<Self> {
        let mut entry = core::CatalogEntry::new(name, version, digest, runtime_id);
        entry.framework_kind = framework_kind;
        entry.custom = custom;
        entry.observability = match observability {
            "platform" => Observability::Platform,
            "external" => Observability::External,
            other => {
                return Err(PyValueError::new_err(format!(
                    "observability is \"platform\" or \"external\", not {other:?}"
                )))
            }
        };
        // An empty range requires nothing, as an absent one.
        if let Some(spec) = requires_core.filter(|s| !s.is_empty()) {
            entry = entry
                .with_requires_core(spec)
                .map_err(PyValueError::new_err)?;
        }
        Ok(CatalogEntry { entry })
    }

    fn __repr__(&self) -> String {
        format!(
            "CatalogEntry(name={:?}, version={:?})",
            self.entry.name, self.entry.version
        )
    }
}

/// The GPUs `project` may hold in unfinished jobs under the deployment's `[quota]`
/// table (`default` for a project it does not list), as `forge.quota.project` reads
/// it; `None` is unlimited.
#[pyfunction]
#[pyo3(signature = (project, *, default, projects))]
pub fn project_quota(
    project: &str,
    default: Option<u64>,
    projects: HashMap<String, u64>,
) -> Option<u64> {
    QuotaTable {
        default,
        projects,
        in_use: HashMap::new(),
    }
    .quota_of(project)
}

/// Raises ValueError, saying why, unless `spec` is a PEP 440 version range as
/// `forge.core_version.unsupported` reads `requires.core`: the configuration is
/// checked with the reading the rule applies.
#[pyfunction]
pub fn check_version_range(spec: &str) -> PyResult<()> {
    core::version_range(spec)
        .map(drop)
        .map_err(PyValueError::new_err)
}
