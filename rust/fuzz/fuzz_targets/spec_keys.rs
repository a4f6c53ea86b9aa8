//! Spec-key parsing (`kinds::spec_bundle::patterns::parse_spec_key`) and JSON Pointer
//! rendering (`pointer`), against independent readings of their grammars.
//!
//! Must hold: a string is a spec key exactly when the documented grammar matches it,
//! `name([digits])*` joined by `.`, where a name holds no `.`, `[`, `]` or character
//! Python's `str.isspace` takes for a space (the regex below, with Python's list of
//! spaces written out); its steps are the names and indexes the grammar splits it into
//! (an index too large for usize stays past any array's end). A pointer rendered from
//! any keys and indexes reads back (RFC 6901) to the same segments, and serde_json's
//! `Value::pointer` finds the value at that path.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Arbitrary;
use jobgate_core::kinds::spec_bundle::patterns::{parse_spec_key, Step};
use jobgate_core::pointer::{self, Segment};
use libfuzzer_sys::fuzz_target;
use regex::Regex;
use serde_json::{json, Value};

/// Python's `str.isspace` characters, as `\s` matches them in a `str` pattern.
const SPACE: &str = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}";

static GRAMMAR: LazyLock<Regex> = LazyLock::new(|| {
    let name = format!(r"[^.\[\]{SPACE}]+");
    Regex::new(&format!(
        r"\A{name}(?:\[[0-9]+\])*(?:\.{name}(?:\[[0-9]+\])*)*\z"
    ))
    .unwrap()
});
static STEPS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"([^.\[\]]+)|\[([0-9]+)\]").unwrap());

#[derive(Arbitrary, Debug)]
enum Seg {
    Key(String),
    Index(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    key: String,
    path: Vec<Seg>,
}

fuzz_target!(|input: Input| {
    let s = input.key.as_str();
    let parsed = parse_spec_key(s);
    assert_eq!(
        parsed.is_some(),
        GRAMMAR.is_match(s),
        "spec key {s:?}: jobgate says {}",
        parsed.is_some()
    );
    if let Some(steps) = parsed {
        let mine: Vec<Step<'_>> = steps.collect();
        let theirs: Vec<Step<'_>> = STEPS
            .captures_iter(s)
            .map(|c| match (c.get(1), c.get(2)) {
                (Some(name), _) => Step::Key(name.as_str()),
                (_, Some(digits)) => Step::Index(digits.as_str().parse().unwrap_or(usize::MAX)),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(mine, theirs, "the steps of {s:?}");
    }

    let segments: Vec<Segment<'_>> = input
        .path
        .iter()
        .take(32)
        .map(|seg| match seg {
            Seg::Key(k) => Segment::Key(k),
            Seg::Index(i) => Segment::Index(usize::from(*i)),
        })
        .collect();
    let rendered = pointer::render(&segments);
    let tokens: Vec<String> = if rendered.is_empty() {
        Vec::new()
    } else {
        assert!(rendered.starts_with('/'), "{rendered:?} is not a pointer");
        rendered[1..]
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    let expected: Vec<String> = segments
        .iter()
        .map(|s| match s {
            Segment::Key(k) => k.to_string(),
            Segment::Index(i) => i.to_string(),
            Segment::Keys(_) => unreachable!("the input makes single keys and indexes"),
        })
        .collect();
    assert_eq!(
        tokens, expected,
        "{rendered:?} reads back to other segments"
    );
    // serde_json finds the leaf at the rendered pointer.
    let mut doc = json!("leaf");
    for s in segments.iter().rev() {
        doc = match s {
            Segment::Key(k) => {
                let mut m = serde_json::Map::new();
                m.insert(k.to_string(), doc);
                Value::Object(m)
            }
            Segment::Index(i) if *i < 64 => {
                let mut a = vec![Value::Null; *i];
                a.push(doc);
                Value::Array(a)
            }
            Segment::Index(_) => return,
            Segment::Keys(_) => unreachable!("the input makes single keys and indexes"),
        };
    }
    assert_eq!(
        doc.pointer(&rendered),
        Some(&json!("leaf")),
        "serde_json does not find {rendered:?}"
    );
    if let Some(Segment::Key(k)) = segments.last() {
        let mut path = pointer::Path::new();
        for s in &segments[..segments.len() - 1] {
            path.push(*s);
        }
        assert_eq!(
            pointer::child(&path, Segment::Key(k)),
            rendered,
            "pointer::child and render differ"
        );
    }
});
