//! The one-pass JSON reader: writes the same tape simd-json writes (`Node`s, strings
//! borrowed from the input), validating as it scans, and tells whether any object may
//! repeat a key, so the duplicate-key scan of `document` runs only when one might.
//!
//! Why not simd-json alone: for the documents a gate sees (a few KB), simd-json's two
//! stages (a structural index, then the tape) and a separate duplicate-key pass cost
//! more than the rules themselves. This reader makes one pass, with SSE2 only where it
//! pays (the inside of strings).
//!
//! It reads the common subset of JSON exactly and gives up (`None`) on anything else:
//! syntax errors, control characters, lone surrogates, numbers outside the exact fast
//! path, nesting past the limit (or past `MAX_RECURSION`), invalid UTF-8. The caller then reads the document
//! with simd-json, whose answer (its tape, or its error and the message made from it)
//! is the reference; `tests` compare the two tapes on every document they can find.

// The crate denies `unsafe` (lib.rs); this module needs it for the SSE2 string scan
// and one slice whose UTF-8 is already checked.
#![allow(unsafe_code)]

use simd_json::{Node, StaticNode};

/// The scratch a read reuses: key fingerprints and decoded strings.
#[derive(Default)]
pub struct Scratch {
    fingerprints: Vec<u64>,
    /// Escaped strings, decoded: (tape index, start, end) in `decoded`.
    escaped: Vec<(usize, usize, usize)>,
    decoded: Vec<u8>,
}

/// Reads `text` (a JSON document whose top level is an object) onto `tape`. `Some`
/// holds whether some object may repeat a key (fingerprints collide); `None` means
/// this reader does not vouch for the document and simd-json must read it.
///
/// Escaped strings are decoded into `scratch`; `attach` then points the tape at them,
/// so `scratch` outlives the tape.
pub fn read<'i>(
    text: &'i [u8],
    max_depth: usize,
    tape: &mut Vec<Node<'i>>,
    scratch: &mut Scratch,
) -> Option<bool> {
    tape.clear();
    scratch.fingerprints.clear();
    scratch.escaped.clear();
    scratch.decoded.clear();
    // Valid UTF-8 as a whole (checked once, quickly for ASCII), every string between
    // two ASCII quotes is too: strings are cut from `text` without decoding them again.
    let text = simdutf8::basic::from_utf8(text).ok()?;
    let mut r = Reader {
        b: text.as_bytes(),
        i: 0,
        repeats: false,
        max_depth: max_depth.min(MAX_RECURSION),
    };
    r.skip_ws();
    if r.b.get(r.i) != Some(&b'{') {
        return None;
    }
    r.object(1, tape, scratch)?;
    r.skip_ws();
    // Nothing may follow the top-level object.
    (r.i == r.b.len()).then_some(r.repeats)
}

/// Points the tape's escaped strings at their decoded text, once reading is done;
/// `None` when a decoded string is not valid UTF-8 (its plain runs were not checked).
pub fn attach<'i>(tape: &mut [Node<'i>], scratch: &'i Scratch) -> Option<()> {
    for &(at, start, end) in &scratch.escaped {
        tape[at] = Node::String(std::str::from_utf8(&scratch.decoded[start..end]).ok()?);
    }
    Some(())
}

struct Reader<'i> {
    /// The input, valid UTF-8.
    b: &'i [u8],
    i: usize,
    repeats: bool,
    max_depth: usize,
}

/// The reader recurses once per level of nesting (about 200 bytes of stack a level in
/// a release build, kilobytes in a debug one); a document nested deeper than this is
/// read by simd-json, which does not recurse, whatever depth the limit allows.
const MAX_RECURSION: usize = 128;

impl<'i> Reader<'i> {
    #[inline(always)]
    fn skip_ws(&mut self) {
        // Most gaps are empty or one space.
        match self.b.get(self.i) {
            Some(b' ') => {
                self.i += 1;
                if self.b.get(self.i).is_some_and(|&c| c > b' ') {
                    return;
                }
            }
            Some(&c) if c > b' ' => return,
            _ => {}
        }
        while let Some(&c) = self.b.get(self.i) {
            if c == b' ' || c == b'\n' || c == b'\r' || c == b'\t' {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    /// A value starting at the current byte, onto the tape. `depth` counts the
    /// containers around it; the caller bounds it, so recursion stays shallow.
    #[inline(always)]
    fn value(&mut self, depth: usize, tape: &mut Vec<Node<'i>>, s: &mut Scratch) -> Option<()> {
        match *self.b.get(self.i)? {
            b'"' => {
                let text = self.string(tape.len(), s)?;
                tape.push(Node::String(text));
            }
            b'{' => self.object(depth + 1, tape, s)?,
            b'[' => self.array(depth + 1, tape, s)?,
            b't' => {
                self.literal(b"true")?;
                tape.push(Node::Static(StaticNode::Bool(true)));
            }
            b'f' => {
                self.literal(b"false")?;
                tape.push(Node::Static(StaticNode::Bool(false)));
            }
            b'n' => {
                self.literal(b"null")?;
                tape.push(Node::Static(StaticNode::Null));
            }
            b'-' | b'0'..=b'9' => {
                let n = self.number()?;
                tape.push(Node::Static(n));
            }
            _ => return None,
        }
        Some(())
    }

    /// Opens a container at its `{` or `[`: its node (filled in when it closes), and
    /// the reader past the bracket; `None` past the depth limit.
    #[inline(always)]
    fn open(&mut self, depth: usize, tape: &mut Vec<Node<'i>>) -> Option<usize> {
        if depth > self.max_depth {
            return None;
        }
        tape.push(Node::Static(StaticNode::Null));
        self.i += 1;
        self.skip_ws();
        Some(tape.len() - 1)
    }

    /// After a member: `Some(true)` past a `,` (another member follows), `Some(false)`
    /// past the closing `close`, `None` at anything else.
    #[inline(always)]
    fn more(&mut self, close: u8) -> Option<bool> {
        // The comma mostly follows the member directly: it is looked for first.
        let mut c = *self.b.get(self.i)?;
        if c == b',' {
            self.i += 1;
            self.skip_ws();
            return Some(true);
        }
        if c <= b' ' {
            self.skip_ws();
            c = *self.b.get(self.i)?;
        }
        self.i += 1;
        if c == b',' {
            self.skip_ws();
            Some(true)
        } else {
            (c == close).then_some(false)
        }
    }

    /// An object at its `{`: its node, then key and value nodes; its keys' fingerprints
    /// judged for repeats.
    fn object(&mut self, depth: usize, tape: &mut Vec<Node<'i>>, s: &mut Scratch) -> Option<()> {
        let at = self.open(depth, tape)?;
        let keys = s.fingerprints.len();
        let mut len = 0;
        let mut filter = 0u64;
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
        } else {
            loop {
                if self.b.get(self.i) != Some(&b'"') {
                    return None;
                }
                let key_at = tape.len();
                let text = self.string(key_at, s)?;
                let fp = match s.escaped.last() {
                    Some(&(i, start, end)) if i == key_at => fingerprint(&s.decoded[start..end]),
                    _ => fingerprint(text.as_bytes()),
                };
                // Up to AS_THEY_COME keys are judged as they come: a 64-bit filter
                // first, the fingerprints compared only when it says the key may be
                // there. A larger object is judged all at once when it closes.
                if len < AS_THEY_COME {
                    // Mixed first: keys that differ in one digit differ in few bits.
                    let bit = 1u64 << (fp.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58);
                    if filter & bit != 0 && s.fingerprints[keys..].contains(&fp) {
                        self.repeats = true;
                    }
                    filter |= bit;
                }
                s.fingerprints.push(fp);
                tape.push(Node::String(text));
                // The colon mostly follows the key directly.
                if self.b.get(self.i) != Some(&b':') {
                    self.skip_ws();
                    if self.b.get(self.i) != Some(&b':') {
                        return None;
                    }
                }
                self.i += 1;
                self.skip_ws();
                self.value(depth, tape, s)?;
                len += 1;
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        if len > AS_THEY_COME && !self.repeats {
            self.repeats = repeats(&mut s.fingerprints[keys..]);
        }
        s.fingerprints.truncate(keys);
        let count = tape.len() - at - 1;
        tape[at] = Node::Object { len, count };
        Some(())
    }

    fn array(&mut self, depth: usize, tape: &mut Vec<Node<'i>>, s: &mut Scratch) -> Option<()> {
        let at = self.open(depth, tape)?;
        let mut len = 0;
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
        } else {
            loop {
                self.value(depth, tape, s)?;
                len += 1;
                if !self.more(b']')? {
                    break;
                }
            }
        }
        let count = tape.len() - at - 1;
        tape[at] = Node::Array { len, count };
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// A string starting at the opening quote: its text (empty for an escaped string,
    /// whose decoded text `attach` puts on the tape at `at`).
    #[inline(always)]
    fn string(&mut self, at: usize, s: &mut Scratch) -> Option<&'i str> {
        let start = self.i + 1;
        let (end, stop) = scan_string(self.b, start);
        self.i = end + 1;
        match stop {
            Stop::Quote => {
                let text = &self.b[start..end];
                // SAFETY: `read` checked the whole input as UTF-8, and both ends of
                // `text` sit next to an ASCII quote. An ASCII byte is never part of a
                // multi-byte sequence, so both ends are character boundaries and `text`
                // is valid UTF-8. (`str::get` would check the boundaries again; its cost
                // is in BENCHMARKS.md, "core".)
                Some(unsafe { std::str::from_utf8_unchecked(text) })
            }
            Stop::Backslash => self.escaped(start, end, at, s),
            Stop::Other => None,
        }
    }

    /// A string with escapes: decoded into `s.decoded`; the tape gets an empty string
    /// for now, pointed at the decoded text by `attach`.
    #[cold]
    #[inline(never)]
    fn escaped(
        &mut self,
        start: usize,
        first: usize,
        at: usize,
        s: &mut Scratch,
    ) -> Option<&'i str> {
        let from = s.decoded.len();
        let bytes = &mut s.decoded;
        let mut i = start;
        let mut run = first; // end of the plain run before the current escape
        let result = loop {
            bytes.extend_from_slice(&self.b[i..run]);
            // self.b[run] is a backslash.
            let Some(&e) = self.b.get(run + 1) else {
                break None;
            };
            i = run + 2;
            match e {
                b'"' => bytes.push(b'"'),
                b'\\' => bytes.push(b'\\'),
                b'/' => bytes.push(b'/'),
                b'b' => bytes.push(8),
                b'f' => bytes.push(12),
                b'n' => bytes.push(b'\n'),
                b'r' => bytes.push(b'\r'),
                b't' => bytes.push(b'\t'),
                b'u' => {
                    let hi = hex4(self.b.get(i..i + 4)?)?;
                    i += 4;
                    let c = if (0xD800..0xDC00).contains(&hi) {
                        if self.b.get(i..i + 2) != Some(b"\\u") {
                            break None;
                        }
                        let lo = hex4(self.b.get(i + 2..i + 6)?)?;
                        if !(0xDC00..0xE000).contains(&lo) {
                            break None;
                        }
                        i += 6;
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    } else if (0xDC00..0xE000).contains(&hi) {
                        break None;
                    } else {
                        hi
                    };
                    let c = char::from_u32(c)?;
                    let mut buf = [0u8; 4];
                    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                _ => break None,
            }
            let (end, stop) = scan_string(self.b, i);
            match stop {
                Stop::Quote => {
                    bytes.extend_from_slice(&self.b[i..end]);
                    self.i = end + 1;
                    break Some(());
                }
                Stop::Backslash => run = end,
                Stop::Other => break None,
            }
        };
        result?;
        s.escaped.push((at, from, s.decoded.len()));
        Some("")
    }

    /// A number, read exactly as simd-json reads it, or `None` for the rare forms this
    /// reader leaves to simd-json (many digits, large exponents).
    #[inline(always)]
    fn number(&mut self) -> Option<StaticNode> {
        let b = self.b;
        let mut i = self.i;
        let negative = b[i] == b'-';
        i += usize::from(negative);
        let digit = |i: usize| b.get(i).map_or(10, |c| c.wrapping_sub(b'0'));
        let first = i;
        let mut mantissa: u64 = 0;
        let mut d = digit(i);
        if d == 0 {
            i += 1;
            d = digit(i);
        } else {
            while d < 10 {
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
                i += 1;
                d = digit(i);
            }
        }
        let mut digits = i - first;
        // `d` is now the byte after the integer part, less b'0' (wrapping).
        if digits == 0 || d < 10 {
            return None; // no digit, or a leading zero followed by digits
        }
        let mut exponent: i64 = 0;
        let mut float = false;
        if d == b'.'.wrapping_sub(b'0') {
            float = true;
            i += 1;
            let frac = i;
            d = digit(i);
            while d < 10 {
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
                i += 1;
                d = digit(i);
            }
            if i == frac {
                return None;
            }
            digits += i - frac;
            exponent = -((i - frac) as i64);
        }
        if d == b'e'.wrapping_sub(b'0') || d == b'E'.wrapping_sub(b'0') {
            float = true;
            i += 1;
            let sign = b.get(i).copied();
            let negative_exp = sign == Some(b'-');
            i += usize::from(matches!(sign, Some(b'-' | b'+')));
            let start = i;
            let mut e: i64 = 0;
            d = digit(i);
            while d < 10 {
                if e < 10_000 {
                    e = e * 10 + i64::from(d);
                }
                i += 1;
                d = digit(i);
            }
            if i == start {
                return None;
            }
            exponent += if negative_exp { -e } else { e };
        }
        self.i = i;
        if !float {
            // simd-json: 18 digits or more take its large-integer path.
            if digits >= 18 {
                return None;
            }
            return Some(if negative {
                StaticNode::I64((mantissa as i64).wrapping_neg())
            } else {
                StaticNode::U64(mantissa)
            });
        }
        // Exact when the mantissa and the power of ten are both exact doubles
        // (Clinger's fast path): the correctly rounded value, as simd-json computes.
        if digits >= 19 || mantissa > (1u64 << 53) || !(-22..=22).contains(&exponent) {
            return None;
        }
        let m = mantissa as f64;
        let v = if exponent >= 0 {
            m * POW10[exponent as usize]
        } else {
            m / POW10[(-exponent) as usize]
        };
        Some(StaticNode::F64(if negative { -v } else { v }))
    }
}

const FEW: usize = 16;

/// The keys of an object judged one by one as they are read. Up to this many, the
/// filter keeps the comparisons few (27 keys hit it about 5 times, cheaper than the
/// table `repeats` clears for each object); keys that all share a filter bit cost at
/// most 32 * 31 / 2 compares. A larger object is judged again, whole, by `repeats`
/// when it closes, so the first keys of a large one are not judged at length twice.
const AS_THEY_COME: usize = 32;

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

fn hex4(h: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in h {
        v = v * 16 + (c as char).to_digit(16)?;
    }
    Some(v)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    Quote,
    Backslash,
    /// A control character, or the end of the input.
    Other,
}

/// From `i` (inside a string), the index of the first quote, backslash or control
/// character, and which one it is.
#[inline(always)]
fn scan_string(b: &[u8], mut i: usize) -> (usize, Stop) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86_64; every load reads 16 bytes inside `b`
        // (`i + 16 <= b.len()`), unaligned loads being allowed by `loadu`.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let space = _mm_set1_epi8(0x1f);
            while i + 16 <= b.len() {
                let v = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
                // A byte at most 0x1f is one whose unsigned max with 0x1f is 0x1f.
                let control = _mm_cmpeq_epi8(_mm_max_epu8(v, space), space);
                let stop = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    control,
                );
                let mask = _mm_movemask_epi8(stop) as u32;
                if mask != 0 {
                    let j = i + mask.trailing_zeros() as usize;
                    return (j, stop_at(b[j]));
                }
                i += 16;
            }
        }
    }
    while let Some(&c) = b.get(i) {
        if matches!(c, b'"' | b'\\' | 0..=0x1f) {
            return (i, stop_at(c));
        }
        i += 1;
    }
    (i, Stop::Other)
}

#[inline(always)]
fn stop_at(c: u8) -> Stop {
    match c {
        b'"' => Stop::Quote,
        b'\\' => Stop::Backslash,
        _ => Stop::Other,
    }
}

/// Whether two of an object's key fingerprints are equal: pairwise for a few, an
/// open-addressed table on the stack for up to 64, sorting beyond.
pub fn repeats(fps: &mut [u64]) -> bool {
    const SLOTS: usize = 128;
    let n = fps.len();
    if n <= FEW {
        return (1..n).any(|i| fps[..i].contains(&fps[i]));
    }
    if n <= SLOTS / 2 {
        // Slot value 0 means empty, so a zero fingerprint is tracked apart.
        let mut slots = [0u64; SLOTS];
        let mut zero = false;
        for &fp in fps.iter() {
            if fp == 0 {
                if zero {
                    return true;
                }
                zero = true;
                continue;
            }
            let mut i = (fp.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57) as usize;
            loop {
                let slot = &mut slots[i % SLOTS];
                if *slot == 0 {
                    *slot = fp;
                    break;
                }
                if *slot == fp {
                    return true;
                }
                i += 1;
            }
        }
        return false;
    }
    fps.sort_unstable();
    fps.windows(2).any(|w| w[0] == w[1])
}

/// A cheap fingerprint of a key (its length and its first and last eight bytes), so
/// keys are compared byte by byte only when their fingerprints collide. Equal keys have
/// equal fingerprints; short keys are read with overlapping loads, not a copy.
#[inline(always)]
pub fn fingerprint(b: &[u8]) -> u64 {
    let n = b.len();
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let half = |at: usize| {
        u64::from(u32::from_le_bytes(
            b[at..at + 4].try_into().unwrap_or([0; 4]),
        ))
    };
    let (head, tail) = if n >= 8 {
        (word(0), word(n - 8))
    } else if n >= 4 {
        // Both halves together cover every byte, and `n` says how they overlap.
        (half(0) | half(n - 4) << 32, 0)
    } else if n > 0 {
        (
            u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16,
            0,
        )
    } else {
        (0, 0)
    };
    head ^ tail.rotate_left(29) ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// simd-json's reading of a text: the reference this reader is held to, by this
/// module's tests and by the `json` fuzz target (feature `reference`).
#[cfg(any(test, feature = "reference"))]
#[doc(hidden)]
pub mod reference {
    use simd_json::{Buffers, Node, StaticNode, Tape};

    /// simd-json's tape of `text`, each node shown by `show`, or `None` when it
    /// refuses the text.
    pub fn simd_tape(text: &[u8], max_depth: usize) -> Option<Vec<String>> {
        let mut input = text.to_vec();
        input.resize(text.len() + simd_json::INPUT_PADDING, 0);
        let mut buffers = Buffers::with_max_depth(text.len(), max_depth);
        let mut tape = Tape::null();
        simd_json::fill_tape_padded(&mut input, text.len(), &mut buffers, &mut tape).ok()?;
        Some(tape.0.iter().map(show).collect())
    }

    /// A node as the comparison sees it.
    pub fn show(n: &Node<'_>) -> String {
        match n {
            // Floats by their bits: -0.0 and 0.0 differ, as they do for Python.
            Node::Static(StaticNode::F64(f)) => format!("F64({:#x})", f.to_bits()),
            other => format!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reference::{show, simd_tape as reference};
    use super::*;

    /// This reader's tape, or `None` when it leaves the text to simd-json.
    fn fast(text: &[u8], max_depth: usize) -> Option<(Vec<String>, bool)> {
        let mut scratch = Scratch::default();
        let mut tape = Vec::new();
        let repeats = read(text, max_depth, &mut tape, &mut scratch)?;
        attach(&mut tape, &scratch)?;
        Some((tape.iter().map(show).collect(), repeats))
    }

    /// Whatever this reader vouches for, simd-json reads to the same tape.
    fn agrees(text: &[u8]) -> bool {
        match fast(text, 64) {
            None => true,
            Some((tape, _)) => reference(text, 64).as_ref() == Some(&tape),
        }
    }

    fn read_ok(text: &str) -> bool {
        fast(text.as_bytes(), 64).is_some()
    }

    #[test]
    fn reads_the_common_forms_as_simd_json_does() {
        let docs = [
            r#"{}"#,
            r#"{"a": 1, "b": -2, "c": 0, "d": -0, "e": 1.5, "f": -0.0, "g": 1e5, "h": 1E-6, "i": 2.5e+3}"#,
            r#"{"a": [], "b": {}, "c": [[], {}, [1, [2, {"x": null}]]], "t": true, "f": false}"#,
            " \t\r\n{ \"a\" : [ 1 , 2 ] , \"b\" : { } } \n",
            "{\n  \"a\": {\n    \"b\": [\n      1,\n      2\n    ]\n  }\n}",
            r#"{"s": "plain", "u": "h\u00e9llo \u4e2d \ud83d\ude00", "e": "a\"b\\c\/d\b\f\n\r\t", "z": "\u0000"}"#,
            r#"{"\u0061": 1, "a": 2}"#,
            "{\"caf\u{e9}\": \"\u{4e2d}\u{6587}\", \"k\": \"0123456789abcdef0123456789\"}",
            r#"{"n": 12345678901234567, "m": -12345678901234567, "f": 0.1, "g": 123456.789e-3}"#,
            r#"{"e": 1e22, "s": 1e-22, "m": 900719925474099.2}"#,
        ];
        for d in docs {
            assert!(read_ok(d), "read {d}");
            assert!(agrees(d.as_bytes()), "same tape for {d}");
        }
        // Beyond the exact fast path: simd-json reads these.
        for d in [
            r#"{"big": 9007199254740993.0}"#,
            r#"{"e": 1e23}"#,
            r#"{"p": 1.7976931348623157}"#,
        ] {
            assert!(!read_ok(d), "left to simd-json: {d}");
        }
    }

    #[test]
    fn leaves_everything_else_to_simd_json() {
        let refused = [
            "",
            "[1]",
            "\"x\"",
            "{",
            "{\"a\"}",
            "{\"a\": }",
            "{\"a\": 1,}",
            "{\"a\": [1,]}",
            "{\"a\": 01}",
            "{\"a\": 1.}",
            "{\"a\": .5}",
            "{\"a\": -}",
            "{\"a\": 1e}",
            "{\"a\": tru}",
            "{\"a\": truex}",
            "{\"a\": 1} x",
            "{} {}",
            "{\"a\": \"\x01\"}",
            "{\"a\": \"\\x\"}",
            "{\"a\": \"\\ud800\"}",
            "{\"a\": \"\\udc00\"}",
            "{\"a\": \"\\u12\"}",
            "{\"a\": 123456789012345678}",
            "{\"a\": 1e400}",
            "{\"a\": 0.1234567890123456789}",
            "{\"a\" 1}",
            "{1: 2}",
            "{\"a\": \"x",
        ];
        for d in refused {
            assert!(!read_ok(d), "left to simd-json: {d:?}");
        }
        assert!(fast(b"{\"a\": \"\xff\"}", 64).is_none());
        assert!(fast(b"{\"a\": \"\xc3\"}", 64).is_none());
        assert!(fast(b"{\"a\": \"\\n\xff\"}", 64).is_none());
        assert!(fast("{\"é\": 1}".as_bytes(), 64).is_some());
        // Deeper than this reader recurses: simd-json reads, whatever the limit.
        let deep = MAX_RECURSION + 1;
        let doc = format!("{}1{}", "{\"a\":".repeat(deep), "}".repeat(deep));
        assert!(fast(doc.as_bytes(), 1024).is_none());
        assert!(reference(doc.as_bytes(), 1024).is_some());
        assert!(fast(b"{\"a\": {}}", 1024).is_some());
    }

    #[test]
    fn stops_at_the_depth_limit_as_simd_json_does() {
        for depth in [1usize, 2, 5, 63, 64, 65, 100] {
            let doc = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
            let ours = fast(doc.as_bytes(), 64).is_some();
            assert_eq!(
                ours,
                reference(doc.as_bytes(), 64).is_some(),
                "depth {depth}"
            );
            assert_eq!(ours, depth <= 64);
            let arrays = format!("{{\"a\":{}1{}}}", "[".repeat(depth), "]".repeat(depth));
            let ours = fast(arrays.as_bytes(), 64).is_some();
            assert_eq!(
                ours,
                reference(arrays.as_bytes(), 64).is_some(),
                "arrays {depth}"
            );
        }
    }

    #[test]
    fn says_when_keys_may_repeat() {
        let repeats = |d: &str| fast(d.as_bytes(), 64).unwrap().1;
        assert!(!repeats(r#"{"a": 1, "b": {"a": 1}}"#));
        assert!(repeats(r#"{"a": 1, "b": 2, "a": 3}"#));
        assert!(repeats(r#"{"x": [{"k": 1, "k": 2}]}"#));
        assert!(repeats(r#"{"\u006b": 1, "k": 2}"#));
        for n in [3usize, 15, 16, 17, 30, 31, 32, 33, 40, 63, 64, 65, 300] {
            let mut keys: Vec<String> = (0..n).map(|i| format!("\"key.{i}\": {i}")).collect();
            assert!(
                !repeats(&format!("{{{}}}", keys.join(", "))),
                "{n} distinct keys"
            );
            keys.push("\"key.1\": 0".into());
            assert!(
                repeats(&format!("{{{}}}", keys.join(", "))),
                "{n} keys and a repeat"
            );
        }
    }

    /// A repeated key is always noticed, whatever the object's size and wherever the
    /// repeat falls: on the inline filter's side of `AS_THEY_COME`, or past it.
    #[test]
    fn never_misses_a_repeated_key() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..2000 {
            let n = next(80) as usize;
            // Keys from a pool about the object's size, so some objects repeat one.
            let pool = n as u64 * 2 + 1;
            let keys: Vec<String> = (0..n)
                .map(|_| format!("policy.generation.param_{}", next(pool)))
                .collect();
            let distinct: std::collections::HashSet<&String> = keys.iter().collect();
            let members: Vec<String> = keys.iter().map(|k| format!("\"{k}\": 1.5")).collect();
            let doc = format!("{{\"h\": {{{}}}}}", members.join(", "));
            let (_, repeats) = fast(doc.as_bytes(), 64).unwrap();
            if distinct.len() < keys.len() {
                assert!(repeats, "missed a repeat in {doc}");
            }
        }
    }

    /// Every JSON document under `../shared/upstream` (when present), whole, cut, and
    /// with bytes changed, reads to simd-json's tape whenever this reader reads it.
    #[test]
    fn agrees_with_simd_json_on_every_upstream_document() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream");
        if !root.is_dir() {
            eprintln!("skipped: ../shared/upstream is not there");
            return;
        }
        let mut stack = vec![root];
        let (mut seen, mut vouched) = (0, 0);
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().and_then(|e| e.to_str()) != Some("json") {
                    continue;
                }
                let text = std::fs::read(&path).unwrap();
                seen += 1;
                vouched += usize::from(fast(&text, 64).is_some());
                assert!(agrees(&text), "{}", path.display());
                // Cut at every 31st byte, and every 61st byte changed to each of a few
                // bytes that matter to a reader.
                for cut in (0..text.len()).step_by(31) {
                    assert!(agrees(&text[..cut]), "{} cut at {cut}", path.display());
                }
                for at in (0..text.len()).step_by(61) {
                    for b in [
                        b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'0', b'-', b'.', b'e',
                        0x01, 0xff, b' ',
                    ] {
                        let mut t = text.clone();
                        t[at] = b;
                        assert!(agrees(&t), "{} with byte {at} = {b:#x}", path.display());
                    }
                }
            }
        }
        assert!(seen > 50, "only {seen} documents found");
        assert!(
            vouched * 10 >= seen * 9,
            "read {vouched} of {seen} documents itself"
        );
    }

    /// Random documents built from the forms above: numbers, escapes, nesting.
    #[test]
    fn agrees_with_simd_json_on_generated_documents() {
        let atoms = [
            "0",
            "-0",
            "1",
            "-1",
            "10",
            "0.5",
            "-0.5",
            "1e3",
            "1E+3",
            "1e-3",
            "2.5e10",
            "123456789012345",
            "-98765432109876",
            "0.000001",
            "3.14159265358979",
            "1.7976931348623157",
            "4503599627370497",
            "9007199254740992.0",
            "true",
            "false",
            "null",
            "\"\"",
            "\"a\"",
            "\"\\u00e9\"",
            "\"\\ud83d\\ude00\"",
            "\"\\\"\\\\\"",
            "\"x\\ny\"",
            "\"\u{e9}\u{4e2d}\"",
            "\"0123456789abcdefghij\"",
            "[]",
            "{}",
        ];
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        fn build(next: &mut dyn FnMut(usize) -> usize, atoms: &[&str], depth: usize) -> String {
            match next(if depth > 4 { 1 } else { 4 }) {
                0 => atoms[next(atoms.len())].to_string(),
                1 => {
                    let n = next(5);
                    let items: Vec<String> =
                        (0..n).map(|_| build(next, atoms, depth + 1)).collect();
                    format!("[{}]", items.join(", "))
                }
                _ => {
                    let n = next(20);
                    let items: Vec<String> = (0..n)
                        .map(|_| {
                            let key = atoms[next(atoms.len())];
                            let key = if key.starts_with('"') {
                                key.to_string()
                            } else {
                                format!("\"{key}\"")
                            };
                            format!("{key}: {}", build(next, atoms, depth + 1))
                        })
                        .collect();
                    format!("{{{}}}", items.join(","))
                }
            }
        }
        let mut vouched = 0;
        for _ in 0..3000 {
            let body = build(&mut next, &atoms, 0);
            let doc = format!("{{\"d\": {body}}}");
            vouched += usize::from(fast(doc.as_bytes(), 64).is_some());
            assert!(agrees(doc.as_bytes()), "{doc}");
        }
        // Two atoms are beyond the exact fast path, so many documents go to simd-json.
        assert!(vouched > 800, "read {vouched} of 3000 itself");
    }

    /// Found by fuzzing (`rust/fuzz`, target `json`): a number of twenty digits or more
    /// overflowed the mantissa, which panics where overflow is checked (debug builds,
    /// tests) and was only discarded by luck in release. Such numbers go to simd-json.
    #[test]
    fn numbers_past_u64_leave_the_fast_path_without_overflow() {
        for n in [
            "18446744073709551616",
            "99999999999999999999",
            "-99999999999999999999",
            "0.99999999999999999999",
            "1.18446744073709551616e2",
        ] {
            let doc = format!("{{\"a\": {n}}}");
            assert!(agrees(doc.as_bytes()), "{doc}");
        }
    }
}
