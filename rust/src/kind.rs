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

    /// Whether a document of this kind launches a job (and opens a record, charged to
    /// a project's quota); the others describe jobs already run.
    pub fn launches(self) -> bool {
        matches!(self, Kind::JobSpec | Kind::SpecBundle)
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Detection from the top-level keys, first match wins (SPEC §1). One pass over
    /// the keys, however many of them there are, and no further than `apiVersion`.
    pub fn detect(root: Value<'_, '_>) -> Option<Kind> {
        const JOBSPEC: u8 = 1;
        const JOB_RECORD: u8 = 2;
        const BEST_REC: u8 = 4;
        const SPEC_BUNDLE: u8 = 8;
        let mut found = 0u8;
        for (k, _) in root.entries() {
            found |= match k {
                "apiVersion" => JOBSPEC,
                "transitions" => JOB_RECORD,
                "experiment_id" | "best" => BEST_REC,
                "mode" | "command" | "network_arch" => SPEC_BUNDLE,
                _ => 0,
            };
            // A JobSpec wins over every other kind: the keys left cannot change that.
            if found & JOBSPEC != 0 {
                return Some(Kind::JobSpec);
            }
        }
        if found & JOBSPEC != 0 {
            Some(Kind::JobSpec)
        } else if found & JOB_RECORD != 0 {
            Some(Kind::JobRecord)
        } else if found & BEST_REC != 0 {
            Some(Kind::BestRec)
        } else if found & SPEC_BUNDLE != 0 {
            Some(Kind::SpecBundle)
        } else {
            None
        }
    }
}
