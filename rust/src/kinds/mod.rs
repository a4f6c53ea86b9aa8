//! The four kinds of document and how each is told apart.
//!
//! Each kind module owns its shapes (the schema layer) and its semantic rules; this
//! module only detects the kind and dispatches.

pub mod best_rec;
pub mod job_record;
pub mod jobspec;
pub mod spec_bundle;

use crate::config::CoreConfig;
use crate::node::Value;
use crate::schema::Ctx;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    JobSpec,
    SpecBundle,
    JobRecord,
    BestRec,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::JobSpec,
        Kind::SpecBundle,
        Kind::JobRecord,
        Kind::BestRec,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::JobSpec => "jobspec",
            Kind::SpecBundle => "spec_bundle",
            Kind::JobRecord => "job_record",
            Kind::BestRec => "best_rec",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Detection from the top-level keys, first match wins (SPEC §1).
    pub fn detect(root: Value<'_, '_>) -> Option<Kind> {
        let has = |key: &str| root.entries().any(|(k, _)| k == key);
        if has("apiVersion") {
            Some(Kind::JobSpec)
        } else if has("transitions") {
            Some(Kind::JobRecord)
        } else if has("experiment_id") || has("best") {
            Some(Kind::BestRec)
        } else if has("mode") || has("command") || has("network_arch") {
            Some(Kind::SpecBundle)
        } else {
            None
        }
    }
}

/// Facts about one admission that are not in the document: who is asking, and how
/// much of the project's GPU quota other jobs already hold.
#[derive(Clone, Debug, Default)]
pub struct Admission {
    /// The authenticated account that `metadata.owner` is stamped with.
    pub owner: Option<String>,
    pub project_gpus_in_use: Option<u64>,
    pub project_quota: Option<u64>,
    /// Quotas looked up by each document's own project, for a batch judged on one
    /// snapshot of usage; `project_quota` takes precedence when both are given.
    pub quotas: Option<QuotaTable>,
    /// The projects the account may submit to (`*` for every one); `None` is no limit.
    pub projects: Option<Vec<String>>,
}

impl Admission {
    /// Whether the account may submit to `project`.
    pub fn may_submit_to(&self, project: &str) -> bool {
        self.projects
            .as_ref()
            .is_none_or(|p| p.iter().any(|g| g == "*" || g == project))
    }
}

/// Every project's quota and the GPUs its unfinished jobs hold.
#[derive(Clone, Debug, Default)]
pub struct QuotaTable {
    /// The quota of a project not listed in `projects`; `None` is unlimited.
    pub default: Option<u64>,
    pub projects: std::collections::HashMap<String, u64>,
    pub in_use: std::collections::HashMap<String, u64>,
}

impl Admission {
    /// `(quota, GPUs in use)` for a document of `project`, when a quota applies.
    pub fn quota_for(&self, project: &str) -> Option<(u64, u64)> {
        if let Some(quota) = self.project_quota {
            return Some((quota, self.project_gpus_in_use.unwrap_or(0)));
        }
        let table = self.quotas.as_ref()?;
        let project = project.trim();
        let quota = table.projects.get(project).copied().or(table.default)?;
        Some((quota, table.in_use.get(project).copied().unwrap_or(0)))
    }
}

pub fn check<'t, 'i>(
    kind: Kind,
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'i>,
) {
    match kind {
        Kind::JobSpec => jobspec::check(root, config, admission, ctx),
        Kind::SpecBundle => spec_bundle::check(root, config, ctx),
        Kind::JobRecord => job_record::check(root, ctx),
        Kind::BestRec => best_rec::check(root, ctx),
    }
}
