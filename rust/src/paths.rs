//! Supporting-file paths as a spec-bundle writes them: which are acceptable
//! (`tao.supporting_file.path`), and which spellings name the same file. Shared by the
//! bundle's document rules (`kinds::spec_bundle`) and the file checks (`files`), which
//! must agree on both.
//!
//! A leaf of the crate: imports only `text`.

use crate::text::py_isspace;

/// A path to a file: `relative_path`, and it does not name a directory.
pub fn supporting_path(s: &str) -> Result<(), String> {
    relative_path(s)?;
    if names_a_directory(s) {
        return Err("names a directory, not a file: its last segment is empty or '.'; give the file's path, without a trailing '/' or '/.'".into());
    }
    Ok(())
}

/// Whether the path's last segment is empty or `.` (`a/`, `a/.`, `.`, `./`): extractors
/// and copies make or expect a directory there, and a file cannot be read or written
/// through it, so neither a source nor a destination may end so.
pub fn names_a_directory(s: &str) -> bool {
    matches!(s.rsplit('/').next(), Some("" | "."))
}

/// Relative, no `..` segment, no backslash, whitespace or NUL: the rules of any path
/// inside a producer root or a package, directories' included.
pub fn relative_path(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.first() == Some(&b'/') {
        return Err("is an absolute path; give it relative to the producer root".into());
    }
    if has_parent_segment(b) {
        return Err("has a '..' segment; paths may not leave their root".into());
    }
    // One pass tells which of the rest can apply; the errors keep their order.
    let present = byte_classes(b);
    if present & BACKSLASH != 0 {
        return Err("has a backslash; use '/' as the separator".into());
    }
    if present & NUL != 0 {
        return Err("has a NUL character".into());
    }
    // Only a non-ASCII character can be a space the ASCII classes did not see.
    if present & ASCII_SPACE != 0 || (present & NON_ASCII != 0 && s.chars().any(py_isspace)) {
        return Err("has whitespace".into());
    }
    Ok(())
}

/// Whether some `/`-separated segment of `b` is `..`: found from the few dots a path
/// holds rather than by splitting it.
fn has_parent_segment(b: &[u8]) -> bool {
    crate::text::byte_positions(b, b'.').any(|at| {
        b.get(at + 1) == Some(&b'.')
            && (at == 0 || b[at - 1] == b'/')
            && b.get(at + 2).is_none_or(|&c| c == b'/')
    })
}

const BACKSLASH: u8 = 1;
const NUL: u8 = 2;
/// An ASCII character Python's `str.isspace` accepts: `\t\n\x0b\x0c\r`, `\x1c`-`\x1f`, space.
const ASCII_SPACE: u8 = 4;
/// A byte of a non-ASCII character, which may be a space only decoding tells.
const NON_ASCII: u8 = 8;

/// The classes of each byte, looked up rather than computed: a few instructions a byte.
const CLASSES: [u8; 256] = {
    let mut table = [0; 256];
    let mut c = 0;
    while c < 256 {
        let byte = c as u8;
        table[c] = match byte {
            b'\\' => BACKSLASH,
            0 => NUL,
            b'\t'..=b'\r' | 0x1c..=b' ' => ASCII_SPACE,
            0x80.. => NON_ASCII,
            _ => 0,
        };
        c += 1;
    }
    table
};

/// Which of the classes above occur in `b`.
fn byte_classes(b: &[u8]) -> u8 {
    b.iter()
        .fold(0, |present, &c| present | CLASSES[c as usize])
}

/// The segments that place a file: empty and `.` segments name nothing.
pub fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty() && *s != ".")
}

/// `a//b/./c` and `a/b/c` name the same file.
pub fn normalize(path: &str) -> String {
    segments(path).collect::<Vec<_>>().join("/")
}

/// `supporting_path` as it was before the single byte pass, kept to prove the faster
/// one answers exactly the same on any string.
#[cfg(test)]
fn reference_supporting_path(s: &str) -> Result<(), String> {
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
    let last = s.split('/').next_back().unwrap_or_default();
    if last.is_empty() || last == "." {
        return Err("names a directory, not a file: its last segment is empty or '.'; give the file's path, without a trailing '/' or '/.'".into());
    }
    Ok(())
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
    fn a_path_that_names_a_directory_is_no_supporting_path() {
        for dir in [".", "./", "./.", "a/.", "a/", "a//", "a/./", "./a/", ""] {
            let why = supporting_path(dir).expect_err(dir);
            assert!(
                why.starts_with("names a directory, not a file"),
                "{dir:?}: {why}"
            );
            // Inside a package, a directory member may name one.
            assert_eq!(relative_path(dir), Ok(()), "{dir:?}");
        }
        for file in [
            "a/b", "a", "./a", "a/./b", "a//b", ".a", "a/.b", "a.", "a/b.",
        ] {
            assert_eq!(supporting_path(file), Ok(()), "{file:?}");
        }
    }

    #[test]
    fn spellings_of_one_file() {
        assert_eq!(normalize("a//b/./c"), "a/b/c");
        assert_eq!(normalize("./x"), "x");
        assert_eq!(normalize("."), "");
    }

    #[test]
    fn supporting_paths_agree_with_the_reference() {
        let fragments = [
            "/", ".", "..", "a", "b.py", "\\", "\0", " ", "\t", "\x0b", "\r", "\x1c", "\x1f",
            "\x7f", "\u{85}", "\u{a0}", "\u{2028}", "\u{3000}", "é", "𝔘", "-", "_",
        ];
        let mut answers = std::collections::HashSet::new();
        for path in crate::text::fuzz::joined(&fragments, 9, 200_000, 0x2545_F491_4F6C_DD1D) {
            let answer = supporting_path(&path);
            assert_eq!(answer, reference_supporting_path(&path), "{path:?}");
            answers.insert(answer);
        }
        // Every answer was reached, each error before the others it precedes.
        assert_eq!(answers.len(), 7, "{answers:?}");
    }
}
