//! Facts about one admission that are not in the document: who is asking, which
//! projects they may submit to (and where their spec-bundles go), and each project's
//! GPU quota and usage. The service gathers them; the deployment rules of
//! `kinds::jobspec` and `kinds::spec_bundle` judge with them.
//!
//! A leaf of the crate: imports nothing from it.

use std::collections::HashMap;

/// Who is asking, and how much of the project's GPU quota other jobs already hold.
#[derive(Clone, Debug, Default)]
pub struct AdmissionContext {
    /// The authenticated account that `metadata.owner` is stamped with.
    pub owner: Option<String>,
    pub project_gpus_in_use: Option<u64>,
    pub project_quota: Option<u64>,
    /// Quotas looked up by each document's own project, for a batch judged on one
    /// snapshot of usage; `project_quota` takes precedence when both are given.
    pub quotas: Option<QuotaTable>,
    /// The projects the account may submit to (`*` for every one); `None` is no limit.
    pub projects: Option<Vec<String>>,
    /// The project the account's spec-bundles are admitted into and charged to: they
    /// name none.
    pub home: Option<String>,
    /// The project quota is judged after the report, against the usage read when the
    /// record is opened: the rules keep what the launch charges (`quota::Claim`)
    /// instead of judging it, when no quota is given here.
    pub defer_quota: bool,
}

impl AdmissionContext {
    /// Whether the account may submit to `project`.
    pub fn may_submit_to(&self, project: &str) -> bool {
        self.projects
            .as_ref()
            .is_none_or(|p| p.iter().any(|g| g == "*" || g == project))
    }

    /// `(quota, GPUs in use)` for a document of `project`, when a quota applies.
    pub fn quota_for(&self, project: &str) -> Option<(u64, u64)> {
        if let Some(quota) = self.project_quota {
            return Some((quota, self.project_gpus_in_use.unwrap_or(0)));
        }
        let table = self.quotas.as_ref()?;
        let quota = table.quota_of(project)?;
        Some((quota, table.in_use_of(project)))
    }
}

/// Every project's quota and the GPUs its unfinished jobs hold.
#[derive(Clone, Debug, Default)]
pub struct QuotaTable {
    /// The quota of a project not listed in `projects`; `None` is unlimited.
    pub default: Option<u64>,
    pub projects: HashMap<String, u64>,
    pub in_use: HashMap<String, u64>,
}

impl QuotaTable {
    /// The GPUs `project` may hold in unfinished jobs; `None` is unlimited. `project`
    /// is the name as `patterns::project_of` reads it, the name its jobs are recorded under.
    pub fn quota_of(&self, project: &str) -> Option<u64> {
        self.projects.get(project).copied().or(self.default)
    }

    /// The GPUs `project`'s unfinished jobs hold.
    pub fn in_use_of(&self, project: &str) -> u64 {
        self.in_use.get(project).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_project_has_its_own_quota_and_the_others_the_default() {
        let table = QuotaTable {
            default: Some(8),
            projects: HashMap::from([("lab".to_string(), 64)]),
            in_use: HashMap::from([("lab".to_string(), 3)]),
        };
        assert_eq!(table.quota_of("lab"), Some(64));
        assert_eq!(table.quota_of("other"), Some(8));
        let admission = AdmissionContext {
            quotas: Some(table),
            ..Default::default()
        };
        assert_eq!(admission.quota_for("lab"), Some((64, 3)));
        assert_eq!(admission.quota_for("other"), Some((8, 0)));
        let unlimited = QuotaTable::default();
        assert_eq!(unlimited.quota_of("lab"), None);
    }
}
