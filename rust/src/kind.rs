//! The kinds of document jobgate judges, one row each in `TABLE`: the name reports
//! carry, the `jobgate.v1.Kind` number, the top-level keys that detect it and which
//! kind wins when several match (SPEC §1), and what a launch of it charges. Every list
//! of kinds elsewhere (error messages, the wire, Python's `KINDS`, launchability,
//! quota) is read from this table; the rules and facts of each kind are its module in
//! `kinds` (`kinds::behaviour`).
//!
//! A leaf of the crate: imports only the document view (`node`) and `text`.

use std::sync::OnceLock;

use crate::node::Value;
use crate::text::const_same;

/// What a document of a kind charges when it is admitted. A kind that charges a
/// project launches a job (and opens a record); the others describe jobs already run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// Launches nothing: it may be checked, never admitted.
    Nothing,
    /// Launches, charged to the project the document names at `project`, for the GPUs
    /// it asks for under `gpus` (the keys from the root).
    OwnProject {
        project: &'static [&'static str],
        gpus: &'static [&'static str],
    },
    /// Launches, charged to the submitting account's home project (the document names
    /// none), for the GPUs it asks for under `gpus`.
    AccountHome { gpus: &'static [&'static str] },
}

impl Charge {
    /// Where the project comes from, as Python reads it (`Facts.charge`,
    /// `kind_table()`): `None` for a kind that launches nothing.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Charge::Nothing => None,
            Charge::OwnProject { .. } => Some("project"),
            Charge::AccountHome { .. } => Some("home"),
        }
    }
}

/// One kind: everything about it that is not its rules.
#[derive(Debug)]
pub struct KindInfo {
    pub kind: Kind,
    /// The name reports, the CLI and the Python API use.
    pub name: &'static str,
    /// Its number in `jobgate.v1.Kind` (`proto/jobgate/v1/report.proto`).
    pub proto: i32,
    /// The top-level keys that mark a document of this kind.
    pub detect: &'static [&'static str],
    /// When a document has the keys of several kinds, the lowest rank wins.
    pub rank: u8,
    pub charge: Charge,
    /// The top-level arrays the kind's published schema requires. A typed message has
    /// no absent list (proto3), so its JSON form holds these even when empty: an empty
    /// `all_recs` is valid, a missing one is not.
    pub typed_lists: &'static [&'static str],
}

/// Declares `Kind`, one variant per row, and `TABLE`, the rows in the same order: a
/// kind cannot be declared without its row, nor a row without every column.
macro_rules! kinds {
    ($($kind:ident { $($column:ident: $value:expr),* $(,)? })*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kind {
            $($kind,)*
        }

        /// Every kind, in `Kind` order (which is also `jobgate.KINDS`'s).
        pub const TABLE: &[KindInfo] = &[$(KindInfo {
            kind: Kind::$kind,
            $($column: $value,)*
        },)*];
    };
}

kinds! {
    JobSpec {
        name: "jobspec",
        proto: 1,
        detect: &["apiVersion"],
        rank: 0,
        charge: Charge::OwnProject {
            project: &["metadata", "project"],
            gpus: &["spec", "resources"],
        },
        typed_lists: &[],
    }
    SpecBundle {
        name: "spec_bundle",
        proto: 2,
        detect: &["mode", "command", "network_arch"],
        rank: 3,
        charge: Charge::AccountHome {
            gpus: &["compute_shape"],
        },
        typed_lists: &["declared_inputs", "declared_outputs"],
    }
    JobRecord {
        name: "job_record",
        proto: 3,
        detect: &["transitions"],
        rank: 1,
        charge: Charge::Nothing,
        typed_lists: &["transitions"],
    }
    BestRec {
        name: "best_rec",
        proto: 4,
        detect: &["experiment_id", "best"],
        rank: 2,
        charge: Charge::Nothing,
        typed_lists: &["all_recs"],
    }
}

// Names, ranks, numbers and detection keys are distinct, so a row that repeats one
// does not build (a rank is one bit of a `u8`; 0 is `KIND_UNSPECIFIED`).
const _: () = {
    let mut i = 0;
    while i < TABLE.len() {
        assert!(TABLE[i].rank < 8, "a rank is a bit of a u8");
        assert!(TABLE[i].proto > 0, "0 is KIND_UNSPECIFIED");
        let mut j = 0;
        while j < i {
            assert!(
                !const_same(TABLE[i].name, TABLE[j].name),
                "two kinds share a name"
            );
            assert!(TABLE[i].rank != TABLE[j].rank, "two kinds share a rank");
            assert!(TABLE[i].proto != TABLE[j].proto, "two kinds share a number");
            let mut a = 0;
            while a < TABLE[i].detect.len() {
                let mut b = 0;
                while b < TABLE[j].detect.len() {
                    assert!(
                        !const_same(TABLE[i].detect[a], TABLE[j].detect[b]),
                        "two kinds share a detection key"
                    );
                    b += 1;
                }
                a += 1;
            }
            j += 1;
        }
        i += 1;
    }
};

impl Kind {
    pub const ALL: [Kind; TABLE.len()] = {
        let mut all = [Kind::JobSpec; TABLE.len()];
        let mut i = 0;
        while i < TABLE.len() {
            all[i] = TABLE[i].kind;
            i += 1;
        }
        all
    };

    #[inline]
    pub const fn info(self) -> &'static KindInfo {
        &TABLE[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.info().name
    }

    /// Whether a document of this kind launches a job (and opens a record, charged to
    /// a project's quota); the others describe jobs already run.
    pub fn launches(self) -> bool {
        self.info().charge != Charge::Nothing
    }

    pub fn charge(self) -> Charge {
        self.info().charge
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The kind of a `jobgate.v1.Kind` number; 0 and unknown numbers are `None`.
    pub fn of_proto(number: i32) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.info().proto == number)
    }

    /// Detection from the top-level keys, lowest rank wins (SPEC §1). One pass over
    /// the keys, however many of them there are, and no further than a key of the
    /// kind that wins over every other.
    pub fn detect(root: Value<'_, '_>) -> Option<Kind> {
        let mut found = 0u8;
        for (k, _) in root.entries() {
            let Some(info) = TABLE.iter().find(|i| i.detect.contains(&k)) else {
                continue;
            };
            if info.rank == 0 {
                return Some(info.kind);
            }
            found |= 1 << info.rank;
        }
        let rank = found.trailing_zeros();
        TABLE
            .iter()
            .find(|i| u32::from(i.rank) == rank)
            .map(|i| i.kind)
    }

    /// Every kind's name, e.g. "jobspec, spec_bundle, job_record, best_rec".
    pub fn names() -> &'static str {
        static NAMES: OnceLock<String> = OnceLock::new();
        NAMES.get_or_init(|| {
            let names: Vec<&str> = Kind::ALL.map(Kind::as_str).into();
            names.join(", ")
        })
    }

    /// How each kind is detected, in rank order, e.g. "no apiVersion (jobspec), …, or
    /// mode, command or network_arch (spec_bundle)".
    pub fn detection() -> &'static str {
        static DETECTION: OnceLock<String> = OnceLock::new();
        DETECTION.get_or_init(|| {
            let mut rows: Vec<&KindInfo> = TABLE.iter().collect();
            rows.sort_by_key(|i| i.rank);
            let parts: Vec<String> = rows
                .iter()
                .map(|i| format!("{} ({})", either(i.detect), i.name))
                .collect();
            // The kinds are listed with a comma before the last "or": each names keys
            // joined by "or" itself.
            let (last, rest) = parts.split_last().expect("at least one kind");
            format!("no {}, or {last}", rest.join(", "))
        })
    }
}

/// "a", "a or b", "a, b or c".
fn either(keys: &[&str]) -> String {
    match keys.split_last() {
        None => String::new(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::with_document;
    use crate::limits::Limits;

    fn detected(doc: &str) -> Option<Kind> {
        with_document(doc.as_bytes(), &Limits::default(), |d| Kind::detect(d.root)).unwrap()
    }

    #[test]
    fn detection_follows_the_ranks() {
        assert_eq!(
            detected(r#"{"best":1,"apiVersion":"x"}"#),
            Some(Kind::JobSpec)
        );
        assert_eq!(
            detected(r#"{"mode":1,"transitions":[]}"#),
            Some(Kind::JobRecord)
        );
        assert_eq!(
            detected(r#"{"command":1,"experiment_id":2}"#),
            Some(Kind::BestRec)
        );
        assert_eq!(detected(r#"{"network_arch":"x"}"#), Some(Kind::SpecBundle));
        assert_eq!(detected(r#"{"other":1}"#), None);
        let mut keys: Vec<&str> = TABLE
            .iter()
            .flat_map(|i| i.detect.iter().copied())
            .collect();
        let all = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), all, "a key detects one kind");
        for info in TABLE {
            for key in info.detect {
                assert_eq!(detected(&format!("{{\"{key}\":1}}")), Some(info.kind));
            }
        }
    }

    #[test]
    fn lists_are_read_from_the_table() {
        assert_eq!(Kind::names(), "jobspec, spec_bundle, job_record, best_rec");
        assert_eq!(
            Kind::detection(),
            "no apiVersion (jobspec), transitions (job_record), experiment_id or best (best_rec), or mode, command or network_arch (spec_bundle)"
        );
        assert_eq!(Kind::of_proto(2), Some(Kind::SpecBundle));
        assert_eq!(Kind::of_proto(0), None);
        assert_eq!(Kind::of_proto(5), None);
        let launching: Vec<&str> = Kind::ALL
            .into_iter()
            .filter(|k| k.launches())
            .map(Kind::as_str)
            .collect();
        assert_eq!(launching, ["jobspec", "spec_bundle"]);
    }
}
