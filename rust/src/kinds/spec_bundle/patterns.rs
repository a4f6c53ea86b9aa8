//! The string patterns of a spec-bundle: a resolved image, a SHA-256 digest, an
//! environment variable name, a supporting-file path, and spec keys (the
//! dotted/indexed pointers into `spec`, which the document rules also walk).

use crate::paths::supporting_path;
use crate::rules::Rule;
use crate::schema::Pattern;
use crate::text::{
    find_byte, find_byte2, is_lowercase_sha256, py_isspace, word_at, word_below, word_holds,
    word_non_ascii,
};

pub static IMAGE: Pattern = Pattern::new(Rule::SchemaPattern, image_uri);
pub static SHA256: Pattern = Pattern::new(Rule::SchemaPattern, lowercase_sha256);
pub static SUPPORTING_PATH: Pattern = Pattern::new(Rule::TaoSupportingFilePath, supporting_path);
pub static SPEC_KEY: Pattern = Pattern::new(Rule::TaoSpecKeySyntax, spec_key_syntax);
pub static ENV_NAME: Pattern = Pattern::new(Rule::SchemaPropertyNames, env_name);

/// `^\S+/\S+$`: a resolved registry/path:tag, never a versions.yaml key.
fn image_uri(s: &str) -> Result<(), String> {
    // Some '/' with at least one character on each side, and no whitespace anywhere:
    // exactly what the pattern matches ("//0" does: "/" + "/" + "0").
    let b = s.as_bytes();
    let interior_slash = b.len() >= 3 && b[1..b.len() - 1].contains(&b'/');
    // An ASCII string, the usual one, is read without decoding its characters: its
    // spaces by `str.isspace` are `\t\n\x0b\x0c\r`, `\x1c`-`\x1f` and space.
    let has_space = if s.is_ascii() {
        b.iter().fold(false, |seen, c| {
            seen | (b'\t'..=b'\r').contains(c) | (0x1c..=b' ').contains(c)
        })
    } else {
        s.chars().any(py_isspace)
    };
    if interior_slash && !has_space {
        Ok(())
    } else {
        Err("is not a resolved container URI (registry/path:tag, no whitespace); resolve the image key first".into())
    }
}

fn lowercase_sha256(s: &str) -> Result<(), String> {
    if is_lowercase_sha256(s) {
        Ok(())
    } else {
        Err("is not a SHA-256 digest: 64 lowercase hex characters".into())
    }
}

fn env_name(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    if ok {
        Ok(())
    } else {
        Err("is not an environment variable name (^[A-Z_][A-Z0-9_]*$)".into())
    }
}

/// One step of a dotted/indexed spec pointer such as `dataset.sources[0].dir`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The steps of a spec pointer, or `None` when it is not one. Allocates nothing: the
/// pointer is checked once, then walked step by step.
pub fn parse_spec_key(s: &str) -> Option<Steps<'_>> {
    is_spec_key(s).then_some(Steps { rest: s })
}

/// The steps of a spec pointer already checked by `is_spec_key`: a name, then its
/// `[digits]` indexes, then `.` and the next name.
#[derive(Clone)]
pub struct Steps<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Steps<'a> {
    type Item = Step<'a>;

    fn next(&mut self) -> Option<Step<'a>> {
        let b = self.rest.as_bytes();
        match b.first()? {
            b'[' => {
                let close = find_byte(b, b']')?;
                // Too many digits for an index: an index past any array's end.
                let i = self.rest[1..close].parse().unwrap_or(usize::MAX);
                self.rest = &self.rest[close + 1..];
                if self.rest.starts_with('.') {
                    self.rest = &self.rest[1..];
                }
                Some(Step::Index(i))
            }
            _ => {
                let end = find_byte2(b, b'.', b'[').unwrap_or(b.len());
                let name = &self.rest[..end];
                self.rest = &self.rest[end..];
                if self.rest.starts_with('.') {
                    self.rest = &self.rest[1..];
                }
                Some(Step::Key(name))
            }
        }
    }
}

/// The bytes a spec key's name may hold: not `.`, `[`, `]`, nor an ASCII space as
/// Python's `str.isspace` reads one (`\t\n\x0b\x0c\r`, `\x1c`-`\x1f`, space).
const NAME_BYTE: [bool; 256] = {
    let mut table = [true; 256];
    let stops = b".[]\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ";
    let mut i = 0;
    while i < stops.len() {
        table[stops[i] as usize] = false;
        i += 1;
    }
    table
};

/// Whether the eight bytes of `word` are all printable ASCII name bytes (`!` to `~`
/// but `.`, `[` and `]`): the bytes a name is usually made of, tested at once. A word
/// that is not may still hold only name bytes, and is then read byte by byte.
#[inline]
fn plain_name_bytes(word: u64) -> bool {
    !(word_non_ascii(word)
        | word_below(word, b'!')
        | word_holds(word, b'.')
        | word_holds(word, b'[')
        | word_holds(word, b']')
        | word_holds(word, 0x7f))
}

/// `name([digits])*` segments joined by `.`; names hold no `.`, `[`, `]` or whitespace.
fn is_spec_key(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i + 8 <= b.len() && plain_name_bytes(word_at(b, i)) {
            i += 8;
        }
        // The bytes read one by one, or'ed: the words above are ASCII, so only these
        // can tell a non-ASCII name.
        let mut read = 0u8;
        while let Some(&c) = b.get(i).filter(|&&c| NAME_BYTE[c as usize]) {
            read |= c;
            i += 1;
        }
        // Every ASCII space stops the loops above, so only a non-ASCII name is decoded
        // to look for the others.
        let name = &s[start..i];
        if i == start || (!read.is_ascii() && name.chars().any(py_isspace)) {
            return false;
        }
        while i < b.len() && b[i] == b'[' {
            let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 || b.get(i + 1 + digits) != Some(&b']') {
                return false;
            }
            i += digits + 2;
        }
        match b.get(i) {
            None => return true,
            Some(b'.') => i += 1,
            Some(_) => return false,
        }
    }
}

fn spec_key_syntax(s: &str) -> Result<(), String> {
    match is_spec_key(s) {
        true => Ok(()),
        false => Err("is not a dotted/indexed pointer into the spec, such as dataset.train_data_sources[0].image_dir".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is_spec_key` as it was, before names were read a word at a time.
    fn reference_is_spec_key(s: &str) -> bool {
        let b = s.as_bytes();
        let mut i = 0;
        loop {
            let start = i;
            while i < b.len() && NAME_BYTE[b[i] as usize] {
                i += 1;
            }
            let name = &s[start..i];
            if i == start || (!name.is_ascii() && name.chars().any(py_isspace)) {
                return false;
            }
            while i < b.len() && b[i] == b'[' {
                let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 || b.get(i + 1 + digits) != Some(&b']') {
                    return false;
                }
                i += digits + 2;
            }
            match b.get(i) {
                None => return true,
                Some(b'.') => i += 1,
                Some(_) => return false,
            }
        }
    }

    #[test]
    fn spec_keys_agree_with_the_reference() {
        // Every byte in every place of a word, and the fuzzed strings.
        for c in 0..=u8::MAX {
            for at in 0..10 {
                let mut b = b"dataset.train_data_sources".to_vec();
                b.insert(at, c);
                if let Ok(s) = std::str::from_utf8(&b) {
                    assert_eq!(is_spec_key(s), reference_is_spec_key(s), "{s:?}");
                }
            }
        }
        for c in ['\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', 'é', '字', '🙂'] {
            for at in 0..12 {
                let mut s = String::from("train_data_sources.x");
                s.insert(at, c);
                assert_eq!(is_spec_key(&s), reference_is_spec_key(&s), "{s:?}");
            }
        }
        let seeds = [
            "dataset.train_data_sources[0].image_dir",
            "train.pretrained_model_path",
            "a[0][12].b",
            "results_dir",
            "x[99999999999999999999999].y",
            "é.字[3].very_long_name\u{a0}here",
            "a\u{3000}bcdefghijkl",
        ];
        let extra = ["", "[", "]", "[0]", "[01]", ".[", "].", ".a", "."];
        for s in crate::text::fuzz::strings(&seeds, 60_000) {
            for e in extra {
                let s = format!("{s}{e}");
                assert_eq!(is_spec_key(&s), reference_is_spec_key(&s), "{s:?}");
            }
        }
    }

    #[test]
    fn parses_spec_keys() {
        let steps = |s| parse_spec_key(s).map(|it| it.collect::<Vec<_>>());
        assert_eq!(
            steps("a.b[0].c"),
            Some(vec![
                Step::Key("a"),
                Step::Key("b"),
                Step::Index(0),
                Step::Key("c")
            ])
        );
        assert_eq!(steps("results_dir"), Some(vec![Step::Key("results_dir")]));
        assert_eq!(
            steps("a[0][12]"),
            Some(vec![Step::Key("a"), Step::Index(0), Step::Index(12)])
        );
        for bad in [
            "", "a..b", ".a", "a.", "a[x]", "a[]", "a[0", "[0]", "a b", "a]", "a[0]b", "a\u{a0}b",
        ] {
            assert_eq!(steps(bad), None, "{bad}");
        }
    }

    #[test]
    fn image_uris_as_the_pattern_reads_them() {
        for ok in ["nvcr.io/nvidia/tao:1", "a/b", "//0", "a//", "5🅀ÌL𑊑/¦"] {
            assert!(image_uri(ok).is_ok(), "{ok}");
        }
        for bad in ["tao_toolkit.pyt", "/a", "a/", "/", "a /b", ""] {
            assert!(image_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn image_uris_and_digests_agree_with_the_pattern_texts() {
        let reference_image = |s: &str| {
            let b = s.as_bytes();
            b.len() >= 3 && b[1..b.len() - 1].contains(&b'/') && !s.chars().any(py_isspace)
        };
        let reference_sha =
            |s: &str| s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        let fragments = [
            "a",
            "/",
            "0",
            "f",
            "g",
            "A",
            " ",
            "\t",
            "\x0b",
            "\r",
            "\x1c",
            "\x1f",
            "\x7f",
            "\u{85}",
            "\u{a0}",
            "\u{2028}",
            "é",
            "𝔘",
            ":",
            "0123456789abcdef",
        ];
        for s in crate::text::fuzz::joined(&fragments, 10, 100_000, 0x853C_49E6_748F_EA9B) {
            assert_eq!(image_uri(&s).is_ok(), reference_image(&s), "{s:?}");
            assert_eq!(lowercase_sha256(&s).is_ok(), reference_sha(&s), "{s:?}");
            let digest = s.repeat(64).chars().take(64).collect::<String>();
            assert_eq!(
                lowercase_sha256(&digest).is_ok(),
                reference_sha(&digest),
                "{digest:?}"
            );
        }
        assert!(lowercase_sha256(&"0a".repeat(32)).is_ok());
    }
}
