//! Turning input bytes into a parsed document, or into the violation that says why
//! it cannot be read (`json.syntax`, `limits.size`, `limits.depth`, worded in
//! `refusal`); and `json.duplicate_key`, the one rule every kind shares.
//!
//! JSON is read onto simd-json's tape by the one-pass reader of `tape`, and by
//! simd-json itself when that reader does not vouch for a document (simd-json's
//! answer is then the reference, and its errors word `json.syntax`); YAML is first
//! re-encoded as JSON text (see `yaml`). Neither parser recurses past a fixed bound
//! (`tape` hands deeper documents to simd-json, which does not recurse), and the
//! depth limit is enforced while parsing, so the walkers that do recurse (the
//! duplicate-key scan here, the rules of `kinds`) never go deeper than the limit.

use simd_json::{Buffers, ErrorType, Tape};

use crate::collect::Ctx;
use crate::limits::Limits;
use crate::node::Value;
use crate::pointer::Child;
use crate::refusal::{self, DecodeError};
use crate::report::Violation;
use crate::rules::Rule;
use crate::tape;

/// Parses `input` (JSON or YAML, UTF-8) and hands the root value, which is always an
/// object, to `f`. Any failure is returned as the violation that describes it.
pub fn with_document<R>(
    input: &[u8],
    limits: &Limits,
    f: impl FnOnce(Parsed<'_, '_>) -> R,
) -> Result<R, Violation> {
    if input.len() > limits.max_bytes {
        return Err(refusal::too_large(
            Some(input.len() as u64),
            limits.max_bytes as u64,
        ));
    }
    let text = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let first = text.iter().copied().find(|b| !b.is_ascii_whitespace());
    // A document that opens with `{` is JSON: falling back to YAML flow style would
    // quietly accept broken JSON (`{"a": }` is valid YAML).
    if first == Some(b'{') {
        return parse_json(text, limits, f).map_err(DecodeError::into_violation);
    }
    yaml_then_json(text, limits, f).map_err(DecodeError::into_violation)
}

/// The JSON text the rules see for `input`: the input itself for JSON, the
/// re-encoding for YAML; or the violation that refuses it. For tools and the
/// differential tests that compare jobgate's reading with a consumer's.
pub fn reading(input: &[u8], limits: &Limits) -> Result<Vec<u8>, Violation> {
    let text = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    if input.len() > limits.max_bytes
        || text.iter().copied().find(|b| !b.is_ascii_whitespace()) == Some(b'{')
    {
        // JSON (or too large): read as `with_document` reads it, and given back as it is.
        with_document(input, limits, |_| ())?;
        return Ok(text.to_vec());
    }
    // YAML: re-encoded once, and that JSON read as every check reads it.
    let json = yaml_as_json(text, limits).map_err(DecodeError::into_violation)?;
    parse_json(&json, limits, |_| ()).map_err(DecodeError::into_violation)?;
    Ok(json)
}

fn yaml_then_json<R>(
    text: &[u8],
    limits: &Limits,
    f: impl FnOnce(Parsed<'_, '_>) -> R,
) -> Result<R, DecodeError> {
    parse_json(&yaml_as_json(text, limits)?, limits, f)
}

/// A YAML document re-encoded as the JSON text the walkers read.
fn yaml_as_json(text: &[u8], limits: &Limits) -> Result<Vec<u8>, DecodeError> {
    let text = std::str::from_utf8(text).map_err(|e| {
        DecodeError::Syntax(format!(
            "the document is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(DecodeError::Syntax("the document is empty".into()));
    }
    crate::yaml::to_json(text, limits)
}

/// Parse scratch space kept per thread, so the hot path allocates nothing.
struct Scratch {
    input: Vec<u8>,
    buffers: Buffers,
    depth: usize,
    tape: Tape<'static>,
    reader: tape::Scratch,
}

thread_local! {
    // Boxed, so taking it out and putting it back moves a pointer, not the buffers.
    static SCRATCH: std::cell::RefCell<Option<Box<Scratch>>> = const { std::cell::RefCell::new(None) };
}

/// A parsed document: its root object, and whether some object may repeat a key (when
/// not, `duplicate_keys` has nothing to look for).
#[derive(Clone, Copy)]
pub struct Parsed<'t, 'i> {
    pub root: Value<'t, 'i>,
    keys_may_repeat: bool,
}

fn parse_json<R>(
    text: &[u8],
    limits: &Limits,
    f: impl FnOnce(Parsed<'_, '_>) -> R,
) -> Result<R, DecodeError> {
    // One look-up of the thread's scratch for the whole parse (each costs a call in a
    // shared library). The scratch is taken out while `f` runs, so a parse inside `f`
    // finds none and makes its own.
    SCRATCH.with(|cell| {
        let cached = cell
            .borrow_mut()
            .take()
            .filter(|s| s.depth == limits.max_depth);
        let mut scratch = cached.unwrap_or_else(|| {
            Box::new(Scratch {
                input: Vec::new(),
                buffers: Buffers::with_max_depth(text.len(), limits.max_depth),
                depth: limits.max_depth,
                tape: Tape::null(),
                reader: tape::Scratch::default(),
            })
        });
        let result = parse_with(text, limits, &mut scratch, f);
        // Very large documents do not pin their buffers to the thread.
        if scratch.input.capacity() <= 4 * 1024 * 1024 && scratch.tape.0.capacity() <= 1024 * 1024 {
            *cell.borrow_mut() = Some(scratch);
        }
        result
    })
}

/// `parse_json` with the thread's scratch in hand; the tape goes back to it, empty.
fn parse_with<R>(
    text: &[u8],
    limits: &Limits,
    scratch: &mut Scratch,
    f: impl FnOnce(Parsed<'_, '_>) -> R,
) -> Result<R, DecodeError> {
    let len = text.len();
    let Scratch {
        input,
        buffers,
        tape,
        reader,
        ..
    } = scratch;
    let mut tape: Tape<'_> = std::mem::replace(tape, Tape::null());
    // The one-pass reader first; simd-json reads what it does not vouch for (and says
    // why a document cannot be read).
    let fast = tape::read(text, limits.max_depth, &mut tape.0, reader)
        .filter(|_| tape::attach(&mut tape.0, reader).is_some());
    let result = if let Some(keys_may_repeat) = fast {
        Ok(f(Parsed {
            root: Value::root(&tape.0),
            keys_may_repeat,
        }))
    } else {
        input.clear();
        input.extend_from_slice(text);
        input.resize(len + simd_json::INPUT_PADDING, 0);
        match simd_json::fill_tape_padded(input, len, buffers, &mut tape) {
            Err(e) => Err(match e.error() {
                ErrorType::DepthLimitExceeded => DecodeError::Depth(limits.max_depth),
                ErrorType::InvalidUtf8 => {
                    DecodeError::Syntax("the document is not valid UTF-8".into())
                }
                _ => DecodeError::Syntax(format!(
                    "not valid JSON: {}",
                    describe_json_error(&e, text)
                )),
            }),
            Ok(()) => {
                let root = Value::root(&tape.0);
                if root.is_object() {
                    Ok(f(Parsed {
                        root,
                        keys_may_repeat: may_repeat_keys(root),
                    }))
                } else {
                    Err(DecodeError::Syntax(format!(
                        "the top level must be an object, got {}",
                        root.describe()
                    )))
                }
            }
        }
    };
    scratch.tape = tape.reset();
    result
}

/// Why `text` is not JSON, in words a person can act on: serde_json's account of the
/// first error (`trailing characters at line 1 column 8`) and the text there. Only a
/// refused document pays for this second reading, which builds nothing; simd-json's error kind is the
/// fallback should serde_json read the text after all.
fn describe_json_error(e: &simd_json::Error, text: &[u8]) -> String {
    let near = |at: usize| {
        let at = at.min(text.len());
        let mut end = (at + 20).min(text.len());
        while end < text.len() && text[end] & 0xC0 == 0x80 {
            end += 1; // not inside a character
        }
        String::from_utf8_lossy(&text[at..end]).into_owned()
    };
    let Err(why) = serde_json::from_slice::<serde::de::IgnoredAny>(text) else {
        let at = e.index();
        return match near(at) {
            n if n.is_empty() => format!("{:?} at the end of the document", e.error()),
            n => format!("{:?} at byte {at}, near {n:?}", e.error()),
        };
    };
    if why.is_eof() {
        return format!("{why}: the document ends before it is complete");
    }
    let (mut at, mut column) = (byte_offset(text, why.line(), why.column()), why.column());
    if at > 0 && text.get(at - 1) == Some(&b'-') {
        // serde_json stops after the sign of `-Infinity`.
        (at, column) = (at - 1, column - 1);
    }
    let near = near(at);
    let not_a_number = ["NaN", "Infinity", "-Infinity"]
        .into_iter()
        .find(|word| near.starts_with(word));
    match not_a_number {
        Some(word) => format!(
            "{word} at line {} column {column} is not a JSON number; write null or a string instead",
            why.line(),
        ),
        None => format!("{why}, near {near:?}"),
    }
}

/// The byte offset of serde_json's 1-based `line` and `column` (the column counts
/// bytes and points at the byte where reading stopped).
fn byte_offset(text: &[u8], line: usize, column: usize) -> usize {
    let start = text
        .split_inclusive(|&b| b == b'\n')
        .take(line.saturating_sub(1))
        .map(<[u8]>::len)
        .sum::<usize>();
    start + column.saturating_sub(1)
}

/// Every key that an object repeats, as `json.duplicate_key` at the repeated key.
/// Reported through `ctx`, whose walk starts at the root and is back there after.
pub fn duplicate_keys<'i>(doc: Parsed<'_, 'i>, ctx: &mut Ctx<'i>) {
    if !doc.keys_may_repeat {
        return;
    }
    let mut fingerprints = Vec::with_capacity(64);
    scan_duplicates(doc.root, &mut fingerprints, ctx);
}

/// Whether any object of the document has two keys with the same fingerprint, for a
/// document simd-json read (the one-pass reader answers this while reading): one pass
/// over the tape with no path kept. Only when it says yes does the scan that builds
/// pointers run.
fn may_repeat_keys(root: Value<'_, '_>) -> bool {
    let mut fps: Vec<u64> = Vec::new();
    root.objects().any(|object| {
        fps.clear();
        fps.extend(object.entries().map(|(k, _)| fingerprint(k)));
        tape::repeats(&mut fps)
    })
}

#[inline]
fn fingerprint(key: &str) -> u64 {
    tape::fingerprint(key.as_bytes())
}

/// `fingerprints` is one stack shared by every level: each object pushes its keys'
/// fingerprints and truncates them away when done, so the scan allocates nothing.
fn scan_duplicates<'t, 'i>(v: Value<'t, 'i>, fingerprints: &mut Vec<u64>, ctx: &mut Ctx<'i>) {
    match v.ty() {
        crate::node::Type::Object(n) => {
            let base = fingerprints.len();
            fingerprints.extend(v.entries().map(|(k, _)| fingerprint(k)));
            let fps = &mut fingerprints[base..];
            // Few keys: compare in place. Many: sort the fingerprints, so an object of a
            // million keys costs n log n. Keys are compared only when fingerprints collide.
            let collides = if n <= 16 {
                (1..n).any(|i| fps[..i].contains(&fps[i]))
            } else {
                fps.sort_unstable();
                fps.windows(2).any(|w| w[0] == w[1])
            };
            fingerprints.truncate(base);
            if collides {
                let keys: Vec<&str> = v.entries().map(|(k, _)| k).collect();
                let mut sorted = keys.clone();
                sorted.sort_unstable();
                for w in sorted.windows(2).filter(|w| w[0] == w[1]) {
                    ctx.report(Rule::JsonDuplicateKey, Child(w[1]), || {
                        format!(
                            "the key {} appears more than once in this object; a validator and a consumer could read different values, so keep one",
                            crate::node::quote(w[1])
                        )
                    });
                }
            }
            for (key, value) in v.entries() {
                if matches!(
                    value.ty(),
                    crate::node::Type::Object(_) | crate::node::Type::Array(_)
                ) {
                    ctx.within(key, |ctx| scan_duplicates(value, fingerprints, ctx));
                }
            }
        }
        crate::node::Type::Array(_) => {
            for (i, item) in v.items().enumerate() {
                if matches!(
                    item.ty(),
                    crate::node::Type::Object(_) | crate::node::Type::Array(_)
                ) {
                    ctx.within(i, |ctx| scan_duplicates(item, fingerprints, ctx));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::limits::DEFAULT_MAX_BYTES;

    fn rule_of(input: &[u8]) -> Option<Rule> {
        with_document(input, &Limits::default(), |_| ())
            .err()
            .map(|v| v.rule)
    }

    /// The thread's scratch is out while a document is read: a document read inside
    /// the reading of another gets its own, and neither tape disturbs the other, for
    /// plain, escaped, simd-json-read (the long float) and YAML inner documents, at
    /// the same depth limit or another.
    #[test]
    fn a_document_read_inside_another_keeps_its_own_scratch() {
        let limits = Limits::default();
        let deeper = Limits {
            max_depth: limits.max_depth + 1,
            ..limits
        };
        for inner in [
            &b"{\"b\": [2, 3]}"[..],
            b"{\"b\": \"\\u0041\"}",
            b"{\"b\": 1.7976931348623157}",
            b"b: 2\n",
        ] {
            for inner_limits in [&limits, &deeper] {
                let (outer, got) = with_document(b"{\"a\": 1}", &limits, |d| {
                    let got = with_document(inner, inner_limits, |d| {
                        d.root
                            .entries()
                            .map(|(k, _)| k.to_string())
                            .collect::<Vec<_>>()
                    });
                    let outer: Vec<String> = d.root.entries().map(|(k, _)| k.to_string()).collect();
                    (outer, got)
                })
                .unwrap();
                assert_eq!(outer, ["a"]);
                assert_eq!(got.unwrap(), ["b"]);
            }
        }
        // And the scratch still serves the next document.
        assert_eq!(rule_of(b"{\"a\": 1}"), None);
    }

    #[test]
    fn classifies_unreadable_input() {
        assert_eq!(rule_of(b"{\"a\": }"), Some(Rule::JsonSyntax));
        assert_eq!(rule_of(b"[1, 2]"), Some(Rule::JsonSyntax));
        assert_eq!(rule_of(b"\"x\""), Some(Rule::JsonSyntax));
        assert_eq!(rule_of(b""), Some(Rule::JsonSyntax));
        assert_eq!(rule_of(b"{\"a\": \"\xff\"}"), Some(Rule::JsonSyntax));
        assert_eq!(rule_of(b"a: \xff\n"), Some(Rule::JsonSyntax));
        assert_eq!(rule_of(b"{\"a\": 1}"), None);
        assert_eq!(rule_of(b"\xEF\xBB\xBF{\"a\": 1}"), None);
        assert_eq!(rule_of(b"a: 1\nb: [x]\n"), None);
    }

    #[test]
    fn limits_depth_without_overflowing() {
        let deep = format!("{}{}", "{\"a\":".repeat(100_000), "1");
        assert_eq!(rule_of(deep.as_bytes()), Some(Rule::LimitsDepth));
        let ok = format!("{}1{}", "{\"a\":".repeat(64), "}".repeat(64));
        assert_eq!(rule_of(ok.as_bytes()), None);
        let over = format!("{}1{}", "{\"a\":".repeat(65), "}".repeat(65));
        assert_eq!(rule_of(over.as_bytes()), Some(Rule::LimitsDepth));
    }

    #[test]
    fn limits_size_before_parsing() {
        let big = vec![b' '; DEFAULT_MAX_BYTES + 1];
        assert_eq!(rule_of(&big), Some(Rule::LimitsSize));
    }

    #[test]
    fn finds_duplicate_keys_at_any_depth() {
        let fields = with_document(
            br#"{"a": {"b": 1, "b": 2}, "c": [{"d": 1, "d": 1}]}"#,
            &Limits::default(),
            |doc| {
                let mut ctx = Ctx::new();
                duplicate_keys(doc, &mut ctx);
                ctx.out
                    .kept
                    .into_iter()
                    .map(|v| v.field)
                    .collect::<Vec<_>>()
            },
        )
        .unwrap();
        assert_eq!(fields, ["/a/b", "/c/0/d"]);
    }
}
