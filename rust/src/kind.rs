//! The four kinds of document jobgate judges, and how each is told apart from its
//! top-level keys (SPEC §1). What each kind's rules are lives in `kinds`.
//!
//! A leaf of the crate: imports only the document view (`node`).

use crate::node::Value;

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
