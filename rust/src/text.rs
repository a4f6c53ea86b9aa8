//! Text as the documents' Python consumers read it: what counts as whitespace, and
//! what a safe name is. Shared by the schema layer, the kinds' patterns and the file
//! paths, which must all read a string the same way.
//!
//! A leaf of the crate: imports nothing from it.

/// String equality for the short names documents are made of (keys, field names):
/// lengths first, then at most two word compares, with no call for the common case.
#[inline(always)]
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        _ => a == b,
    }
}

/// `s.split_once(c)` for an ASCII `c`, by a byte search: no character searcher to set
/// up, which matters for the many short strings a document holds.
#[inline]
pub fn split_once_byte(s: &str, c: u8) -> Option<(&str, &str)> {
    debug_assert!(c.is_ascii());
    let at = memchr::memchr(c, s.as_bytes())?;
    // An ASCII byte is a whole character, so both sides are on character boundaries.
    Some((s.get(..at)?, s.get(at + 1..)?))
}

/// Where the next `://` at or after `from` starts, found by its colon: a byte search,
/// with no substring searcher to set up for each of a document's short strings.
pub fn find_scheme_separator(s: &str, from: usize) -> Option<usize> {
    let b = s.as_bytes();
    memchr::memchr_iter(b':', b.get(from..)?)
        .map(|at| at + from)
        .find(|&at| b[at + 1..].starts_with(b"//"))
}

/// `s.contains(c)` for an ASCII `c`, by a byte search.
#[inline]
pub fn has_byte(s: &str, c: u8) -> bool {
    memchr::memchr(c, s.as_bytes()).is_some()
}

/// Python's `str.isspace`, which is what `\s` and `\S` mean to the published schemas'
/// consumers (the `jsonschema` package uses Python's `re`).
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
#[inline]
pub fn py_trim(s: &str) -> &str {
    // Printable ASCII at both ends (the usual case) is never whitespace.
    match (s.as_bytes().first(), s.as_bytes().last()) {
        (Some(&a), Some(&z)) if (0x21..0x7f).contains(&a) && (0x21..0x7f).contains(&z) => s,
        _ => s.trim_matches(py_isspace),
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]*$`: one safe path segment, not `.` or `..`.
pub fn is_safe_segment(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// `is_safe_segment` as a pattern test: `Err` says what a safe name is.
pub fn safe_segment(s: &str) -> Result<(), String> {
    if is_safe_segment(s) {
        Ok(())
    } else {
        Err("is not a safe name: it must start with a letter or digit and hold only letters, digits, '.', '_' and '-'".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_whitespace_includes_separators() {
        assert!(py_isspace('\u{1f}'));
        assert!(py_isspace('\u{a0}'));
        assert!(!py_isspace('x'));
        assert_eq!(py_trim("\u{1f} a b\u{a0}"), "a b");
    }

    #[test]
    fn safe_segments() {
        assert!(is_safe_segment("run-1.a_b"));
        assert!(!is_safe_segment(".."));
        assert!(!is_safe_segment("-x"));
        assert!(!is_safe_segment(""));
        assert!(!is_safe_segment("a/b"));
    }
}
