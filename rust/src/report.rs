//! Reports and violations: the values every entry point returns.
//!
//! Violations are plain Rust values, built cheaply while a document is walked and
//! turned into Python objects only at the boundary. A report's violations are sorted
//! by `field`, then `rule`, so the same document always yields the same report.

use crate::kinds::Kind;

/// `error` blocks admission; `warning` is reported and does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One broken rule at one place of the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// A stable id from the rule catalogue, e.g. `tao.dotted_key`.
    pub rule: &'static str,
    /// Where, as an RFC 6901 JSON Pointer; `""` is the whole document.
    pub field: String,
    /// One sentence a person can act on.
    pub message: String,
    pub severity: Severity,
}

/// The verdict on one document: its kind and every violation found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The detected or given kind; `None` when it could not be told.
    pub kind: Option<Kind>,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn new(kind: Option<Kind>, mut violations: Vec<Violation>) -> Report {
        // Stable sort: violations of the same field and rule keep the order they were found in.
        violations.sort_by(|a, b| a.field.cmp(&b.field).then_with(|| a.rule.cmp(b.rule)));
        Report { kind, violations }
    }

    pub fn kind_name(&self) -> &'static str {
        self.kind.map_or("unknown", Kind::as_str)
    }

    /// Admitted when no violation is an error.
    pub fn ok(&self) -> bool {
        !self
            .violations
            .iter()
            .any(|v| v.severity == Severity::Error)
    }

    pub fn verdict(&self) -> &'static str {
        if self.ok() {
            "pass"
        } else {
            "fail"
        }
    }

    pub fn errors(&self) -> usize {
        self.violations
            .iter()
            .filter(|v| v.severity == Severity::Error)
            .count()
    }

    pub fn warnings(&self) -> usize {
        self.violations.len() - self.errors()
    }

    /// The report as JSON, in the shape of SPEC §6 (without `source`).
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind_name(),
            "verdict": self.verdict(),
            "violations": self.violations.iter().map(|v| serde_json::json!({
                "rule": v.rule,
                "field": v.field,
                "message": v.message,
                "severity": v.severity.as_str(),
            })).collect::<Vec<_>>(),
        })
    }
}
