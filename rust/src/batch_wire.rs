//! The protobuf wire form of `AdmitBatch` (`proto/jobgate/v1/admission.proto`), for
//! the service's hot path: a dry-run batch of raw documents is decoded, checked on
//! every core and its response encoded in one call, so the service builds no Python
//! object per document. Everything else (typed documents, packages, real admissions, bad bytes)
//! takes the service's general path; `decode` says which by returning `None`.
//!
//! The request is read in place (`decode`): each document is a slice of the request's
//! bytes, nothing is copied. The response messages below mirror the protos field for
//! field (numbers and types); the service's tests compare these bytes with what the
//! Python protobuf runtime encodes for the same reports, and this module's tests
//! compare `decode` with prost decoding the request messages as the protos declare
//! them, so neither can drift apart silently.

use std::collections::BTreeMap;

use prost::Message;

use crate::admission::AdmissionContext;
use crate::kind::{Charge, Kind};
use crate::report::Report;
use crate::rules::Severity;
use crate::validator::Validator;

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
    /// `jobgate.v1.Verdict`.
    #[prost(int32, tag = "4")]
    verdict_code: i32,
    /// `jobgate.v1.Kind`.
    #[prost(int32, tag = "5")]
    kind_code: i32,
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
    /// `jobgate.v1.Severity`.
    #[prost(int32, tag = "8")]
    severity_code: i32,
    /// `jobgate.v1.Severity`, 0 (SEVERITY_UNSPECIFIED) when the rules' severity stands.
    #[prost(int32, tag = "9")]
    default_severity_code: i32,
}

/// `jobgate.v1.Verdict` of a report: VERDICT_PASS or VERDICT_FAIL.
fn verdict_code(report: &Report) -> i32 {
    if report.ok() {
        1
    } else {
        2
    }
}

/// `jobgate.v1.Severity` of a severity.
fn severity_code(severity: Severity) -> i32 {
    match severity {
        Severity::Error => 1,
        Severity::Warning => 2,
        Severity::Off => 3,
    }
}

/// A dry-run batch answered on this path.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// How many documents the request holds.
    pub documents: usize,
    /// The encoded `AdmitBatchResponse` (`AdmitResponse` from `answer_one`); `None`
    /// when the batch held more than `max_batch` documents and was not checked.
    pub response: Option<Vec<u8>>,
    /// Reports per verdict, for the service's metrics.
    pub verdicts: BTreeMap<&'static str, u64>,
    /// Violations per (rule, severity), for the service's metrics.
    pub rules: BTreeMap<(&'static str, &'static str), u64>,
}

/// A decoded dry-run request of raw documents: what this path answers. Each
/// document is a slice of the request's bytes.
pub struct Batch<'a> {
    items: Vec<(&'a [u8], Option<Kind>)>,
}

impl<'a> Batch<'a> {
    /// Each document's raw body (a slice of the request) and the kind it was given.
    pub fn documents(&self) -> impl Iterator<Item = (&'a [u8], Option<Kind>)> + '_ {
        self.items.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Decodes an encoded `AdmitBatchRequest` when it is a dry run of raw documents only;
/// `None` otherwise (or when the bytes are not a request at all), for the general path
/// to handle and explain. Reads as prost reads the messages the protos declare:
/// unknown fields are skipped, the last of a field given twice wins (a oneof's last
/// member too), a string must be UTF-8, and anything malformed is `None`.
pub fn decode(request: &[u8]) -> Option<Batch<'_>> {
    let mut items = Vec::new();
    let mut dry_run = false;
    let mut fields = Fields::new(request, NESTING);
    while let Some((number, value)) = fields.next()? {
        match (number, value) {
            (1, Value::Bytes(document)) => items.push(raw_document(document)?),
            (2, Value::Varint(v)) => dry_run = v != 0,
            (1 | 2, _) => return None,
            _ => {}
        }
    }
    dry_run.then_some(Batch { items })
}

/// One `jobgate.v1.Document` of a dry run: its raw body and kind, or `None` when it
/// is typed, has no body or carries a package (the general path's work).
fn raw_document(document: &[u8]) -> Option<(&[u8], Option<Kind>)> {
    let (mut raw, mut kind, mut package_given) = (None, 0i32, false);
    // prost reads a nested message one level deeper.
    let mut fields = Fields::new(document, NESTING - 1);
    while let Some((number, value)) = fields.next()? {
        match (number, value) {
            (1, Value::Bytes(body)) => raw = Some(body),
            // A typed body (jobspec, spec_bundle, job_record, best_rec): the last member of the oneof wins.
            (2 | 3 | 7 | 8, Value::Bytes(_)) => raw = None,
            // An int32 is the low 32 bits of its varint, as prost reads it.
            (4, Value::Varint(v)) => kind = v as i32,
            (5, Value::Bytes(package)) => package_given = !package.is_empty(),
            (6, Value::Bytes(key)) => {
                simdutf8::basic::from_utf8(key).ok()?;
            }
            (1..=8, _) => return None,
            _ => {}
        }
    }
    // A typed body given after a raw one leaves `raw` empty, as does no body at all.
    let raw = raw?;
    (!package_given).then_some((raw, Kind::of_proto(kind)))
}

/// A field's value: a varint, the bytes of a length-delimited field, or a field of
/// another wire type, skipped.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Skipped,
}

/// How deep prost reads nested groups and messages (its `RECURSION_LIMIT`).
const NESTING: u32 = 100;

/// The fields of one encoded message, in order: `Some(None)` at its end, `None` when
/// the bytes are malformed. `depth` is what prost's decode context would hold there.
struct Fields<'a> {
    bytes: &'a [u8],
    depth: u32,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8], depth: u32) -> Self {
        Fields { bytes, depth }
    }

    fn next(&mut self) -> Option<Option<(u32, Value<'a>)>> {
        if self.bytes.is_empty() {
            return Some(None);
        }
        let (number, wire) = self.key()?;
        let value = match wire {
            0 => Value::Varint(self.varint()?),
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                let bytes = self.bytes.get(..len)?;
                self.bytes = &self.bytes[len..];
                Value::Bytes(bytes)
            }
            _ => {
                self.skip(number, wire, self.depth)?;
                Value::Skipped
            }
        };
        Some(Some((number, value)))
    }

    /// A field's number and wire type, as prost's `decode_key` accepts them.
    fn key(&mut self) -> Option<(u32, u8)> {
        let key = u32::try_from(self.varint()?).ok()?;
        let wire = (key & 7) as u8;
        (wire <= 5 && key >> 3 != 0).then_some((key >> 3, wire))
    }

    /// Skips a field's value as prost's `skip_field` does, groups included (nested at
    /// most as deep as prost reads them).
    fn skip(&mut self, number: u32, wire: u8, depth: u32) -> Option<()> {
        if depth == 0 {
            return None;
        }
        let len = match wire {
            0 => {
                self.varint()?;
                0
            }
            1 => 8,
            2 => usize::try_from(self.varint()?).ok()?,
            3 => loop {
                let (inner, inner_wire) = self.key()?;
                if inner_wire == 4 {
                    if inner != number {
                        return None;
                    }
                    break 0;
                }
                self.skip(inner, inner_wire, depth - 1)?;
            },
            5 => 4,
            _ => return None, // an end of group that opened nothing
        };
        self.bytes = self.bytes.get(len..)?;
        Some(())
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for (i, byte) in self.bytes.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                // A tenth byte may only hold the top bit of a u64.
                if i == 9 && *byte > 1 {
                    return None;
                }
                self.bytes = &self.bytes[i + 1..];
                return Some(value);
            }
        }
        None
    }
}

/// Checks a decoded batch and encodes its `AdmitBatchResponse`; a batch of more than
/// `max_batch` documents is only counted. With `max_response_bytes`, the largest
/// reports are cut so that the response fits (`report::fit`).
pub fn answer(
    validator: &Validator,
    batch: &Batch<'_>,
    admission: &AdmissionContext,
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
    let results = responses(
        &mut outcome,
        validator,
        batch,
        admission,
        threads,
        max_response_bytes,
        false,
    );
    outcome.response = Some(AdmitBatchResponse { results }.encode_to_vec());
    outcome
}

/// Checks the document of an encoded `AdmitRequest` decoded by `decode` and encodes
/// its `AdmitResponse`: an `AdmitRequest` reads as a batch (its `document` is field 1,
/// `dry_run` field 2), but protobuf merges a `document` given twice where a batch
/// holds two, so only a request holding exactly one is answered here; `None` leaves
/// any other to the general path. With `unlocated`, the report carries no lines and
/// columns: the document is the JSON form of a typed message, not text anyone wrote.
pub fn answer_one(
    validator: &Validator,
    batch: &Batch<'_>,
    admission: &AdmissionContext,
    max_response_bytes: Option<usize>,
    unlocated: bool,
) -> Option<BatchOutcome> {
    if batch.len() != 1 {
        return None;
    }
    let mut outcome = BatchOutcome {
        documents: 1,
        ..Default::default()
    };
    let results = responses(
        &mut outcome,
        validator,
        batch,
        admission,
        None,
        max_response_bytes,
        unlocated,
    );
    outcome.response = results.first().map(Message::encode_to_vec);
    Some(outcome)
}

/// Each document's `AdmitResponse`, in order, counted into `outcome`.
fn responses(
    outcome: &mut BatchOutcome,
    validator: &Validator,
    batch: &Batch<'_>,
    admission: &AdmissionContext,
    threads: Option<usize>,
    max_response_bytes: Option<usize>,
    unlocated: bool,
) -> Vec<AdmitResponse> {
    let mut reports = if admission.quotas.is_some() {
        in_item_order(validator, &batch.items, admission)
    } else {
        validator.check_each(&batch.items, threads, admission, |(raw, kind)| (raw, *kind))
    };
    if unlocated {
        reports.iter_mut().for_each(Report::unlocate);
    }
    if let Some(budget) = max_response_bytes {
        crate::report::fit(&mut reports, budget);
    }
    reports
        .iter()
        .map(|report| {
            count(outcome, report);
            AdmitResponse {
                report: Some(message(report)),
                job_id: String::new(),
            }
        })
        .collect()
}

/// The reports of a batch judged under project quotas, as a real batch answers: one item
/// after another, each against the usage plus the GPUs of the earlier items that passed
/// (a JobSpec charged to its project, a spec-bundle to the account's home).
fn in_item_order(
    validator: &Validator,
    items: &[(&[u8], Option<Kind>)],
    admission: &AdmissionContext,
) -> Vec<Report> {
    let mut admission = admission.clone();
    items
        .iter()
        .map(|(raw, kind)| {
            let report = validator.check(raw, *kind, &admission);
            if report.ok() {
                let charge = charged(validator, raw, *kind, admission.home.as_deref());
                if let (Some((project, gpus)), Some(table)) = (charge, admission.quotas.as_mut()) {
                    let held = table.in_use.entry(project).or_default();
                    *held = held.saturating_add(gpus);
                }
            }
            report
        })
        .collect()
}

/// The project a document is charged to and the GPUs it asks for: a JobSpec's own
/// project, a spec-bundle's account `home`; `None` for a kind that launches nothing
/// (or a document that cannot be read).
pub fn charged(
    validator: &Validator,
    raw: &[u8],
    kind: Option<Kind>,
    home: Option<&str>,
) -> Option<(String, u64)> {
    validator
        .facts(raw, kind, None)
        .and_then(|(f, _)| match f.kind.map(Kind::charge) {
            Some(Charge::OwnProject { .. }) => Some((f.project, f.gpus)),
            Some(Charge::AccountHome { .. }) => Some((home.unwrap_or_default().to_owned(), f.gpus)),
            Some(Charge::Nothing) | None => None,
        })
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
                severity_code: severity_code(v.severity),
                default_severity_code: v.default.map_or(0, severity_code),
            })
            .collect(),
        verdict_code: verdict_code(report),
        kind_code: report.kind.map_or(0, |k| k.info().proto),
    }
}

/// prost's reading of an `AdmitBatchRequest`: the reference `decode` is held to, by
/// this module's tests and by the `batch_wire` fuzz target (feature `reference`).
#[cfg(any(test, feature = "reference"))]
#[doc(hidden)]
pub mod reference {
    use prost::Message;

    use crate::kind::Kind;

    /// `jobgate.v1.AdmitBatchRequest`, as prost reads it.
    #[derive(Clone, PartialEq, Message)]
    pub struct AdmitBatchRequest {
        #[prost(message, repeated, tag = "1")]
        pub documents: Vec<Document>,
        #[prost(bool, tag = "2")]
        pub dry_run: bool,
    }

    /// `jobgate.v1.Document`, the typed bodies kept as their encoded bytes.
    #[derive(Clone, PartialEq, Message)]
    pub struct Document {
        #[prost(oneof = "Body", tags = "1, 2, 3, 7, 8")]
        pub body: Option<Body>,
        #[prost(int32, tag = "4")]
        pub kind: i32,
        #[prost(bytes, tag = "5")]
        pub package: Vec<u8>,
        #[prost(string, tag = "6")]
        pub idempotency_key: String,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Body {
        #[prost(bytes, tag = "1")]
        Raw(Vec<u8>),
        #[prost(bytes, tag = "2")]
        JobSpec(Vec<u8>),
        #[prost(bytes, tag = "3")]
        SpecBundle(Vec<u8>),
        #[prost(bytes, tag = "7")]
        JobRecord(Vec<u8>),
        #[prost(bytes, tag = "8")]
        BestRec(Vec<u8>),
    }

    /// What `decode` must find in `request`: prost's reading of it, kept when it is a
    /// dry run of raw documents without packages.
    pub fn by_prost(request: &[u8]) -> Option<Vec<(Vec<u8>, Option<Kind>)>> {
        let request = AdmitBatchRequest::decode(request).ok()?;
        if !request.dry_run {
            return None;
        }
        request
            .documents
            .into_iter()
            .map(|document| match document.body {
                Some(Body::Raw(raw)) if document.package.is_empty() => {
                    Some((raw, Kind::of_proto(document.kind)))
                }
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::reference::{by_prost, AdmitBatchRequest, Body, Document};
    use super::*;

    fn decoded(request: &[u8]) -> Option<Vec<(Vec<u8>, Option<Kind>)>> {
        decode(request).map(|b| {
            b.documents()
                .map(|(raw, kind)| (raw.to_vec(), kind))
                .collect()
        })
    }

    /// A small deterministic generator (xorshift), for the mutations below.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// Encoded field keys and values that requests rarely hold: unknown fields of
    /// every wire type, groups, repeated and conflicting members, bad UTF-8, long and
    /// overlong varints, field number 0, negative kinds.
    const ODD: &[&[u8]] = &[
        b"\x08\x01",                                                     // field 1 as a varint
        b"\x10\x00",                                                     // dry_run false
        b"\x10\x02",                                                     // dry_run true, not 1
        b"\x18\x05",                                                     // unknown varint field 3
        b"\x21\x00\x00\x00\x00\x00\x00\x00\x00",                         // unknown fixed64
        b"\x2d\x00\x00\x00\x00",                                         // unknown fixed32
        b"\x3a\x02hi",                                                   // unknown bytes field 7
        b"\x43\x44",                          // a group, opened and closed
        b"\x43\x4b\x08\x01\x4c\x44",          // a group within a group
        b"\x43\x4c",                          // a group closed as another
        b"\x44",                              // a group closed, never opened
        b"\x00\x00",                          // field number 0
        b"\x0e",                              // wire type 6
        b"\xf8\xff\xff\xff\x0f\x01",          // the largest field number
        b"\xf8\xff\xff\xff\x1f\x01",          // a key beyond 32 bits
        b"\x0a\x00",                          // an empty document
        b"\x0a\x02\x0a\x00",                  // a document with an empty raw body
        b"\x0a\x04\x0a\x00\x12\x00",          // raw, then typed
        b"\x0a\x04\x12\x00\x0a\x00",          // typed, then raw
        b"\x0a\x04\x0a\x00\x3a\x00",          // raw, then a typed job_record
        b"\x0a\x04\x0a\x00\x42\x00",          // raw, then a typed best_rec
        b"\x0a\x04\x42\x00\x0a\x00",          // a typed best_rec, then raw
        b"\x0a\x04\x0a\x00\x38\x01",          // field 7 as a varint
        b"\x0a\x04\x0a\x00\x2a\x00",          // an empty package
        b"\x0a\x04\x0a\x00\x2a\x01P",         // no, a package
        b"\x0a\x06\x0a\x00\x2a\x01P\x2a\x00", // a package, then an empty one
        b"\x0a\x04\x0a\x00\x32\x01\xff",      // a key that is not UTF-8
        b"\x0a\x05\x0a\x00\x32\x02\xc3\xa9",  // a key that is
        b"\x0a\x0d\x0a\x00\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", // kind -1
        b"\x0a\x08\x0a\x00\x20\x82\x80\x80\x80\x10", // kind 2 beyond 32 bits
        b"\x0a\x04\x0a\x00\x22\x00",          // kind as bytes
        b"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", // the longest varint
        b"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", // one too long
        b"\x10\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", // eleven bytes
    ];

    #[test]
    fn decode_reads_what_prost_reads() {
        let valid = request(
            vec![
                raw(b"{\"a\": 1}", 0),
                raw(b"[]", 1),
                raw(b"", 4),
                raw(b"x", 9),
            ],
            true,
        );
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut tried = 0;
        let mut answered = 0;
        for round in 0..20_000 {
            let mut bytes = valid.clone();
            for _ in 0..=rng.below(3) {
                match rng.below(5) {
                    0 => {
                        let at = rng.below(bytes.len() + 1);
                        bytes.splice(at..at, ODD[rng.below(ODD.len())].iter().copied());
                    }
                    1 => bytes.extend_from_slice(ODD[rng.below(ODD.len())]),
                    2 if !bytes.is_empty() => {
                        let at = rng.below(bytes.len());
                        bytes[at] ^= 1 << rng.below(8);
                    }
                    3 => bytes.truncate(rng.below(bytes.len() + 1)),
                    _ => {
                        let at = rng.below(bytes.len() + 1);
                        bytes.insert(at, rng.next() as u8);
                    }
                }
            }
            let want = by_prost(&bytes);
            assert_eq!(decoded(&bytes), want, "round {round}: {bytes:?}");
            tried += 1;
            answered += usize::from(want.is_some());
        }
        // Both sides of the line were tried, many times.
        assert!(
            answered > tried / 20 && answered < tried * 19 / 20,
            "{answered} of {tried}"
        );
        // Groups nested about as deep as prost reads them, in the request and in a document.
        for depth in 95..105 {
            let groups = [vec![0x43; depth], vec![0x44; depth]].concat();
            let mut bytes = valid.clone();
            bytes.extend_from_slice(&groups);
            assert_eq!(decoded(&bytes), by_prost(&bytes), "{depth} groups deep");
            let mut document = vec![0x0a, 0x00];
            document.extend_from_slice(&groups);
            let mut bytes = valid.clone();
            bytes.push(0x0a);
            bytes.push(document.len() as u8);
            bytes.extend_from_slice(&document);
            assert_eq!(
                decoded(&bytes),
                by_prost(&bytes),
                "{depth} groups deep in a document"
            );
        }
        for odd in ODD {
            let mut bytes = valid.clone();
            bytes.extend_from_slice(odd);
            assert_eq!(decoded(&bytes), by_prost(&bytes), "{odd:?}");
            assert_eq!(decoded(odd), by_prost(odd), "{odd:?}");
        }
    }

    #[test]
    fn documents_are_read_in_place() {
        let req = request(vec![raw(b"{}", 0), raw(b"[1]", 2)], true);
        let batch = decode(&req).unwrap();
        let span = req.as_ptr_range();
        for (raw, _) in &batch.items {
            assert!(span.contains(&raw.as_ptr()), "a slice of the request");
        }
        assert_eq!(batch.items[1], (&b"[1]"[..], Some(Kind::SpecBundle)));
    }

    fn check_batch_request(
        validator: &Validator,
        request: &[u8],
        admission: &AdmissionContext,
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
        let out = check_batch_request(&v, &req, &AdmissionContext::default(), 10, Some(1)).unwrap();
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
        let a = AdmissionContext::default();
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
        for body in [Body::JobRecord(Vec::new()), Body::BestRec(Vec::new())] {
            let typed = Document {
                body: Some(body),
                ..raw(b"{}", 0)
            };
            assert!(check_batch_request(&v, &request(vec![typed], true), &a, 10, None).is_none());
        }
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
    fn an_admit_request_of_one_document_is_answered_as_the_batch_of_it_is() {
        let v = Validator::default();
        let a = AdmissionContext::default();
        let one = request(vec![raw(b"[]", 1)], true);
        let batch = check_batch_request(&v, &one, &a, 10, None).unwrap();
        let single = answer_one(&v, &decode(&one).unwrap(), &a, None, false).unwrap();
        let results = AdmitBatchResponse::decode(batch.response.unwrap().as_slice())
            .unwrap()
            .results;
        assert_eq!(single.response, Some(results[0].encode_to_vec()));
        assert_eq!(
            (single.documents, single.verdicts, single.rules),
            (1, batch.verdicts, batch.rules)
        );
        // A document given twice is merged by protobuf into one: not this path's.
        let twice = request(vec![raw(b"[]", 1), raw(b"[]", 1)], true);
        assert!(answer_one(&v, &decode(&twice).unwrap(), &a, None, false).is_none());
        let none = request(vec![], true);
        assert!(answer_one(&v, &decode(&none).unwrap(), &a, None, false).is_none());
    }

    #[test]
    fn an_oversized_batch_is_counted_not_checked() {
        let v = Validator::default();
        let req = request(vec![raw(b"{}", 0); 5], true);
        let out = check_batch_request(&v, &req, &AdmissionContext::default(), 4, None).unwrap();
        assert_eq!((out.documents, out.response), (5, None));
    }
}
