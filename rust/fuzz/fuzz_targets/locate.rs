//! Line/column location (`locate`) of JSON Pointers in JSON and YAML text.
//!
//! Must hold for any text and pointers: no panic; one location per pointer, each
//! inside the text. For JSON that serde_json reads (no repeated keys): every pointer
//! into the document is placed exactly where its value starts (the JSON there reads
//! as the value the pointer names), and a key pointer exactly at its key's string;
//! one pass serves many pointers as it serves each alone.
#![no_main]

use jobgate_core::locate::{locate, Location, Target};
use jobgate_fuzz::Json;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    if out.len() >= 48 {
        return;
    }
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                pointers(
                    child,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// The byte offset of a 1-based line and column (columns count characters).
fn offset(text: &[u8], at: Location) -> Option<usize> {
    let (mut line, mut column) = (1u32, 1u32);
    for (i, &b) in text.iter().enumerate() {
        if line == at.line && column == at.column && b & 0xC0 != 0x80 {
            return Some(i);
        }
        if b == b'\n' {
            line += 1;
            column = 1;
        } else if b & 0xC0 != 0x80 {
            column += 1;
        }
    }
    (line == at.line && column == at.column).then_some(text.len())
}

fuzz_target!(|data: &[u8]| {
    // The first bytes name pointers to place beside the document's own ones.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let mut cut = rest.splitn(usize::from(n % 4) + 1, |b| *b == 0);
    let extra: Vec<String> = (0..n % 4)
        .filter_map(|_| cut.next())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let source = cut.next().unwrap_or_default();
    let text = source.strip_prefix(b"\xef\xbb\xbf").unwrap_or(source);

    let document = serde_json::from_slice::<Value>(text).ok();
    let mut targets: Vec<String> = extra.clone();
    if let Some(doc) = &document {
        pointers(doc, String::new(), &mut targets);
    }
    let asked: Vec<Target<'_>> = targets
        .iter()
        .flat_map(|p| {
            [
                Target {
                    pointer: p,
                    key: false,
                },
                Target {
                    pointer: p,
                    key: true,
                },
            ]
        })
        .collect();
    let places = locate(source, &asked);
    assert_eq!(places.len(), asked.len(), "one location per pointer");
    // Lines end at `\n`, `\r\n` and a lone `\r` (YAML's line breaks): at most this many.
    let lines = 1 + text.iter().filter(|b| matches!(b, b'\n' | b'\r')).count() as u32;
    for (t, at) in asked.iter().zip(&places) {
        assert!(
            at.line >= 1 && at.line <= lines.max(1) && at.column >= 1,
            "{:?} placed at {at:?}, outside the text",
            t.pointer
        );
    }
    // Each alone where it was among all.
    for (t, at) in asked.iter().zip(&places).step_by(7) {
        assert_eq!(
            locate(source, &[*t]),
            vec![*at],
            "{:?} placed elsewhere alone",
            t.pointer
        );
    }

    let Some(doc) = document else { return };
    if !doc.is_object() && !doc.is_array() {
        return;
    }
    // A repeated key: serde_json keeps the last, `locate` the first it meets.
    let repeats = jobgate_core::document::with_document(text, &jobgate_fuzz::limits(), |d| {
        Json::of_tape(d.root).repeats_a_key()
    })
    .unwrap_or(true);
    if repeats {
        return;
    }
    for (t, at) in asked.iter().zip(&places).skip(2 * extra.len()) {
        let i = offset(text, *at).unwrap_or_else(|| {
            panic!(
                "{:?} placed at {at:?}, not a character of the text",
                t.pointer
            )
        });
        let mut reader = serde_json::Deserializer::from_slice(&text[i..]).into_iter::<Value>();
        let found = reader.next().and_then(Result::ok);
        let member_of_object = t
            .pointer
            .rsplit_once('/')
            .is_some_and(|(parent, _)| doc.pointer(parent).is_some_and(Value::is_object));
        if t.key && member_of_object {
            let key = t
                .pointer
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .replace("~1", "/")
                .replace("~0", "~");
            assert_eq!(
                found,
                Some(Value::String(key.clone())),
                "the key of {:?} placed at {at:?}, not at {key:?}",
                t.pointer
            );
        } else {
            assert_eq!(
                found.as_ref(),
                doc.pointer(t.pointer),
                "{:?} placed at {at:?}, where another value starts",
                t.pointer
            );
        }
    }
});
