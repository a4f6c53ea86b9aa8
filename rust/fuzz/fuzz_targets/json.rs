//! The one-pass JSON reader (`tape`) and the JSON path of `document`, against
//! serde_json and simd-json on the same bytes.
//!
//! Must hold for any input that `document` reads as JSON (first non-blank byte `{`):
//! - whatever `tape` vouches for, simd-json reads to the same tape;
//! - jobgate reads it (`with_document`) exactly when serde_json does, except where
//!   jobgate is stricter on purpose: a top level that is not an object, nesting past
//!   `limits.max_depth`, a leading UTF-8 byte order mark (jobgate reads past it,
//!   serde_json refuses it);
//! - what jobgate reads is serde_json's value, number kinds included (`1` an integer,
//!   `1.0` a float), when no object repeats a key;
//! - `json.duplicate_key` is reported exactly when some object repeats a key: jobgate
//!   refuses what serde_json reads as "the last one wins" (docs/strictness.md).
#![no_main]

use jobgate_core::collect::Ctx;
use jobgate_core::document::{duplicate_keys, with_document};
use jobgate_core::tape;
use jobgate_core::tape::reference::{show, simd_tape};
use jobgate_fuzz::{limits, Json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = limits();
    let text = data.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(data);
    if text.iter().copied().find(|b| !b.is_ascii_whitespace()) != Some(b'{') {
        return; // read as YAML: the yaml targets' business
    }

    // tape vs simd-json, tape for tape.
    let mut scratch = tape::Scratch::default();
    let mut nodes = Vec::new();
    if let Some(repeats) = tape::read(text, limits.max_depth, &mut nodes, &mut scratch) {
        if tape::attach(&mut nodes, &scratch).is_some() {
            let mine: Vec<String> = nodes.iter().map(show).collect();
            assert_eq!(
                Some(&mine),
                simd_tape(text, limits.max_depth).as_ref(),
                "tape vouches for a document simd-json reads otherwise"
            );
            if !repeats {
                // `false` lets the duplicate-key scan be skipped: no object may repeat a key.
                let read = Json::of_tape(jobgate_core::node::Value::root(&nodes));
                assert!(!read.repeats_a_key(), "tape says no key repeats; one does");
            }
        }
    }

    // jobgate vs serde_json.
    let jobgate = with_document(data, &limits, |doc| {
        let mut dups = Ctx::new();
        duplicate_keys(doc, &mut dups);
        (
            Json::of_tape(doc.root),
            dups.out.into_report(None).violations.len(),
        )
    });
    let serde = serde_json::from_slice::<serde_json::Value>(text);
    match (jobgate, serde) {
        (Ok((mine, dups)), Ok(theirs)) => {
            let repeats = mine.repeats_a_key();
            assert_eq!(
                dups > 0,
                repeats,
                "json.duplicate_key reported {dups} times; the document repeats a key: {repeats}"
            );
            // Order aside (serde_json sorts keys), and of repeated keys the last, which
            // jobgate never reads: it refuses the document.
            let (mine, theirs) = (mine.as_maps(), Json::of_serde(&theirs));
            assert!(
                mine.same_as_serde(&theirs),
                "jobgate reads another value than serde_json:\n{mine:?}\n{theirs:?}"
            );
        }
        (Ok((mine, _)), Err(e)) => panic!("jobgate reads {mine:?}; serde_json refuses it: {e}"),
        (Err(v), Ok(theirs)) => {
            let value = Json::of_serde(&theirs);
            let deliberate = !theirs.is_object() || value.depth() > limits.max_depth;
            assert!(
                deliberate,
                "jobgate refuses ({}: {}) what serde_json reads as {value:?}",
                v.rule.id(),
                v.message
            );
        }
        (Err(_), Err(_)) => {}
    }
});
