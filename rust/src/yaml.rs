//! YAML documents, turned into JSON text so that one parser and one walker serve both.
//!
//! Scalars are resolved with the YAML 1.2 core schema. Duplicate keys are kept (the
//! JSON walker reports them with their pointer), aliases are expanded within a size
//! budget (a "billion laughs" document is refused, not inflated), and nesting is
//! bounded while events stream in, so no input can exhaust the stack or memory.

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use std::collections::HashMap;

use crate::document::{DecodeError, Limits};

struct Frame {
    is_map: bool,
    count: usize,
    expecting_key: bool,
    anchor: usize,
    start: usize,
}

pub fn to_json(text: &str, limits: &Limits) -> Result<Vec<u8>, DecodeError> {
    let budget = limits.max_bytes.saturating_mul(4).max(64 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(text.len() + 16);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut documents = 0usize;
    let mut parser = Parser::new_from_str(text);

    while let Some(event) = parser.next_event() {
        let (event, _span) = event.map_err(|e| {
            // The YAML scanner bounds flow nesting itself; that is a depth limit too.
            if e.to_string().contains("recursion limit") {
                DecodeError::Depth(limits.max_depth)
            } else {
                DecodeError::Syntax(format!("not valid YAML: {e}"))
            }
        })?;
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(DecodeError::Syntax(
                        "the YAML stream holds more than one document; send one document per check"
                            .into(),
                    ));
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                let start = out.len();
                if begin(&mut stack, &mut out)? {
                    serde_json::to_writer(&mut out, value.as_ref()).map_err(internal)?;
                    out.push(b':');
                } else {
                    write_scalar(&mut out, value.as_ref(), style, tag.as_deref())?;
                    end_value(&mut stack);
                }
                if anchor != 0 {
                    anchors.insert(anchor, (start, out.len()));
                }
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let is_map = matches!(event, Event::MappingStart(..));
                if begin(&mut stack, &mut out)? {
                    return Err(DecodeError::Syntax(
                        "a YAML mapping key must be a scalar, not a collection".into(),
                    ));
                }
                if stack.len() >= limits.max_depth {
                    return Err(DecodeError::Depth(limits.max_depth));
                }
                stack.push(Frame {
                    is_map,
                    count: 0,
                    expecting_key: true,
                    anchor,
                    start: out.len(),
                });
                out.push(if is_map { b'{' } else { b'[' });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let frame = stack
                    .pop()
                    .ok_or_else(|| DecodeError::Syntax("unbalanced YAML collection".into()))?;
                out.push(if frame.is_map { b'}' } else { b']' });
                if frame.anchor != 0 {
                    anchors.insert(frame.anchor, (frame.start, out.len()));
                }
                end_value(&mut stack);
            }
            Event::Alias(id) => {
                let (start, end) = *anchors.get(&id).ok_or_else(|| {
                    DecodeError::Syntax(
                        "a YAML alias refers to an anchor that is not complete yet".into(),
                    )
                })?;
                if begin(&mut stack, &mut out)? {
                    return Err(DecodeError::Syntax(
                        "a YAML alias cannot be a mapping key".into(),
                    ));
                }
                if out.len() + (end - start) > budget {
                    return Err(DecodeError::Size(format!(
                        "YAML aliases expand the document past {budget} bytes"
                    )));
                }
                out.extend_from_within(start..end);
                end_value(&mut stack);
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
        if out.len() > budget {
            return Err(DecodeError::Size(format!(
                "the YAML document expands past {budget} bytes"
            )));
        }
    }
    if documents == 0 || out.is_empty() {
        return Err(DecodeError::Syntax("the document is empty".into()));
    }
    Ok(out)
}

fn internal(e: serde_json::Error) -> DecodeError {
    DecodeError::Syntax(format!("could not re-encode YAML: {e}"))
}

/// Writes the separator before the next key or value; `true` when a key comes next.
fn begin(stack: &mut [Frame], out: &mut Vec<u8>) -> Result<bool, DecodeError> {
    let Some(frame) = stack.last_mut() else {
        return Ok(false);
    };
    if frame.is_map {
        if frame.expecting_key {
            if frame.count > 0 {
                out.push(b',');
            }
            frame.expecting_key = false;
            return Ok(true);
        }
        Ok(false)
    } else {
        if frame.count > 0 {
            out.push(b',');
        }
        Ok(false)
    }
}

fn end_value(stack: &mut [Frame]) {
    if let Some(frame) = stack.last_mut() {
        frame.count += 1;
        if frame.is_map {
            frame.expecting_key = true;
        }
    }
}

fn write_scalar(
    out: &mut Vec<u8>,
    value: &str,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<(), DecodeError> {
    let text = value;
    if let Some(tag) = tag {
        let core = if tag.is_yaml_core_schema() {
            tag.suffix.as_str()
        } else {
            ""
        };
        return match core {
            "str" => write_str(out, text),
            "null" => {
                out.extend_from_slice(b"null");
                Ok(())
            }
            "bool" | "int" | "float" => match resolve_plain(text) {
                Some(Plain::Bool(b)) if core == "bool" => write_plain(out, Plain::Bool(b)),
                Some(Plain::Int(i)) if core == "int" => write_plain(out, Plain::Int(i)),
                Some(p @ (Plain::Int(_) | Plain::Float(_))) if core == "float" => {
                    write_plain(out, p)
                }
                _ => Err(DecodeError::Syntax(format!(
                    "the YAML scalar {text:?} is not a valid !!{core}"
                ))),
            },
            _ => Err(DecodeError::Syntax(format!(
                "the YAML tag {tag} is not supported; use plain JSON values"
            ))),
        };
    }
    if style != ScalarStyle::Plain {
        return write_str(out, text);
    }
    match resolve_plain(text) {
        Some(plain) => write_plain(out, plain),
        None => write_str(out, text),
    }
}

fn write_str(out: &mut Vec<u8>, text: &str) -> Result<(), DecodeError> {
    serde_json::to_writer(out, text).map_err(internal)
}

enum Plain {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
}

fn write_plain(out: &mut Vec<u8>, plain: Plain) -> Result<(), DecodeError> {
    match plain {
        Plain::Null => out.extend_from_slice(b"null"),
        Plain::Bool(true) => out.extend_from_slice(b"true"),
        Plain::Bool(false) => out.extend_from_slice(b"false"),
        Plain::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Plain::Float(f) => {
            let n = serde_json::Number::from_f64(f).ok_or_else(|| {
                DecodeError::Syntax(format!("{f} is not a finite number; JSON has none"))
            })?;
            out.extend_from_slice(n.to_string().as_bytes());
        }
    }
    Ok(())
}

/// YAML 1.2 core schema resolution of a plain scalar; `None` means a string.
fn resolve_plain(text: &str) -> Option<Plain> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Plain::Null),
        "true" | "True" | "TRUE" => return Some(Plain::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Plain::Bool(false)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Some(Plain::Float(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => return Some(Plain::Float(f64::NEG_INFINITY)),
        ".nan" | ".NaN" | ".NAN" => return Some(Plain::Float(f64::NAN)),
        _ => {}
    }
    let bytes = text.as_bytes();
    if let Some(hex) = text.strip_prefix("0x") {
        return i128::from_str_radix(hex, 16).ok().map(Plain::Int);
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return i128::from_str_radix(oct, 8).ok().map(Plain::Int);
    }
    let digits = bytes
        .strip_prefix(b"-")
        .or_else(|| bytes.strip_prefix(b"+"))
        .unwrap_or(bytes);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        return match text.parse::<i128>() {
            Ok(i) => Some(Plain::Int(i)),
            Err(_) => text.parse::<f64>().ok().map(Plain::Float),
        };
    }
    if is_core_float(digits) {
        return text.parse::<f64>().ok().map(Plain::Float);
    }
    None
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, sign already stripped.
fn is_core_float(b: &[u8]) -> bool {
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(text: &str) -> Result<String, DecodeError> {
        to_json(text, &Limits::default()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn resolves_core_schema_scalars() {
        let json = conv("a: 1\nb: 2.5\nc: true\nd: ~\ne: '1'\nf: hello\ng: [x, 0x10]\n").unwrap();
        assert_eq!(
            json,
            r#"{"a":1,"b":2.5,"c":true,"d":null,"e":"1","f":"hello","g":["x",16]}"#
        );
    }

    #[test]
    fn keeps_duplicate_keys_for_the_walker() {
        assert_eq!(conv("a: 1\na: 2\n").unwrap(), r#"{"a":1,"a":2}"#);
    }

    #[test]
    fn expands_aliases_within_budget() {
        assert_eq!(
            conv("a: &x [1, 2]\nb: *x\n").unwrap(),
            r#"{"a":[1,2],"b":[1,2]}"#
        );
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        assert!(matches!(conv(&bomb), Err(DecodeError::Size(_))));
    }

    #[test]
    fn bounds_depth_without_recursion() {
        let deep = "[".repeat(100_000);
        assert!(matches!(conv(&deep), Err(DecodeError::Depth(_))));
    }

    #[test]
    fn refuses_several_documents_and_collection_keys() {
        assert!(matches!(
            conv("a: 1\n---\nb: 2\n"),
            Err(DecodeError::Syntax(_))
        ));
        assert!(matches!(conv("? [a]\n: 1\n"), Err(DecodeError::Syntax(_))));
        assert!(matches!(conv("a: .nan\n"), Err(DecodeError::Syntax(_))));
    }
}
