//! What a YAML 1.1 reader — PyYAML's `safe_load`, the reader the platform's Python
//! tools use — makes of a plain scalar. jobgate reads the YAML 1.2 core schema; where
//! the two readings of a scalar differ (`yes`, `010`, `1_000`, `1:20`, `1e3`,
//! `2001-12-14`, `<<`, ...), the document is refused rather than read one way and run
//! the other.
//!
//! This mirrors PyYAML's implicit resolvers (`yaml/resolver.py`) and the constructors
//! of `SafeConstructor` pattern for pattern; it must not judge anything else.

/// A plain scalar as PyYAML resolves and constructs it.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    Str,
    Null,
    Bool(bool),
    /// `None` when the integer does not fit in an i128 (Python's are unbounded).
    Int(Option<i128>),
    /// `None` when PyYAML's constructor would fail on the text.
    Float(Option<f64>),
    /// A date or datetime object.
    Timestamp,
    /// The merge key `<<`.
    Merge,
    /// `=`, the "value" key, which `safe_load` cannot construct.
    Value,
}

impl Reading {
    /// How a message names this reading.
    pub fn describe(&self) -> String {
        match self {
            Reading::Str => "a string".into(),
            Reading::Null => "null".into(),
            Reading::Bool(b) => format!("the boolean {b}"),
            Reading::Int(Some(i)) => format!("the integer {i}"),
            Reading::Int(None) => "an integer".into(),
            Reading::Float(Some(f)) => format!("the number {f}"),
            Reading::Float(None) => "a malformed float".into(),
            Reading::Timestamp => "a date".into(),
            Reading::Merge => "a merge key".into(),
            Reading::Value => "a value key that safe_load cannot build".into(),
        }
    }
}

/// PyYAML's reading of the plain scalar `text`.
pub fn resolve(text: &str) -> Reading {
    let b = text.as_bytes();
    // PyYAML picks its resolvers by the first character, in the order it added them.
    match b.first() {
        None => return Reading::Null,
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O') => {
            if let Some(v) = boolean(text) {
                return Reading::Bool(v);
            }
            if matches!(text, "null" | "Null" | "NULL") {
                return Reading::Null;
            }
            return Reading::Str;
        }
        Some(b'~') if text == "~" => return Reading::Null,
        Some(b'<') if text == "<<" => return Reading::Merge,
        Some(b'=') if text == "=" => return Reading::Value,
        Some(b'-' | b'+' | b'.' | b'0'..=b'9') => {}
        _ => return Reading::Str,
    }
    if is_float(b) {
        return Reading::Float(construct_float(text));
    }
    if is_int(b) {
        return Reading::Int(construct_int(text));
    }
    if b[0].is_ascii_digit() && is_timestamp(b) {
        return Reading::Timestamp;
    }
    Reading::Str
}

fn boolean(text: &str) -> Option<bool> {
    match text {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// A small cursor over the scalar's bytes, for the resolver patterns below.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn sign(&mut self) {
        let _ = self.eat(b'-') || self.eat(b'+');
    }
    /// Consumes bytes while `f` holds; returns how many.
    fn many(&mut self, f: impl Fn(u8) -> bool) -> usize {
        let start = self.i;
        while self.b.get(self.i).is_some_and(|&c| f(c)) {
            self.i += 1;
        }
        self.i - start
    }
    fn digit(&mut self) -> bool {
        if self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn done(&self) -> bool {
        self.i == self.b.len()
    }
}

fn digit_or_underscore(c: u8) -> bool {
    c.is_ascii_digit() || c == b'_'
}

/// `(?::[0-5]?[0-9])+`: the base-60 part of `1:20` and `1:20:30.5`.
fn sexagesimal(s: &mut Scan<'_>) -> bool {
    let mut any = false;
    loop {
        let save = s.i;
        if !s.eat(b':') {
            break;
        }
        let first = s.b.get(s.i).copied();
        let second = s.b.get(s.i + 1).copied();
        match (first, second) {
            (Some(b'0'..=b'5'), Some(b'0'..=b'9')) => s.i += 2,
            (Some(b'0'..=b'9'), _) => s.i += 1,
            _ => {
                s.i = save;
                break;
            }
        }
        any = true;
    }
    any
}

/// `(?:[eE][-+][0-9]+)?` — PyYAML's exponent needs its sign.
fn exponent(s: &mut Scan<'_>) -> bool {
    let save = s.i;
    if s.eat(b'e') || s.eat(b'E') {
        if (s.eat(b'-') || s.eat(b'+')) && s.many(|c| c.is_ascii_digit()) > 0 {
            return true;
        }
        s.i = save;
        return false;
    }
    true
}

fn is_float(b: &[u8]) -> bool {
    let alternatives: [fn(&mut Scan<'_>) -> bool; 5] = [
        // [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |s| {
            s.sign();
            s.digit()
                && {
                    s.many(digit_or_underscore);
                    s.eat(b'.')
                }
                && {
                    s.many(digit_or_underscore);
                    exponent(s)
                }
        },
        // \.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |s| {
            s.eat(b'.') && s.digit() && {
                s.many(digit_or_underscore);
                exponent(s)
            }
        },
        // [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
        |s| {
            s.sign();
            s.digit()
                && {
                    s.many(digit_or_underscore);
                    sexagesimal(s)
                }
                && s.eat(b'.')
                && {
                    s.many(digit_or_underscore);
                    true
                }
        },
        // [-+]?\.(?:inf|Inf|INF)
        |s| {
            s.sign();
            let rest = &s.b[s.i..];
            matches!(rest, b".inf" | b".Inf" | b".INF") && {
                s.i = s.b.len();
                true
            }
        },
        // \.(?:nan|NaN|NAN)
        |s| {
            matches!(s.b, b".nan" | b".NaN" | b".NAN") && {
                s.i = s.b.len();
                true
            }
        },
    ];
    alternatives.iter().any(|alt| {
        let mut s = Scan { b, i: 0 };
        alt(&mut s) && s.done()
    })
}

fn is_int(b: &[u8]) -> bool {
    let alternatives: [fn(&mut Scan<'_>) -> bool; 5] = [
        // [-+]?0b[0-1_]+
        |s| {
            s.sign();
            s.eat(b'0') && s.eat(b'b') && s.many(|c| matches!(c, b'0' | b'1' | b'_')) > 0
        },
        // [-+]?0[0-7_]+
        |s| {
            s.sign();
            s.eat(b'0') && s.many(|c| matches!(c, b'0'..=b'7' | b'_')) > 0
        },
        // [-+]?(?:0|[1-9][0-9_]*)
        |s| {
            s.sign();
            if s.eat(b'0') {
                return true;
            }
            matches!(s.b.get(s.i), Some(b'1'..=b'9')) && {
                s.i += 1;
                s.many(digit_or_underscore);
                true
            }
        },
        // [-+]?0x[0-9a-fA-F_]+
        |s| {
            s.sign();
            s.eat(b'0') && s.eat(b'x') && s.many(|c| c.is_ascii_hexdigit() || c == b'_') > 0
        },
        // [-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+
        |s| {
            s.sign();
            matches!(s.b.get(s.i), Some(b'1'..=b'9')) && {
                s.i += 1;
                s.many(digit_or_underscore);
                sexagesimal(s)
            }
        },
    ];
    alternatives.iter().any(|alt| {
        let mut s = Scan { b, i: 0 };
        alt(&mut s) && s.done()
    })
}

/// `[0-9]{4}-[0-9]{2}-[0-9]{2}`, or a datetime `YYYY-M-D(T| )h:mm:ss(.f)?( ?(Z|±h(:mm)?))?`.
fn is_timestamp(b: &[u8]) -> bool {
    let mut s = Scan { b, i: 0 };
    let n = |s: &mut Scan<'_>, k: usize| (0..k).all(|_| s.digit());
    let one_or_two = |s: &mut Scan<'_>| {
        let got = s.digit();
        s.digit();
        got
    };
    if !n(&mut s, 4) || !s.eat(b'-') {
        return false;
    }
    let date_only = {
        let mut d = Scan { b, i: s.i };
        n(&mut d, 2) && d.eat(b'-') && n(&mut d, 2) && d.done()
    };
    if date_only {
        return true;
    }
    if !(one_or_two(&mut s) && s.eat(b'-') && one_or_two(&mut s)) {
        return false;
    }
    if !(s.eat(b'T') || s.eat(b't') || s.many(|c| c == b' ' || c == b'\t') > 0) {
        return false;
    }
    if !(one_or_two(&mut s) && s.eat(b':') && n(&mut s, 2) && s.eat(b':') && n(&mut s, 2)) {
        return false;
    }
    if s.eat(b'.') {
        s.many(|c| c.is_ascii_digit());
    }
    if s.done() {
        return true;
    }
    s.many(|c| c == b' ' || c == b'\t');
    if s.eat(b'Z') {
        return s.done();
    }
    if !(s.eat(b'-') || s.eat(b'+')) || !one_or_two(&mut s) {
        return false;
    }
    if s.eat(b':') && !n(&mut s, 2) {
        return false;
    }
    s.done()
}

/// `SafeConstructor.construct_yaml_int`.
fn construct_int(text: &str) -> Option<i128> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (sign, digits) = match cleaned.as_bytes().first() {
        Some(b'-') => (-1, &cleaned[1..]),
        Some(b'+') => (1, &cleaned[1..]),
        _ => (1, cleaned.as_str()),
    };
    let magnitude = if digits == "0" {
        0
    } else if let Some(bin) = digits.strip_prefix("0b") {
        i128::from_str_radix(bin, 2).ok()?
    } else if let Some(hex) = digits.strip_prefix("0x") {
        i128::from_str_radix(hex, 16).ok()?
    } else if digits.starts_with('0') {
        i128::from_str_radix(digits, 8).ok()?
    } else if digits.contains(':') {
        base60(digits)?
    } else {
        digits.parse::<i128>().ok()?
    };
    magnitude.checked_mul(sign)
}

fn base60(digits: &str) -> Option<i128> {
    digits.split(':').try_fold(0i128, |acc, part| {
        acc.checked_mul(60)?.checked_add(part.parse::<i128>().ok()?)
    })
}

/// `SafeConstructor.construct_yaml_float`.
fn construct_float(text: &str) -> Option<f64> {
    let cleaned: String = text
        .chars()
        .filter(|&c| c != '_')
        .collect::<String>()
        .to_ascii_lowercase();
    let (sign, digits) = match cleaned.as_bytes().first() {
        Some(b'-') => (-1.0, &cleaned[1..]),
        Some(b'+') => (1.0, &cleaned[1..]),
        _ => (1.0, cleaned.as_str()),
    };
    if digits == ".inf" {
        return Some(sign * f64::INFINITY);
    }
    if digits == ".nan" {
        return Some(f64::NAN);
    }
    if digits.contains(':') {
        let mut value = 0.0f64;
        for part in digits.split(':') {
            value = value * 60.0 + part.parse::<f64>().ok()?;
        }
        return Some(sign * value);
    }
    // Python's float() takes "1.", ".5" and "1.5e+3" alike.
    let normalized = if digits.ends_with('.') {
        format!("{digits}0")
    } else {
        digits.to_string()
    };
    normalized.parse::<f64>().ok().map(|f| sign * f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_pyyaml() {
        let cases: &[(&str, Reading)] = &[
            ("yes", Reading::Bool(true)),
            ("Off", Reading::Bool(false)),
            ("y", Reading::Str),
            ("~", Reading::Null),
            ("", Reading::Null),
            ("010", Reading::Int(Some(8))),
            ("0b11", Reading::Int(Some(3))),
            ("-0x1f", Reading::Int(Some(-31))),
            ("1_000", Reading::Int(Some(1000))),
            ("1:20", Reading::Int(Some(80))),
            ("12:30:00", Reading::Int(Some(45000))),
            ("0", Reading::Int(Some(0))),
            ("1e3", Reading::Str),
            ("1.5e3", Reading::Str),
            ("1.5e+3", Reading::Float(Some(1500.0))),
            ("1.", Reading::Float(Some(1.0))),
            (".5", Reading::Float(Some(0.5))),
            ("-.5", Reading::Str),
            ("._5", Reading::Str),
            ("0o10", Reading::Str),
            ("1:20.5", Reading::Float(Some(80.5))),
            ("2001-12-14", Reading::Timestamp),
            ("2001-12-14t21:59:43.10-05:00", Reading::Timestamp),
            ("2001-12-14 21:59:43.10 -5", Reading::Timestamp),
            ("2001-12-14X", Reading::Str),
            ("<<", Reading::Merge),
            ("=", Reading::Value),
            ("hello", Reading::Str),
            ("-", Reading::Str),
            ("+1", Reading::Int(Some(1))),
        ];
        for (text, want) in cases {
            assert_eq!(&resolve(text), want, "{text:?}");
        }
    }
}
