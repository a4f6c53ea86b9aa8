//! The protobuf wire form of `AdmitBatch` (`proto/jobgate/v1/admission.proto`), for
//! the service's hot path: a dry-run batch of raw documents is decoded, checked on
//! every core and its response encoded in one call, so the service builds no Python
//! object per document. Everything else (typed documents, packages, real admissions, bad bytes)
//! takes the service's general path; `decode` says which by returning `None`.
//!
//! The messages below mirror the protos field for field (numbers and types); the
//! service's tests compare these bytes with what the Python protobuf runtime encodes
//! for the same reports, so the two cannot drift apart silently.

use std::collections::BTreeMap;

use prost::Message;

use crate::admission::Admission;
use crate::kind::{Charge, Kind};
use crate::report::Report;
use crate::validator::Validator;

/// `jobgate.v1.AdmitBatchRequest`.
#[derive(Clone, PartialEq, Message)]
struct AdmitBatchRequest {
    #[prost(message, repeated, tag = "1")]
    documents: Vec<Document>,
    #[prost(bool, tag = "2")]
    dry_run: bool,
}

/// `jobgate.v1.Document`. The typed bodies are kept as their encoded bytes: this path
/// only needs to know they are there, to hand the request to the general path.
#[derive(Clone, PartialEq, Message)]
struct Document {
    #[prost(oneof = "Body", tags = "1, 2, 3")]
    body: Option<Body>,
    #[prost(int32, tag = "4")]
    kind: i32,
    /// A package archive to verify the bundle's files against: the general path's work.
    #[prost(bytes, tag = "5")]
    package: Vec<u8>,
    /// Read and ignored: this path answers dry runs only, which store nothing and so
    /// keep no key (a real admission with a key takes the general path).
    #[prost(string, tag = "6")]
    idempotency_key: String,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Body {
    #[prost(bytes, tag = "1")]
    Raw(Vec<u8>),
    #[prost(bytes, tag = "2")]
    JobSpec(Vec<u8>),
    #[prost(bytes, tag = "3")]
    SpecBundle(Vec<u8>),
}

/// `jobgate.v1.AdmitBatchResponse`.
#[derive(Clone, PartialEq, Message)]
struct AdmitBatchResponse {
    #[prost(message, repeated, tag = "1")]
    results: Vec<AdmitResponse>,
}

/// `jobgate.v1.AdmitResponse`.
#[derive(Clone, PartialEq, Message)]
struct AdmitResponse {
    #[prost(message, optional, tag = "1")]
    report: Option<ReportMessage>,
    #[prost(string, tag = "2")]
    job_id: String,
}

/// `jobgate.v1.Report`.
#[derive(Clone, PartialEq, Message)]
struct ReportMessage {
    #[prost(string, tag = "1")]
    kind: String,
    #[prost(string, tag = "2")]
    verdict: String,
    #[prost(message, repeated, tag = "3")]
    violations: Vec<ViolationMessage>,
}

/// `jobgate.v1.Violation`.
#[derive(Clone, PartialEq, Message)]
struct ViolationMessage {
    #[prost(string, tag = "1")]
    rule: String,
    #[prost(string, tag = "2")]
    field: String,
    #[prost(string, tag = "3")]
    message: String,
    #[prost(string, tag = "4")]
    severity: String,
    #[prost(uint32, tag = "5")]
    line: u32,
    #[prost(uint32, tag = "6")]
    column: u32,
    #[prost(string, tag = "7")]
    default_severity: String,
}

/// A dry-run batch answered on this path.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// How many documents the request holds.
    pub documents: usize,
    /// The encoded `AdmitBatchResponse`; `None` when the batch held more than
    /// `max_batch` documents and was not checked.
    pub response: Option<Vec<u8>>,
    /// Reports per verdict, for the service's metrics.
    pub verdicts: BTreeMap<&'static str, u64>,
    /// Violations per (rule, severity), for the service's metrics.
    pub rules: BTreeMap<(&'static str, &'static str), u64>,
}

/// A decoded dry-run request of raw documents: what this path answers.
pub struct Batch {
    items: Vec<(Vec<u8>, Option<Kind>)>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Decodes an encoded `AdmitBatchRequest` when it is a dry run of raw documents only;
/// `None` otherwise (or when the bytes are not a request at all), for the general path
/// to handle and explain.
pub fn decode(request: &[u8]) -> Option<Batch> {
    let request = AdmitBatchRequest::decode(request).ok()?;
    if !request.dry_run {
        return None;
    }
    let items = request
        .documents
        .into_iter()
        .map(|document| match document.body {
            Some(Body::Raw(raw)) if document.package.is_empty() => {
                Some((raw, Kind::of_proto(document.kind)))
            }
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Batch { items })
}

/// Checks a decoded batch and encodes its `AdmitBatchResponse`; a batch of more than
/// `max_batch` documents is only counted. With `max_response_bytes`, the largest
/// reports are cut so that the response fits (`report::fit`).
pub fn answer(
    validator: &Validator,
    batch: &Batch,
    admission: &Admission,
    max_batch: usize,
    threads: Option<usize>,
    max_response_bytes: Option<usize>,
) -> BatchOutcome {
    let mut outcome = BatchOutcome {
        documents: batch.len(),
        ..Default::default()
    };
    if batch.len() > max_batch {
        return outcome;
    }
    let mut reports = if admission.quotas.is_some() {
        in_item_order(validator, &batch.items, admission)
    } else {
        validator.check_each(&batch.items, threads, admission, |(raw, kind)| {
            (raw.as_slice(), *kind)
        })
    };
    if let Some(budget) = max_response_bytes {
        crate::report::fit(&mut reports, budget);
    }
    let response = AdmitBatchResponse {
        results: reports
            .iter()
            .map(|report| {
                count(&mut outcome, report);
                AdmitResponse {
                    report: Some(message(report)),
                    job_id: String::new(),
                }
            })
            .collect(),
    };
    outcome.response = Some(response.encode_to_vec());
    outcome
}

/// The reports of a batch judged under project quotas, as a real batch answers: one item
/// after another, each against the usage plus the GPUs of the earlier items that passed
/// (a JobSpec charged to its project, a spec-bundle to the account's home).
fn in_item_order(
    validator: &Validator,
    items: &[(Vec<u8>, Option<Kind>)],
    admission: &Admission,
) -> Vec<Report> {
    let mut admission = admission.clone();
    let home = admission.home.clone().unwrap_or_default();
    items
        .iter()
        .map(|(raw, kind)| {
            let report = validator.check(raw, *kind, &admission);
            if report.ok() {
                let charge = validator.facts(raw, *kind, None).and_then(|(f, _)| {
                    match f.kind.map(Kind::charge) {
                        Some(Charge::OwnProject { .. }) => Some((f.project, f.gpus)),
                        Some(Charge::AccountHome { .. }) => Some((home.clone(), f.gpus)),
                        Some(Charge::Nothing) | None => None,
                    }
                });
                if let (Some((project, gpus)), Some(table)) = (charge, admission.quotas.as_mut()) {
                    let held = table.in_use.entry(project).or_default();
                    *held = held.saturating_add(gpus);
                }
            }
            report
        })
        .collect()
}

fn count(outcome: &mut BatchOutcome, report: &Report) {
    *outcome.verdicts.entry(report.verdict()).or_default() += 1;
    for v in &report.violations {
        *outcome
            .rules
            .entry((v.rule.id(), v.severity.as_str()))
            .or_default() += 1;
    }
}

fn message(report: &Report) -> ReportMessage {
    ReportMessage {
        kind: report.kind_name().to_owned(),
        verdict: report.verdict().to_owned(),
        violations: report
            .violations
            .iter()
            .map(|v| ViolationMessage {
                rule: v.rule.id().to_owned(),
                field: v.field.clone(),
                message: v.message.clone(),
                severity: v.severity.as_str().to_owned(),
                line: v.at.map_or(0, |a| a.line),
                column: v.at.map_or(0, |a| a.column),
                default_severity: v
                    .default
                    .map_or_else(String::new, |d| d.as_str().to_owned()),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_batch_request(
        validator: &Validator,
        request: &[u8],
        admission: &Admission,
        max_batch: usize,
        threads: Option<usize>,
    ) -> Option<BatchOutcome> {
        decode(request).map(|batch| answer(validator, &batch, admission, max_batch, threads, None))
    }

    fn request(documents: Vec<Document>, dry_run: bool) -> Vec<u8> {
        AdmitBatchRequest { documents, dry_run }.encode_to_vec()
    }

    fn raw(bytes: &[u8], kind: i32) -> Document {
        Document {
            body: Some(Body::Raw(bytes.to_vec())),
            kind,
            package: Vec::new(),
            idempotency_key: String::new(),
        }
    }

    #[test]
    fn a_dry_run_of_raw_documents_is_answered_in_order() {
        let v = Validator::default();
        let req = request(vec![raw(b"{", 0), raw(b"[]", 1), raw(b"", 0)], true);
        let out = check_batch_request(&v, &req, &Admission::default(), 10, Some(1)).unwrap();
        assert_eq!(out.documents, 3);
        let response = AdmitBatchResponse::decode(out.response.unwrap().as_slice()).unwrap();
        let rules: Vec<_> = response
            .results
            .iter()
            .map(|r| r.report.as_ref().unwrap().violations[0].rule.as_str())
            .collect();
        assert_eq!(rules, ["json.syntax", "json.syntax", "json.syntax"]);
        assert_eq!(response.results[1].report.as_ref().unwrap().kind, "jobspec");
        assert_eq!(out.verdicts.get("fail"), Some(&3));
    }

    #[test]
    fn other_requests_are_left_to_the_general_path() {
        let v = Validator::default();
        let a = Admission::default();
        assert!(
            check_batch_request(&v, &request(vec![raw(b"{}", 0)], false), &a, 10, None).is_none()
        );
        let typed = Document {
            body: Some(Body::JobSpec(Vec::new())),
            kind: 0,
            package: Vec::new(),
            idempotency_key: String::new(),
        };
        assert!(check_batch_request(&v, &request(vec![typed], true), &a, 10, None).is_none());
        let empty = Document {
            body: None,
            kind: 0,
            package: Vec::new(),
            idempotency_key: String::new(),
        };
        assert!(check_batch_request(&v, &request(vec![empty], true), &a, 10, None).is_none());
        let packaged = Document {
            package: b"PK".to_vec(),
            ..raw(b"{}", 0)
        };
        assert!(check_batch_request(&v, &request(vec![packaged], true), &a, 10, None).is_none());
        assert!(check_batch_request(&v, b"\xff\xff\xff", &a, 10, None).is_none());
    }

    #[test]
    fn an_oversized_batch_is_counted_not_checked() {
        let v = Validator::default();
        let req = request(vec![raw(b"{}", 0); 5], true);
        let out = check_batch_request(&v, &req, &Admission::default(), 4, None).unwrap();
        assert_eq!((out.documents, out.response), (5, None));
    }
}
