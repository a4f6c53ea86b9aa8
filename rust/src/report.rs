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

/// How large one report may grow, so that it stays linear in its document and always
/// fits a response: at most `max_violations` violations and `max_bytes` of fields and
/// messages; what is left out is counted in one `limits.violations` violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLimits {
    pub max_violations: usize,
    pub max_bytes: usize,
}

pub const DEFAULT_MAX_VIOLATIONS: usize = 1000;
/// Well under gRPC's default 4 MiB message, with room for the request's other reports.
pub const DEFAULT_MAX_REPORT_BYTES: usize = 1 << 20;

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            max_violations: DEFAULT_MAX_VIOLATIONS,
            max_bytes: DEFAULT_MAX_REPORT_BYTES,
        }
    }
}

/// Violations kept while a document is walked, and the count of those left out once
/// the limits were reached. The first ones found are kept; once one is left out, all
/// later ones are too (nothing is built for them), so the cost stays bounded.
#[derive(Debug, Default)]
pub struct Collected {
    pub limits: ReportLimits,
    pub kept: Vec<Violation>,
    bytes: usize,
    pub omitted: usize,
    pub omitted_errors: usize,
}

impl Collected {
    pub fn new(limits: ReportLimits) -> Self {
        Collected {
            limits,
            ..Default::default()
        }
    }

    /// Whether another violation would still be kept; when not, callers skip building it.
    pub fn has_room(&self) -> bool {
        self.omitted == 0 && self.kept.len() < self.limits.max_violations
    }

    pub fn push(&mut self, v: Violation) {
        let size = v.field.len() + v.message.len();
        if self.has_room() && self.bytes + size <= self.limits.max_bytes {
            self.bytes += size;
            self.kept.push(v);
        } else {
            self.skip(v.severity);
        }
    }

    /// Counts a violation that was not built.
    pub fn skip(&mut self, severity: Severity) {
        self.omitted += 1;
        if severity == Severity::Error {
            self.omitted_errors += 1;
        }
    }

    pub fn extend(&mut self, violations: impl IntoIterator<Item = Violation>) {
        for v in violations {
            self.push(v);
        }
    }

    /// The kept violations, with one `limits.violations` counting the rest. It is an
    /// error when an error was left out, so leaving violations out never changes a verdict.
    pub fn finish(mut self) -> Vec<Violation> {
        if self.omitted > 0 {
            let severity = if self.omitted_errors > 0 {
                Severity::Error
            } else {
                Severity::Warning
            };
            self.kept.push(Violation {
                rule: "limits.violations",
                field: String::new(),
                message: format!(
                    "{} more violations ({} of them errors) are not listed: a report lists at most {} violations and {} bytes of fields and messages (limits.max_violations); fix the ones listed and check again",
                    self.omitted, self.omitted_errors, self.limits.max_violations, self.limits.max_bytes
                ),
                severity,
            });
        }
        self.kept
    }
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
