//! The deployment settings the core needs: limits, the recipe catalog, the registry
//! allowlist, GPU series and the per-job GPU limit.
//!
//! The Python layer loads and validates `jobgate.toml` (with errors naming the file
//! and key) and hands the result here (`python::config`); this module only holds
//! typed values and the PEP 440 matching of `requires.core`.
//!
//! Near the bottom of the crate: imports only `limits` and `rules`.

use std::collections::HashMap;
use std::str::FromStr;

use pep440_rs::{Version, VersionSpecifiers};

use crate::limits::{Limits, PackageLimits, ReportLimits, MAX_DEPTH_CEILING};
use crate::rules::{Rule, Severity};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Observability {
    /// The platform collects metrics; an `observability_url` is refused.
    Platform,
    /// The recipe reports elsewhere; an `observability_url` is required.
    External,
    #[default]
    Unspecified,
}

/// One recipe the deployment serves, in the shape of `recipe.lock.json`.
#[derive(Clone, Debug)]
pub struct CatalogEntry {
    pub name: String,
    pub version: String,
    pub digest: String,
    pub runtime_id: String,
    /// The framework the recipe runs on, as `recipe.lock.json` names it (`framework.kind`).
    pub framework_kind: String,
    /// `requires.core`, as written and parsed.
    pub requires_core: Option<(String, VersionSpecifiers)>,
    pub observability: Observability,
    pub custom: bool,
}

impl CatalogEntry {
    pub fn new(name: &str, version: &str, digest: &str, runtime_id: &str) -> Self {
        CatalogEntry {
            name: name.into(),
            version: version.into(),
            digest: digest.into(),
            runtime_id: runtime_id.into(),
            framework_kind: String::new(),
            requires_core: None,
            observability: Observability::Unspecified,
            custom: false,
        }
    }

    pub fn with_requires_core(mut self, spec: &str) -> Result<Self, String> {
        let parsed = version_range(spec)
            .map_err(|e| format!("requires.core {spec:?} is not a PEP 440 specifier: {e}"))?;
        self.requires_core = Some((spec.to_string(), parsed));
        Ok(self)
    }
}

/// A PEP 440 version range (`requires.core`), read as the rules match it; `Err` says
/// why it is not one.
pub fn version_range(spec: &str) -> Result<VersionSpecifiers, String> {
    VersionSpecifiers::from_str(spec).map_err(|e| e.to_string())
}

/// Whether `version` satisfies `requires.core`; `Err` when it is not a PEP 440 version.
pub fn core_version_allowed(spec: &VersionSpecifiers, version: &str) -> Result<bool, String> {
    let v = Version::from_str(version.trim()).map_err(|e| format!("{e}"))?;
    Ok(spec.contains(&v))
}

/// Everything the rule engine reads from the deployment.
#[derive(Clone, Debug, Default)]
pub struct CoreConfig {
    pub limits: Limits,
    /// How many violations, and how many bytes of them, one report lists.
    pub report: ReportLimits,
    /// Bounds on packages and on each supporting file read from a root.
    pub package: PackageLimits,
    /// By recipe name; `None` when no catalog is configured (handshake rules are off).
    pub catalog: Option<HashMap<String, CatalogEntry>>,
    /// Registry hosts images may come from; `None` allows any.
    pub registries: Option<Vec<String>>,
    /// GPU series the deployment offers; `None` allows any.
    pub series: Option<Vec<String>>,
    pub max_gpus_per_job: Option<u64>,
    /// The deployment's severities per rule (`[rules]`).
    pub enforcement: Enforcement,
}

/// Severities a deployment sets per rule, for every document and per project
/// (`[rules]`, `[rules.projects.NAME]`); only relaxable rules (`Rule::relaxable`).
#[derive(Clone, Debug, Default)]
pub struct Enforcement {
    pub deployment: HashMap<Rule, Severity>,
    pub projects: HashMap<String, HashMap<Rule, Severity>>,
}

impl Enforcement {
    pub fn is_empty(&self) -> bool {
        self.deployment.is_empty() && self.projects.is_empty()
    }

    /// The severity set for `rule`: the project's own first, then the deployment's.
    pub fn level(&self, rule: Rule, project: Option<&str>) -> Option<Severity> {
        project
            .and_then(|p| self.projects.get(p))
            .and_then(|rules| rules.get(&rule))
            .or_else(|| self.deployment.get(&rule))
            .copied()
    }
}

impl CoreConfig {
    pub fn with_limits(max_bytes: usize, max_depth: usize) -> Result<Self, String> {
        if max_depth == 0 || max_depth > MAX_DEPTH_CEILING {
            return Err(format!(
                "limits.max_depth must be between 1 and {MAX_DEPTH_CEILING}, got {max_depth}"
            ));
        }
        if max_bytes == 0 {
            return Err("limits.max_document_bytes must be positive".into());
        }
        Ok(CoreConfig {
            limits: Limits {
                max_bytes,
                max_depth,
            },
            ..Default::default()
        })
    }

    pub fn set_catalog(&mut self, entries: Vec<CatalogEntry>) {
        self.catalog = Some(entries.into_iter().map(|e| (e.name.clone(), e)).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_pep440_ranges() {
        let spec = VersionSpecifiers::from_str(">=0.1,<1").unwrap();
        assert_eq!(core_version_allowed(&spec, "0.3.2"), Ok(true));
        assert_eq!(core_version_allowed(&spec, "1.0"), Ok(false));
        assert_eq!(core_version_allowed(&spec, "1.0.0a1"), Ok(false));
        assert!(core_version_allowed(&spec, "not a version").is_err());
    }
}
