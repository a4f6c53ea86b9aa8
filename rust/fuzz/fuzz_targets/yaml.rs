//! The YAML layer (`yaml`, through `document::reading`) against the consumer, PyYAML's
//! `yaml.safe_load`, run in-process on the same bytes.
//!
//! Must hold for any input that `document` reads as YAML (first non-blank byte not `{`),
//! SPEC §1: jobgate's value equals what `safe_load` builds, or jobgate refuses. Also:
//! - no panic, and the engine's per-input time and memory limits (aliases expand within
//!   the budget: the JSON jobgate writes is at most 4 times the size limit);
//! - what jobgate writes is JSON that its own JSON path reads;
//! - a document whose mappings repeat a key is refused (`json.duplicate_key`), so it is
//!   not compared;
//! - every comment `yaml::comments` finds (what suppressions read) is a `#` outside
//!   every token PyYAML's scanner reads from the same text.
#![no_main]

use jobgate_core::collect::Ctx;
use jobgate_core::document::{duplicate_keys, reading, with_document};
use jobgate_core::yaml::comments;
use jobgate_fuzz::{limits, python};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: python::init(), |data: &[u8]| check(data));

fn check(data: &[u8]) {
    let limits = limits();
    let text = data.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(data);
    if text.iter().copied().find(|b| !b.is_ascii_whitespace()) == Some(b'{') {
        return; // read as JSON: the json target's business
    }
    let Ok(json) = reading(data, &limits) else {
        return; // refused: always allowed
    };
    assert!(
        json.len() <= limits.max_bytes.saturating_mul(4).max(64 * 1024) + limits.max_bytes,
        "aliases expanded past the budget: {} bytes of JSON",
        json.len()
    );
    let repeats = with_document(&json, &limits, |doc| {
        let mut dups = Ctx::new();
        duplicate_keys(doc, &mut dups);
        !dups.out.into_report(None).violations.is_empty()
    })
    .unwrap_or_else(|v| {
        panic!(
            "jobgate's own JSON of the YAML does not read: {}",
            v.message
        )
    });
    if repeats {
        return; // json.duplicate_key refuses it in every check
    }
    let theirs = match python::ask("safe_load", data, &[]) {
        Ok(t) => t,
        Err(e) => panic!(
            "jobgate reads {:?} as {}; safe_load refuses it: {e}",
            String::from_utf8_lossy(data),
            String::from_utf8_lossy(&json)
        ),
    };
    let mine = python::ask("json_typed", &json, &[]).expect("jobgate's JSON reads in Python");
    assert_eq!(
        mine,
        theirs,
        "jobgate reads {:?} as {}; safe_load builds another value",
        String::from_utf8_lossy(data),
        String::from_utf8_lossy(&json)
    );
    comments_outside_tokens(text);
}

/// The comments jobgate finds in a text PyYAML reads lie outside PyYAML's tokens.
fn comments_outside_tokens(text: &[u8]) {
    let Ok(t) = std::str::from_utf8(text) else {
        return;
    };
    if t.contains(['\r', '\u{85}', '\u{2028}', '\u{2029}']) {
        return; // other line breaks: lines are counted by `\n` alone below
    }
    let found = comments(t);
    if found.is_empty() {
        return;
    }
    let spans: Vec<(usize, usize)> = serde_json::from_str(
        &python::ask("token_spans", text, &[]).expect("PyYAML scans what it loads"),
    )
    .expect("the oracle answers JSON");
    let chars: Vec<char> = t.chars().collect();
    let mut line_starts = vec![0usize];
    line_starts.extend(
        chars
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == '\n')
            .map(|(i, _)| i + 1),
    );
    for c in found {
        let at = line_starts[c.line as usize - 1] + c.column as usize - 1;
        assert_eq!(
            chars.get(at),
            Some(&'#'),
            "comment {c:?} of {t:?} is not at a #"
        );
        assert!(
            !spans.iter().any(|&(s, e)| s <= at && at < e),
            "comment {c:?} of {t:?} lies inside a token PyYAML reads ({spans:?})"
        );
    }
}
