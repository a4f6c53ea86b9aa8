//! Structure-aware documents of every kind (`shapes`): a valid JobSpec, spec-bundle,
//! job-record or best_rec, edited field by field with values the rules look at, so the
//! fuzzer reaches the rules and not only the parser.
//!
//! Must hold: the same value written as JSON and as YAML gets the same report (kind,
//! rules, fields, severities and messages; only source locations differ); the YAML is
//! read as the value it was written from; a check gives the same report twice, through
//! `check` and `check_many` alike; and every violation is located inside its source.
#![no_main]

use jobgate_core::admission::AdmissionContext;
use jobgate_core::document::reading;
use jobgate_core::report::Report;
use jobgate_core::Validator;
use jobgate_fuzz::shapes::{to_json, to_yaml, Shaped};
use jobgate_fuzz::{limits, summary, Json};
use libfuzzer_sys::fuzz_target;

fn located_inside(r: &Report, source: &[u8]) {
    let lines = source.split(|b| *b == b'\n').count() as u32;
    for v in &r.violations {
        if let Some(at) = v.at {
            assert!(
                at.line >= 1 && at.line <= lines.max(1) && at.column >= 1,
                "{} at {:?} is outside its source ({lines} lines)",
                v.field,
                at
            );
        }
    }
}

fuzz_target!(|shaped: Shaped| {
    let (_, doc) = shaped.document();
    let json = to_json(&doc);
    let yaml = to_yaml(&doc);
    let validator = Validator::default();
    let admission = AdmissionContext::default();

    // The YAML means the value it was written from.
    let read = reading(yaml.as_bytes(), &limits()).unwrap_or_else(|v| {
        panic!(
            "the YAML of a JSON value is refused ({}): {}\n{yaml}",
            v.rule.id(),
            v.message
        )
    });
    let read: serde_json::Value = serde_json::from_slice(&read).expect("jobgate writes JSON");
    assert_eq!(
        Json::of_serde(&read),
        Json::of_serde(&doc),
        "the YAML reads as another value:\n{yaml}"
    );

    let from_json = validator.check(json.as_bytes(), None, &admission);
    let from_yaml = validator.check(yaml.as_bytes(), None, &admission);
    assert_eq!(
        summary(&from_json),
        summary(&from_yaml),
        "JSON and YAML of one value get different reports:\n{json}\n{yaml}"
    );
    located_inside(&from_json, json.as_bytes());
    located_inside(&from_yaml, yaml.as_bytes());

    let again = validator.check_many(&[json.as_bytes()], None, Some(1), &admission);
    assert_eq!(
        summary(&from_json),
        summary(&again[0]),
        "check and check_many differ"
    );
});
