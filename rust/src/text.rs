//! Text as the documents' Python consumers read it: what counts as whitespace, and
//! what a safe name is. Shared by the schema layer, the kinds' patterns and the file
//! paths, which must all read a string the same way.
//!
//! A leaf of the crate: imports nothing from it.

/// Python's `str.isspace`, which is what `\s` and `\S` mean to the published schemas'
/// consumers (the `jsonschema` package uses Python's `re`).
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub fn py_trim(s: &str) -> &str {
    s.trim_matches(py_isspace)
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
