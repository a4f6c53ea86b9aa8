//! The full check path of each kind on raw bytes: the first byte picks the kind (or
//! detection), the rest is the document, JSON or YAML.
//!
//! Must hold: no panic, within the engine's time and memory limits; a report whatever
//! the bytes (a refusal is a violation, never an error); `check`, `judge` and
//! `check_many` give the same report; every field is a JSON Pointer and every location
//! lies inside the source; the report's JSON form is built.
#![no_main]

use jobgate_core::admission::AdmissionContext;
use jobgate_core::{Kind, Validator};
use jobgate_fuzz::summary;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let kind = match pick % 5 {
        0 => None,
        i => Some(Kind::ALL[usize::from(i) - 1]),
    };
    let validator = Validator::default();
    let admission = AdmissionContext::default();
    let report = validator.check(input, kind, &admission);
    assert!(
        !report.violations.is_empty() || report.kind.is_some(),
        "a report of no kind with no violation"
    );
    let lines = input.split(|b| *b == b'\n').count() as u32;
    for v in &report.violations {
        assert!(
            v.field.is_empty() || v.field.starts_with('/'),
            "field {:?} is not a JSON Pointer",
            v.field
        );
        assert!(
            !v.message.is_empty(),
            "{} at {:?} has no message",
            v.rule.id(),
            v.field
        );
        if let Some(at) = v.at {
            // A lone `\r` ends a line for some readers: count lines generously.
            let crs = input.iter().filter(|b| **b == b'\r').count() as u32;
            assert!(
                at.line >= 1 && at.line <= lines + crs && at.column >= 1,
                "{} located at {at:?}, outside its source",
                v.field
            );
        }
    }
    let _ = report.to_json_value();
    let judged = validator.judge(input, kind, &admission, Some("fuzz-owner"));
    assert_eq!(
        summary(&report),
        summary(&judged.report),
        "check and judge differ"
    );
    let many = validator.check_many(&[input], kind, Some(1), &admission);
    assert_eq!(
        summary(&report),
        summary(&many[0]),
        "check and check_many differ"
    );
});
