//! Reports and violations: the values every entry point returns.
//!
//! Violations are plain Rust values, built cheaply while a document is walked and
//! turned into Python objects only at the boundary. A report's violations are sorted
//! by `field`, then `rule`, so the same document always yields the same report.

use crate::kind::Kind;
use crate::limits::ReportLimits;
use crate::locate::{self, Location, Target};
use crate::rules::{Graded, Rule, Severity};

/// One broken rule at one place of the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// A rule of the catalogue; reports carry its id, e.g. `tao.dotted_key`.
    pub rule: Rule,
    /// Where, as an RFC 6901 JSON Pointer; `""` is the whole document.
    pub field: String,
    /// One sentence a person can act on.
    pub message: String,
    pub severity: Severity,
    /// Where `field` is in the source text, once the report is located (`Report::locate`).
    pub at: Option<Location>,
    /// The severity the rules gave, when the deployment's `[rules]` changed it.
    pub default: Option<Severity>,
}

impl Violation {
    /// Places this violation in `source` as `Report::locate` does (`None`: not text).
    fn place(&mut self, source: Option<&[u8]>) {
        if let Some(source) = source {
            let target = Target {
                pointer: &self.field,
                key: self.rule.locates_key(),
            };
            self.at = locate::locate(source, &[target]).pop();
        }
    }

    /// A violation of `rule` (at its catalogued severity, or the one `rule.with_severity`
    /// gives) at `field`: the one way a violation is made. A rule walking a document
    /// reports through `Ctx::report`, which makes its violations here; a refusal before
    /// any document is read, a file check and a judgement made later call it directly.
    pub fn new(rule: impl Into<Graded>, field: String, message: String) -> Violation {
        let Graded { rule, severity } = rule.into();
        Violation {
            rule,
            field,
            message,
            severity,
            at: None,
            default: None,
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

    /// The report: the kept violations, with one `limits.violations` counting the rest.
    pub fn into_report(self, kind: Option<Kind>) -> Report {
        let mut report = Report::new(kind, self.kept);
        report.omitted = Omitted {
            count: self.omitted,
            errors: self.omitted_errors,
        };
        // The reason is worded only when something was left out: a clean report
        // allocates nothing here.
        if self.omitted == 0 {
            report.state_omitted("");
        } else {
            report.state_omitted(&omitted_reason(self.limits));
        }
        report
    }
}

/// Why a report leaves violations out, once its limits are reached.
fn omitted_reason(limits: ReportLimits) -> String {
    format!(
        "a report lists at most {} violations and {} bytes of fields and messages (limits.max_violations)",
        limits.max_violations, limits.max_bytes
    )
}

/// How many violations a report leaves out, and how many of those are errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Omitted {
    pub count: usize,
    pub errors: usize,
}

/// Cuts the largest reports of a batch so that all of them together weigh at most
/// `budget` bytes (see `Report::weight`), and the response that carries them fits
/// its message limit. Reports under the cap they share are left as they are, so an
/// ordinary batch is untouched; a cut report keeps its first violations, counts the
/// rest in `limits.violations`, and keeps its verdict.
pub fn fit(reports: &mut [Report], budget: usize) {
    let total: usize = reports.iter().map(Report::weight).sum();
    if total <= budget || reports.is_empty() {
        return;
    }
    // The largest cap that every report may weigh and still sum to the budget.
    let mut weights: Vec<usize> = reports.iter().map(Report::weight).collect();
    weights.sort_unstable();
    let (mut left, mut cap) = (budget, 0);
    for (i, w) in weights.iter().enumerate() {
        let share = left / (weights.len() - i);
        if *w > share {
            cap = share;
            break;
        }
        left -= w;
    }
    for report in reports.iter_mut().filter(|r| r.weight() > cap) {
        report.cut(cap);
    }
}

/// What one violation adds to an encoded report besides its field and message: the
/// rule id and protobuf framing, generously.
const VIOLATION_OVERHEAD: usize = 64;

/// The verdict on one document: its kind and every violation found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The detected or given kind; `None` when it could not be told.
    pub kind: Option<Kind>,
    pub violations: Vec<Violation>,
    /// What `limits.violations` counts.
    pub omitted: Omitted,
}

impl Report {
    pub fn new(kind: Option<Kind>, mut violations: Vec<Violation>) -> Report {
        sort(&mut violations);
        drop_repeats(&mut violations);
        Report {
            kind,
            violations,
            omitted: Omitted::default(),
        }
    }

    /// About the bytes the report takes once encoded.
    pub fn weight(&self) -> usize {
        self.violations
            .iter()
            .map(|v| v.field.len() + v.message.len() + VIOLATION_OVERHEAD)
            .sum::<usize>()
            + VIOLATION_OVERHEAD
    }

    /// Keeps the first violations that fit in `max_weight` and counts the others.
    fn cut(&mut self, max_weight: usize) {
        let all = std::mem::take(&mut self.violations);
        // Room for the `limits.violations` that says what was cut.
        let mut room = max_weight.saturating_sub(4 * VIOLATION_OVERHEAD + 256);
        let mut out_of_room = false;
        for v in all {
            if v.rule == Rule::LimitsViolations {
                continue; // counted in `omitted` already; stated again below
            }
            let weight = v.field.len() + v.message.len() + VIOLATION_OVERHEAD;
            if !out_of_room && weight <= room {
                room -= weight;
                self.violations.push(v);
            } else {
                out_of_room = true;
                self.omitted.count += 1;
                self.omitted.errors += usize::from(v.severity == Severity::Error);
            }
        }
        self.state_omitted(
            "a report in a large batch lists fewer, so that the whole response fits one message",
        );
    }

    /// (Re)states `limits.violations` from the counts. It is an error when an error was
    /// left out, so leaving violations out never changes a verdict.
    fn state_omitted(&mut self, why: &str) {
        self.violations.retain(|v| v.rule != Rule::LimitsViolations);
        if self.omitted.count == 0 {
            return;
        }
        let severity = if self.omitted.errors > 0 {
            Severity::Error
        } else {
            Severity::Warning
        };
        // An error when an error was left out, whatever the catalogue's default. Never
        // located: it is about the report, not a place in the document.
        self.violations.push(Violation::new(
            Rule::LimitsViolations.with_severity(severity),
            String::new(),
            format!(
                "{} more violations ({} of them errors) are not listed: {why}; fix the ones listed and check again",
                self.omitted.count, self.omitted.errors
            ),
        ));
        sort(&mut self.violations);
    }

    /// Adds a violation judged after the report was made (the project quota, judged
    /// against usage read later: `validator::Judgement::with_usage`), placed in
    /// `source` when given. Kept when the report has room within `limits`, else
    /// counted in `limits.violations`, as a violation found while the document was
    /// walked would have been.
    pub fn add(&mut self, mut violation: Violation, limits: ReportLimits, source: Option<&[u8]>) {
        let listed = self
            .violations
            .iter()
            .filter(|v| v.rule != Rule::LimitsViolations);
        let (count, bytes) = listed.fold((0, 0), |(n, b), v| {
            (n + 1, b + v.field.len() + v.message.len())
        });
        let size = violation.field.len() + violation.message.len();
        if self.omitted.count > 0
            || count >= limits.max_violations
            || bytes + size > limits.max_bytes
        {
            self.omitted.count += 1;
            self.omitted.errors += usize::from(violation.severity == Severity::Error);
            self.state_omitted(&omitted_reason(limits));
            if let Some(stated) = self
                .violations
                .iter_mut()
                .find(|v| v.rule == Rule::LimitsViolations)
            {
                stated.place(source);
            }
            return;
        }
        violation.place(source);
        self.violations.push(violation);
        sort(&mut self.violations);
    }

    /// Places every violation in `source`, the text the report was made from: the
    /// line and column of the value its field names (of the key, for rules about
    /// keys). Costs nothing for a clean report; one pass over the text otherwise.
    pub fn locate(&mut self, source: &[u8]) {
        if self.violations.is_empty() {
            return;
        }
        let targets: Vec<Target<'_>> = self
            .violations
            .iter()
            .map(|v| Target {
                pointer: &v.field,
                key: v.rule.locates_key(),
            })
            .collect();
        let places = locate::locate(source, &targets);
        for (v, at) in self.violations.iter_mut().zip(places) {
            v.at = Some(at);
        }
    }

    /// Places a refusal (a report of one violation about the whole document, made
    /// before the document could be read) where the document starts, as `locate`
    /// places every whole-document violation; where reading failed, its message says.
    /// An input refused for its size is left unplaced, unread: as a file refused before
    /// it is read whole is, so that both report alike.
    pub fn locate_refusal(&mut self, source: &[u8]) {
        if !self.violations.iter().any(|v| v.rule == Rule::LimitsSize) {
            self.locate(source);
        }
    }

    /// Forgets where the violations are: for a document that was not text (a parsed
    /// object, a typed message), whose writer has no lines to look at.
    pub fn unlocate(&mut self) {
        for v in &mut self.violations {
            v.at = None;
        }
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
        self.violations
            .iter()
            .filter(|v| v.severity == Severity::Warning)
            .count()
    }

    /// Applies the deployment's severities (`[rules]`): each violation of a rule it
    /// sets takes that severity, and keeps the one the rules gave in `default`.
    /// `project` selects the project's own settings, which come first.
    pub fn enforce(&mut self, enforcement: &crate::config::Enforcement, project: Option<&str>) {
        for v in &mut self.violations {
            if let Some(level) = enforcement.level(v.rule, project) {
                if level != v.severity {
                    v.default = Some(v.severity);
                    v.severity = level;
                }
            }
        }
    }

    /// The report as JSON, in the shape of SPEC §6 (without `source`).
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind_name(),
            "verdict": self.verdict(),
            "violations": self.violations.iter().map(|v| {
                let mut shown = serde_json::json!({
                    "rule": v.rule.id(),
                    "field": v.field,
                    "message": v.message,
                    "severity": v.severity.as_str(),
                });
                if let (Some(at), Some(map)) = (v.at, shown.as_object_mut()) {
                    map.insert("line".into(), at.line.into());
                    map.insert("column".into(), at.column.into());
                }
                if let (Some(default), Some(map)) = (v.default, shown.as_object_mut()) {
                    map.insert("default_severity".into(), default.as_str().into());
                }
                shown
            }).collect::<Vec<_>>(),
        })
    }
}

/// By field, then rule; stable, so violations of the same field and rule keep the order
/// they were found in.
fn sort(violations: &mut [Violation]) {
    violations.sort_by(|a, b| {
        a.field
            .cmp(&b.field)
            .then_with(|| a.rule.id().cmp(b.rule.id()))
    });
}

/// Keeps one of each set of equal violations (sorted, so equal ones share a run of one
/// field and rule). A pointer cannot tell the occurrences of a repeated key apart, so
/// without this every rule about such a key would say the same thing once per
/// occurrence.
fn drop_repeats(violations: &mut Vec<Violation>) {
    if violations.len() < 2 {
        return;
    }
    let mut kept: Vec<Violation> = Vec::with_capacity(violations.len());
    let mut run = 0; // where the run of the current field and rule starts in `kept`
    for v in violations.drain(..) {
        if kept
            .last()
            .is_some_and(|last| last.field != v.field || last.rule != v.rule)
        {
            run = kept.len();
        }
        if !kept[run..].contains(&v) {
            kept.push(v);
        }
    }
    *violations = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(n: usize, field_len: usize) -> Report {
        let violations = (0..n)
            .map(|i| {
                Violation::new(
                    Rule::TaoDottedKey,
                    format!("/{i:06}{}", "k".repeat(field_len)),
                    "dotted".into(),
                )
            })
            .collect();
        Report::new(None, violations)
    }

    #[test]
    fn fit_cuts_only_the_largest_reports_and_keeps_verdicts() {
        let small = report(2, 10);
        let mut reports = vec![
            small.clone(),
            report(500, 1000),
            report(300, 1000),
            small.clone(),
        ];
        let budget = 200_000;
        fit(&mut reports, budget);
        assert!(reports.iter().map(Report::weight).sum::<usize>() <= budget);
        assert_eq!(reports[0], small);
        assert_eq!(reports[3], small);
        for (cut, n) in reports[1..3].iter().zip([500, 300]) {
            assert!(!cut.ok());
            let first = &cut.violations[0];
            assert_eq!(
                (first.rule, first.severity),
                (Rule::LimitsViolations, Severity::Error)
            );
            assert!(cut.omitted.count > 0);
            assert_eq!(cut.violations.len() - 1 + cut.omitted.count, n);
        }
        // A report cut twice counts everything it left out.
        let mut again = reports.clone();
        fit(&mut again, budget / 4);
        assert!(again[1].omitted.count > reports[1].omitted.count);
        assert_eq!(again[1].violations.len() - 1 + again[1].omitted.count, 500);
    }

    #[test]
    fn fit_leaves_a_batch_under_budget_alone() {
        let mut reports = vec![report(3, 10), report(5, 10)];
        let before = reports.clone();
        fit(&mut reports, 1 << 20);
        assert_eq!(reports, before);
    }
}
