//! The project quota (`forge.quota.project`): the GPUs a launch charges against the
//! GPUs its project's unfinished jobs hold. Judged by the rules when the admission
//! knows the usage as the document is checked (a dry run, a batch on one snapshot), or
//! kept as a `Claim` and judged once the usage is read in the transaction that opens
//! the record (`Validator::judge`, `Judgement::with_usage`): the document is read and
//! checked once either way, and the wording is this module's alone. The rules charge
//! through `gpus::charge`.

use crate::kind::{Charge, Kind};
use crate::node::quote;
use crate::pointer::ptr;
use crate::report::Violation;
use crate::rules::Rule;

/// What a launch charges to a project, once the rules have found it chargeable (a
/// count that can be charged, within the grant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// A JobSpec charges its own project; a spec-bundle its account's home.
    pub kind: Kind,
    /// The project charged; `None` for a bundle of an account with no home given.
    pub project: Option<String>,
    pub gpus: u64,
}

impl Claim {
    /// `forge.quota.project` when the project, holding `in_use` GPUs, cannot take this
    /// claim within `quota`.
    pub fn judge(&self, in_use: u64, quota: u64) -> Option<Violation> {
        let (field, message) = self.excess(in_use, quota)?;
        Some(Violation::new(Rule::ForgeQuotaProject, field, message))
    }

    /// Where and why the claim does not fit (`judge`'s violation, for a rule that
    /// reports it through its `Ctx`).
    pub fn excess(&self, in_use: u64, quota: u64) -> Option<(String, String)> {
        if in_use.saturating_add(self.gpus) <= quota {
            return None;
        }
        let gpus = self.gpus;
        let (field, message) = match (self.kind.charge(), self.project.as_deref()) {
            (Charge::AccountHome { gpus: at }, home) => {
                let project = home.map_or_else(
                    || "the account's project".to_string(),
                    |h| format!("the account's project {}", quote(h)),
                );
                (ptr![at], format!("a spec-bundle runs in {project}, which holds {in_use} GPUs in unfinished jobs; {gpus} more would exceed its quota of {quota}"))
            }
            // A kind that launches nothing is never claimed for.
            (Charge::Nothing, _) => return None,
            (Charge::OwnProject { gpus: at, .. }, project) => (
                ptr![at],
                format!("project {} holds {in_use} GPUs in unfinished jobs; {gpus} more would exceed its quota of {quota}", quote(project.unwrap_or_default())),
            ),
        };
        Some((field.to_string(), message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_a_claim_against_usage_and_quota() {
        let jobspec = Claim {
            kind: Kind::JobSpec,
            project: Some("lab".into()),
            gpus: 8,
        };
        assert_eq!(jobspec.judge(56, 64), None);
        let v = jobspec.judge(57, 64).expect("over the quota");
        assert_eq!(
            (v.rule, v.field.as_str()),
            (Rule::ForgeQuotaProject, "/spec/resources")
        );
        assert_eq!(
            v.message,
            "project \"lab\" holds 57 GPUs in unfinished jobs; 8 more would exceed its quota of 64"
        );
        let bundle = Claim {
            kind: Kind::SpecBundle,
            project: None,
            gpus: 2,
        };
        let v = bundle.judge(u64::MAX, 1).expect("over the quota");
        assert_eq!(v.field, "/compute_shape");
        assert!(v
            .message
            .starts_with("a spec-bundle runs in the account's project, which holds"));
    }
}
