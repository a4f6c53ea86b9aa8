//! Text as the documents' Python consumers read it: what counts as whitespace, and
//! what a safe name is. Shared by the schema layer, the kinds' patterns and the file
//! paths, which must all read a string the same way.
//!
//! A leaf of the crate: imports nothing from it.

/// `a == b` where the compiler can evaluate it: in the constants that refuse a table
/// repeating a name (`kind::TABLE`, a schema's fields).
pub const fn const_same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

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

/// Whether `s` is a SHA-256 digest as documents and manifests write it: 64 lowercase
/// hex characters. The one reading of a digest, for the `schema.pattern` rule and for
/// the supporting files the core opens.
pub fn is_lowercase_sha256(s: &str) -> bool {
    // Without a branch per byte, which lets the compiler test many bytes at once.
    let hex = |c: &u8| matches!(c, b'0'..=b'9' | b'a'..=b'f');
    s.len() == 64 && s.as_bytes().iter().fold(true, |all, c| all & hex(c))
}

/// The longest string searched by a plain loop rather than `memchr`.
const SHORT: usize = 16;

/// Where the first `c` is in `b`. Most strings a document holds are short, and for
/// them a plain loop beats setting up a vector search; long ones get `memchr`.
#[inline]
pub fn find_byte(b: &[u8], c: u8) -> Option<usize> {
    if b.len() <= SHORT {
        b.iter().position(|&x| x == c)
    } else {
        memchr::memchr(c, b)
    }
}

/// Where the first `c1` or `c2` is in `b`: `find_byte` for two bytes.
#[inline]
pub fn find_byte2(b: &[u8], c1: u8, c2: u8) -> Option<usize> {
    if b.len() <= SHORT {
        b.iter().position(|&x| x == c1 || x == c2)
    } else {
        memchr::memchr2(c1, c2, b)
    }
}

/// Every position of `c` in `b`, in order: `memchr_iter` by `find_byte`, so a short
/// string is searched with no vector search set up for it.
#[inline]
pub fn byte_positions(b: &[u8], c: u8) -> impl Iterator<Item = usize> + '_ {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = from + find_byte(b.get(from..)?, c)?;
        from = at + 1;
        Some(at)
    })
}

/// Every position of `c1` or `c2` in `b`, in order: `memchr2_iter` by `find_byte2`.
#[inline]
pub fn byte2_positions(b: &[u8], c1: u8, c2: u8) -> impl Iterator<Item = usize> + '_ {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = from + find_byte2(b.get(from..)?, c1, c2)?;
        from = at + 1;
        Some(at)
    })
}

/// `s.split_once(c)` for an ASCII `c`, by a byte search: no character searcher to set
/// up, which matters for the many short strings a document holds.
#[inline]
pub fn split_once_byte(s: &str, c: u8) -> Option<(&str, &str)> {
    debug_assert!(c.is_ascii());
    let at = find_byte(s.as_bytes(), c)?;
    // An ASCII byte is a whole character, so both sides are on character boundaries.
    Some((s.get(..at)?, s.get(at + 1..)?))
}

/// Where the next `://` at or after `from` starts, found by its colon: a byte search,
/// with no substring searcher to set up for each of a document's short strings.
pub fn find_scheme_separator(s: &str, from: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut at = from;
    loop {
        at += find_byte(b.get(at..)?, b':')?;
        if b[at + 1..].starts_with(b"//") {
            return Some(at);
        }
        at += 1;
    }
}

/// `s.contains(c)` for an ASCII `c`. A document's keys and values are mostly a few
/// bytes long: up to 16 are tested eight at a time in a register (a word holds `c`
/// where it XORs to a zero byte), where a call to a vector search would cost more than
/// the search.
#[inline]
pub fn has_byte(s: &str, c: u8) -> bool {
    let b = s.as_bytes();
    let holds = |at: usize| word_holds(word_at(b, at), c);
    match b.len() {
        0..=7 => b.contains(&c),
        // Two words, overlapping when shorter than 16 bytes, test every byte.
        n @ 8..=16 => holds(0) || holds(n - 8),
        _ => memchr::memchr(c, b).is_some(),
    }
}

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The eight bytes of `b` from `at`, as one word (the first byte lowest), to test them
/// at once with `word_holds` and `word_below`.
#[inline(always)]
pub fn word_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// Whether some byte of `word` is `c`: one XORs to zero, and only a zero byte keeps
/// its high bit set when 1 is taken from it and it is not (no carry reaches a byte
/// past a zero one unless that one is zero too).
#[inline(always)]
pub fn word_holds(word: u64, c: u8) -> bool {
    word_below(word ^ (ONES * c as u64), 1)
}

/// Whether some byte of `word` is below `n`, for `n` up to 0x80: the same test as
/// `word_holds`'s, for every byte under `n` rather than zero alone.
#[inline(always)]
pub fn word_below(word: u64, n: u8) -> bool {
    debug_assert!(n <= 0x80);
    word.wrapping_sub(ONES * n as u64) & !word & HIGHS != 0
}

/// Whether some byte of `word` is not ASCII.
#[inline(always)]
pub fn word_non_ascii(word: u64) -> bool {
    word & HIGHS != 0
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

/// `py_trim(s).is_empty()`: a first byte that is printable ASCII answers at once.
#[inline]
pub fn py_is_blank(s: &str) -> bool {
    match s.as_bytes().first() {
        None => true,
        Some(&a) if (0x21..0x7f).contains(&a) => false,
        _ => py_trim(s).is_empty(),
    }
}

/// Byte classes of safe names: `SAFE` for `[A-Za-z0-9._-]`, `LEAD` for the letters and
/// digits a segment may start with. One table load per byte instead of a chain of
/// range tests; non-ASCII bytes are in neither class.
const SAFE: u8 = 1;
const LEAD: u8 = 2;
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if b.is_ascii_alphanumeric() {
            t[c] = SAFE | LEAD;
        } else if matches!(b, b'.' | b'_' | b'-') {
            t[c] = SAFE;
        }
        c += 1;
    }
    t
};

/// How many bytes at the start of `b` are in `[A-Za-z0-9._-]`.
#[inline]
pub fn safe_run(b: &[u8]) -> usize {
    b.iter()
        .position(|&c| CLASS[c as usize] & SAFE == 0)
        .unwrap_or(b.len())
}

/// The length of the safe segment `b` starts with (`[A-Za-z0-9][A-Za-z0-9._-]*`), up
/// to the first byte that cannot be in one; 0 when `b` does not start with one. The
/// patterns made of segments (`a/b`, `a/b@v`) read a string in one pass with it.
#[inline]
pub fn segment_len(b: &[u8]) -> usize {
    match b.first() {
        Some(&c) if CLASS[c as usize] & LEAD != 0 => 1 + safe_run(&b[1..]),
        _ => 0,
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]*$`: one safe path segment, not `.` or `..`.
#[inline]
pub fn is_safe_segment(s: &str) -> bool {
    is_safe_segment_bytes(s.as_bytes())
}

/// `is_safe_segment` of a byte slice (a piece of a `str` cut at ASCII bytes).
#[inline]
pub fn is_safe_segment_bytes(b: &[u8]) -> bool {
    let n = segment_len(b);
    n > 0 && n == b.len()
}

/// What follows the safe segment `b` starts with and the ASCII `sep` right after it;
/// `None` when `b` does not start so. A safe segment holds no separator, so this is
/// `b.split_once(sep)` with a safe left side, read in one pass.
#[inline]
pub fn after_segment(b: &[u8], sep: u8) -> Option<&[u8]> {
    let n = segment_len(b);
    (n > 0 && b.get(n) == Some(&sep)).then(|| &b[n + 1..])
}

/// `is_safe_segment` as a pattern test: `Err` says what a safe name is.
pub fn safe_segment(s: &str) -> Result<(), String> {
    if is_safe_segment(s) {
        Ok(())
    } else {
        Err("is not a safe name: it must start with a letter or digit and hold only letters, digits, '.', '_' and '-'".into())
    }
}

/// Strings to compare a rewritten string test with its reference on: the seeds, each
/// mutated many times over (characters inserted, removed and replaced from an alphabet
/// of separators, whitespace and non-ASCII), and random strings of the same alphabet.
#[cfg(test)]
pub(crate) mod fuzz {
    const ALPHABET: &[&str] = &[
        "a", "Z", "0", "9", ".", "..", "_", "-", "/", "//", "@", "~", ":", "://", "step=", "run",
        "sha256:", " ", "\t", "\n", "\u{1c}", "\u{1f}", "\u{a0}", "\u{3000}", "é", "字", "🙂",
        "\u{0}", "\u{7f}", "{", "file:", "run/", "x",
    ];

    /// A small deterministic generator (xorshift): the same strings on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// `count` strings, each up to `max_parts - 1` of `fragments` joined, drawn from
    /// `seed`: for the detectors whose inputs are built from the pieces they look for.
    pub fn joined(fragments: &[&str], max_parts: usize, count: usize, seed: u64) -> Vec<String> {
        let mut rng = Rng(seed);
        (0..count)
            .map(|_| {
                let parts = rng.below(max_parts);
                (0..parts)
                    .map(|_| fragments[rng.below(fragments.len())])
                    .collect()
            })
            .collect()
    }

    pub fn strings(seeds: &[&str], n: usize) -> Vec<String> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut out: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
        for piece in ALPHABET {
            out.push(piece.to_string());
        }
        while out.len() < n {
            let mut s: Vec<char> = if rng.below(4) == 0 || seeds.is_empty() {
                Vec::new()
            } else {
                seeds[rng.below(seeds.len())].chars().collect()
            };
            for _ in 0..=rng.below(4) {
                let piece: Vec<char> = ALPHABET[rng.below(ALPHABET.len())].chars().collect();
                let at = rng.below(s.len() + 1);
                match rng.below(3) {
                    0 => {
                        s.splice(at..at, piece);
                    }
                    1 if at < s.len() => {
                        s.remove(at);
                    }
                    _ if at < s.len() => {
                        s.splice(at..at + 1, piece);
                    }
                    _ => s.extend(piece),
                }
            }
            out.push(s.into_iter().collect());
        }
        out
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

    /// The byte tests as they were, before the class table and the short-string search.
    mod reference {
        pub fn is_safe_segment(s: &str) -> bool {
            let b = s.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }

        pub fn find_scheme_separator(s: &str, from: usize) -> Option<usize> {
            let b = s.as_bytes();
            memchr::memchr_iter(b':', b.get(from..)?)
                .map(|at| at + from)
                .find(|&at| b[at + 1..].starts_with(b"//"))
        }
    }

    #[test]
    fn word_tests_read_every_byte() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        for round in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Random words, and words of few distinct bytes (zeros, 0x80, neighbours).
            let word = if round % 2 == 0 {
                state
            } else {
                u64::from_le_bytes(
                    state
                        .to_le_bytes()
                        .map(|x| [0, 1, 0x7f, 0x80, 0x20, 0x21, b'.', 0xff][x as usize % 8]),
                )
            };
            let bytes = word.to_le_bytes();
            assert_eq!(word_at(&bytes, 0), word);
            for c in [
                0, 1, b' ', b'!', b'.', b'[', 0x7f, 0x80, 0xff, bytes[0], bytes[7],
            ] {
                assert_eq!(word_holds(word, c), bytes.contains(&c), "{word:#x} {c}");
            }
            for n in [1, 0x20, 0x21, 0x7f, 0x80] {
                assert_eq!(
                    word_below(word, n),
                    bytes.iter().any(|&x| x < n),
                    "{word:#x} {n}"
                );
            }
            assert_eq!(word_non_ascii(word), !bytes.is_ascii());
        }
    }

    #[test]
    fn byte_tests_agree_with_the_reference() {
        let long = "a".repeat(40) + "/" + &"b".repeat(40) + "://x";
        let seeds = [
            "run-1.a_b",
            "s3://bucket/x",
            "a:b://c",
            "nemo-rl/grpo",
            long.as_str(),
        ];
        for s in fuzz::strings(&seeds, 40_000) {
            let s = s.as_str();
            assert_eq!(is_safe_segment(s), reference::is_safe_segment(s), "{s:?}");
            assert_eq!(py_is_blank(s), py_trim(s).is_empty(), "{s:?}");
            let b = s.as_bytes();
            for c in [b'/', b'@', b':', b'{'] {
                assert_eq!(split_once_byte(s, c), s.split_once(c as char), "{s:?}");
                assert_eq!(has_byte(s, c), s.contains(c as char), "{s:?}");
                assert_eq!(find_byte(b, c), memchr::memchr(c, b), "{s:?}");
                let all: Vec<usize> = byte_positions(b, c).collect();
                assert_eq!(all, memchr::memchr_iter(c, b).collect::<Vec<_>>(), "{s:?}");
                for d in [b'.', b'[', b'/'] {
                    assert_eq!(find_byte2(b, c, d), memchr::memchr2(c, d, b), "{s:?}");
                    let all: Vec<usize> = byte2_positions(b, c, d).collect();
                    let expected: Vec<usize> = memchr::memchr2_iter(c, d, b).collect();
                    assert_eq!(all, expected, "{s:?}");
                }
            }
            let n = segment_len(b);
            assert!(n <= b.len());
            assert_eq!(
                n > 0 && n == b.len(),
                reference::is_safe_segment(s),
                "{s:?}"
            );
            for from in 0..=b.len() + 1 {
                assert_eq!(
                    find_scheme_separator(s, from),
                    reference::find_scheme_separator(s, from),
                    "{s:?} from {from}"
                );
            }
        }
    }
}
