//! Supporting-file paths as a spec-bundle writes them: which are acceptable
//! (`tao.supporting_file.path`), and which spellings name the same file. Shared by the
//! bundle's document rules (`kinds::spec_bundle`) and the file checks (`files`), which
//! must agree on both.
//!
//! A leaf of the crate: imports only `text`.

use crate::text::py_isspace;

/// Relative, no `..` segment, no backslash, whitespace or NUL.
pub fn supporting_path(s: &str) -> Result<(), String> {
    if s.starts_with('/') {
        return Err("is an absolute path; give it relative to the producer root".into());
    }
    if s.split('/').any(|seg| seg == "..") {
        return Err("has a '..' segment; paths may not leave their root".into());
    }
    if s.contains('\\') {
        return Err("has a backslash; use '/' as the separator".into());
    }
    if s.contains('\0') {
        return Err("has a NUL character".into());
    }
    if s.chars().any(py_isspace) {
        return Err("has whitespace".into());
    }
    if !s.is_empty() && s.split('/').all(|seg| seg.is_empty() || seg == ".") {
        return Err("names no file, only the directory itself; give the file's path".into());
    }
    Ok(())
}

/// The segments that place a file: empty and `.` segments name nothing.
pub fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty() && *s != ".")
}

/// `a//b/./c` and `a/b/c` name the same file.
pub fn normalize(path: &str) -> String {
    segments(path).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supporting_paths() {
        assert!(supporting_path("scripts/a.py").is_ok());
        for bad in ["/abs", "../x", "a/../b", "a\\b", "a b", "a\0b", "a\u{1f}b"] {
            assert!(supporting_path(bad).is_err(), "{bad:?}");
        }
        assert!(supporting_path("a..b/c").is_ok());
    }

    #[test]
    fn spellings_of_one_file() {
        assert_eq!(normalize("a//b/./c"), "a/b/c");
        assert_eq!(normalize("./x"), "x");
        assert_eq!(normalize("."), "");
    }
}
