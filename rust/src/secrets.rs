//! Credential literals in strings: `tao.execution.secret` and `tao.record.secret`.
//!
//! Credentials never enter a spec-bundle or a job record; these detectors find the
//! shapes the platform documents: well-known token prefixes, URL userinfo with a
//! password, and `NAME=value` where NAME says SECRET, PASSWORD, TOKEN or API_KEY.
//! References (`${HF_TOKEN}`, `$TOKEN`, `{job_id}`) and redaction marks are not literals.

/// A token prefix, the characters its body uses, and the shortest body counted.
type Prefix = (&'static str, fn(u8) -> bool, usize);

/// In the order `token_prefixes` picks them by their first letter.
const PREFIXES: [Prefix; 5] = [
    ("hf_", |c| c.is_ascii_alphanumeric(), 8),
    ("ghp_", |c| c.is_ascii_alphanumeric(), 8),
    (
        "nvapi-",
        |c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_',
        8,
    ),
    (
        "sk-",
        |c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_',
        8,
    ),
    ("AKIA", |c| c.is_ascii_uppercase() || c.is_ascii_digit(), 16),
];

/// Where a credential's secret part sits in a string, and why it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// The byte range of the part that is secret (a token's body after its public
    /// prefix, a URL's password, an assignment's value).
    pub start: usize,
    pub end: usize,
    pub reason: String,
}

/// Why `s` holds a credential literal, or `None`.
pub fn find_credential(s: &str) -> Option<String> {
    // Token prefixes say the most, then URL passwords, then assignments. One pass over
    // the bytes looks for tokens at their marks, and finds which bytes the other
    // detectors need, which most strings do not hold. The first token found is the
    // first of the string, and answers.
    let b = s.as_bytes();
    let mut present = 0;
    for (at, c) in b.iter().enumerate() {
        let class = CLASSES[*c as usize];
        present |= class;
        if class & MARK != 0 {
            if let Some(token) = token_at(b, at) {
                return Some(token.reason);
            }
        }
    }
    if present & SEPARATOR == 0 {
        return None;
    }
    url_userinfo(s)
        .into_iter()
        .chain(name_assignments(s))
        .next()
        .map(|c| c.reason)
}

/// A token body this long counts even in lower case (`hf_` and twenty letters): the
/// names that share a prefix (`hf_transfer`, `sk-learn-intelex`) are short words,
/// placeholders written for a token (`hf_xxxxxxxxxxxxxxxxxxxxxxxx`) are not.
const LONG_BODY: usize = 20;
/// A byte the other detectors need: a URL's userinfo follows the `:` of `://`, and an
/// assignment is made by `=` or `:`.
const SEPARATOR: u8 = 2;
/// A letter every sensitive name holds: each word has a C (SECRET), W (PASSWORD) or K
/// (TOKEN, KEY), in either case.
const NAME_LETTER: u8 = 4;

/// A byte every token prefix holds (see `MARK_AT`), which `is_mark` tells.
const MARK: u8 = 1;

/// The classes of each byte, looked up rather than computed: a few instructions a byte.
const CLASSES: [u8; 256] = {
    let mut table = [0; 256];
    let mut c = 0;
    while c < 256 {
        let byte = c as u8;
        if byte == b'=' || byte == b':' {
            table[c] |= SEPARATOR;
        }
        if matches!(byte.to_ascii_uppercase(), b'C' | b'W' | b'K') {
            table[c] |= NAME_LETTER;
        }
        if is_mark(byte) {
            table[c] |= MARK;
        }
        c += 1;
    }
    table
};

/// Which of the classes above occur in `b`.
fn byte_classes(b: &[u8]) -> u8 {
    b.iter()
        .fold(0, |present, &c| present | CLASSES[c as usize])
}

/// `s` with the secret part of every credential replaced by `***`: what a job record
/// stores of a message. The same detector as `find_credential`, so what is stored
/// passes `tao.record.secret`, and what that rule leaves alone is stored as it is.
pub fn redact(s: &str) -> String {
    let found = token_prefixes(s)
        .into_iter()
        .chain(url_userinfo(s))
        .chain(name_assignments(s))
        .collect();
    hide(s, found)
}

/// `s` with the secret part of each credential `found` in it replaced by `***`.
fn hide(s: &str, mut found: Vec<Credential>) -> String {
    if found.is_empty() {
        return s.to_string();
    }
    found.sort_by_key(|c| (c.start, std::cmp::Reverse(c.end)));
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for c in found {
        if c.start < at {
            continue; // inside a part already redacted
        }
        out.push_str(&s[at..c.start]);
        out.push_str("***");
        at = c.end;
    }
    out.push_str(&s[at..]);
    out
}

/// A `NAME=value` pair given apart (an environment entry): sensitive name, literal value.
pub fn sensitive_assignment(name: &str, value: &str) -> Option<String> {
    if is_sensitive_name(name) && is_literal(value) {
        return Some(format!("{name} is a credential name and its value is a literal; pass it through the platform's secret mechanism"));
    }
    find_credential(value)
}

/// A name that says it holds a credential: a part (split on `_`/`-`) ending in SECRET,
/// PASSWORD or TOKEN, or API_KEY anywhere. `MAX_TOKENS` and `TOKENIZER` are not.
fn is_sensitive_name(name: &str) -> bool {
    // Most names, such as PYTHONUNBUFFERED, hold none of the words' letters.
    if byte_classes(name.as_bytes()) & NAME_LETTER == 0 {
        return false;
    }
    let ends_with = |part: &[u8], word: &str| {
        part.len() >= word.len()
            && part[part.len() - word.len()..].eq_ignore_ascii_case(word.as_bytes())
    };
    let parts = name.as_bytes().split(|c| *c == b'_' || *c == b'-');
    let mut previous: &[u8] = b"";
    for part in parts {
        // Each word ends in its own letter, so a part's last byte picks the one word it
        // can end with (or the two spellings of API key) instead of trying them all.
        let sensitive = match part.last().map(u8::to_ascii_uppercase) {
            Some(b'T') => ends_with(part, "SECRET"),
            Some(b'D') => ends_with(part, "PASSWORD"),
            Some(b'N') => ends_with(part, "TOKEN"),
            Some(b'Y') => {
                ends_with(part, "APIKEY")
                    || (part.eq_ignore_ascii_case(b"KEY") && ends_with(previous, "API"))
            }
            _ => false,
        };
        if sensitive {
            return true;
        }
        previous = part;
    }
    false
}

/// A value that is really there: not empty, not a reference or placeholder, not a redaction mark.
fn is_literal(value: &str) -> bool {
    let v = value.trim().trim_matches(|c| c == '"' || c == '\'');
    if v.is_empty()
        || v.starts_with('$')
        || (v.starts_with('{') && v.ends_with('}'))
        || v.starts_with('<')
    {
        return false;
    }
    if v.bytes().all(|c| c == b'*') || v.to_ascii_uppercase().contains("REDACTED") {
        return false;
    }
    true
}

/// A lowercase word such as `hf_transfer` or `sk-learn` is a name, not a token; a
/// token has a digit or an upper-case letter, or is long.
fn looks_like_token(body: &[u8]) -> bool {
    body.len() >= LONG_BODY
        || body
            .iter()
            .any(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
}

/// Where each prefix of `PREFIXES` holds its mark, a byte few words hold: the `_` of
/// `hf_` and `ghp_`, the `-` of `nvapi-` and `sk-`, the `A` of `AKIA`.
const MARK_AT: [usize; 5] = [2, 3, 5, 2, 0];

/// The token whose prefix holds the mark at `b[mark]`, if one does. A position starts
/// at most one prefix (each has its own first letter), and one mark is in at most one
/// spelled prefix (`ghp_`/`hf_` differ before it, as `nvapi-`/`sk-` do): a prefix is
/// looked for only around the marks, which are few, rather than at its first letter
/// (`h`, `g`, `n`, `s` are everywhere in a command).
fn token_at(b: &[u8], mark: usize) -> Option<Credential> {
    let candidates: &[usize] = match b[mark] {
        b'_' => &[1, 0],
        b'-' => &[2, 3],
        _ => &[4],
    };
    for &p in candidates {
        let (prefix, body_char, min_body) = &PREFIXES[p];
        let Some(pos) = mark.checked_sub(MARK_AT[p]) else {
            continue;
        };
        if (pos > 0 && (b[pos - 1].is_ascii_alphanumeric() || b[pos - 1] == b'_'))
            || !b[pos..].starts_with(prefix.as_bytes())
        {
            continue;
        }
        let body = &b[pos + prefix.len()..];
        let len = body.iter().take_while(|c| body_char(**c)).count();
        if len >= *min_body && looks_like_token(&body[..len]) {
            return Some(Credential {
                start: pos + prefix.len(),
                end: pos + prefix.len() + len,
                reason: format!("it holds what looks like a {prefix} access token"),
            });
        }
    }
    None
}

/// Every token of `s`, ordered by start: the marks are read in order, and a token's
/// prefix starts at a word boundary, inside no other prefix.
fn token_prefixes(s: &str) -> Vec<Credential> {
    let b = s.as_bytes();
    (0..b.len())
        .filter(|&at| is_mark(b[at]))
        .filter_map(|at| token_at(b, at))
        .collect()
}

/// A byte some token prefix holds at `MARK_AT`.
const fn is_mark(c: u8) -> bool {
    matches!(c, b'_' | b'-' | b'A')
}

fn url_userinfo(s: &str) -> Vec<Credential> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(pos) = crate::text::find_scheme_separator(s, from) {
        from = pos + 3;
        let rest = &s[from..];
        let end = rest
            .find(|c: char| {
                c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '"' || c == '\''
            })
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        if let Some(at) = authority.rfind('@') {
            if let Some(colon) = authority[..at].find(':') {
                if is_literal(&authority[colon + 1..at]) {
                    out.push(Credential {
                        start: from + colon + 1,
                        end: from + at,
                        reason: "it holds a URL with a password in its userinfo".into(),
                    });
                }
            }
        }
    }
    out
}

/// `NAME=value`, and `NAME: value` for an environment-style name (`HF_TOKEN: ...`).
/// A name that is a path segment (`/lustre/exp/token=v1/run`) assigns nothing.
fn name_assignments(s: &str) -> Vec<Credential> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    // Both separators are ASCII, so a byte search finds them on character boundaries.
    for at in crate::text::byte2_positions(b, b'=', b':') {
        let sep = b[at];
        let start = b[..at]
            .iter()
            .rposition(|c| !(c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-'))
            .map_or(0, |p| p + 1);
        if start > 0 && b[start - 1] == b'/' {
            continue;
        }
        let name = s[start..at].trim_start_matches('-');
        if name.is_empty() || !is_sensitive_name(name) {
            continue;
        }
        let mut value_at = at + 1;
        if sep == b':' {
            let environment_style = name
                .bytes()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
            if !environment_style || !s[value_at..].starts_with(' ') {
                continue;
            }
            value_at += s[value_at..].len() - s[value_at..].trim_start_matches(' ').len();
        }
        let after = &s[value_at..];
        let (from, value) = match after.chars().next() {
            Some(q @ ('"' | '\'')) => (value_at + 1, after[1..].split(q).next().unwrap_or("")),
            _ => (
                value_at,
                after
                    .split(|c: char| c.is_whitespace() || c == ';' || c == '&')
                    .next()
                    .unwrap_or(""),
            ),
        };
        if is_literal(value) {
            out.push(Credential {
                start: from,
                end: from + value.len(),
                reason: format!("it sets {name} to a literal value"),
            });
        }
    }
    out
}

/// The detectors as they were before the byte pre-filters, kept to prove the faster
/// ones report exactly the same on any string.
#[cfg(test)]
mod reference {
    use super::{is_literal, url_userinfo, Credential, PREFIXES};

    const SENSITIVE_NAMES: &[&str] = &["SECRET", "PASSWORD", "TOKEN", "API_KEY"];

    /// Why `s` holds a credential literal, or `None`.
    pub fn find_credential(s: &str) -> Option<String> {
        // Token prefixes say the most, then URL passwords, then assignments.
        token_prefixes(s)
            .into_iter()
            .chain(url_userinfo(s))
            .chain(name_assignments(s))
            .next()
            .map(|c| c.reason)
    }

    /// `redact` with the reference detectors.
    pub fn redact(s: &str) -> String {
        let found = token_prefixes(s)
            .into_iter()
            .chain(url_userinfo(s))
            .chain(name_assignments(s))
            .collect();
        super::hide(s, found)
    }

    /// A `NAME=value` pair given apart (an environment entry): sensitive name, literal value.
    pub fn sensitive_assignment(name: &str, value: &str) -> Option<String> {
        if is_sensitive_name(name) && is_literal(value) {
            return Some(format!("{name} is a credential name and its value is a literal; pass it through the platform's secret mechanism"));
        }
        find_credential(value)
    }

    /// A name that says it holds a credential: a part (split on `_`/`-`) ending in SECRET,
    /// PASSWORD or TOKEN, or API_KEY anywhere. `MAX_TOKENS` and `TOKENIZER` are not.
    fn is_sensitive_name(name: &str) -> bool {
        let ends_with = |part: &[u8], word: &str| {
            part.len() >= word.len()
                && part[part.len() - word.len()..].eq_ignore_ascii_case(word.as_bytes())
        };
        let parts = name.as_bytes().split(|c| *c == b'_' || *c == b'-');
        let mut previous: &[u8] = b"";
        for part in parts {
            if SENSITIVE_NAMES[..3].iter().any(|n| ends_with(part, n))
                || ends_with(part, "APIKEY")
                || (part.eq_ignore_ascii_case(b"KEY") && ends_with(previous, "API"))
            {
                return true;
            }
            previous = part;
        }
        false
    }

    pub fn token_prefixes(s: &str) -> Vec<Credential> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        // One pass over the bytes that can start a prefix, instead of one search per prefix;
        // each prefix starts with its own letter, so a position has one candidate.
        for (pos, first) in b.iter().enumerate() {
            let (prefix, body_char, min_body) = match first {
                b'h' => &PREFIXES[0],
                b'g' => &PREFIXES[1],
                b'n' => &PREFIXES[2],
                b's' => &PREFIXES[3],
                b'A' => &PREFIXES[4],
                _ => continue,
            };
            if (pos > 0 && (b[pos - 1].is_ascii_alphanumeric() || b[pos - 1] == b'_'))
                || !b[pos..].starts_with(prefix.as_bytes())
            {
                continue;
            }
            let body = &b[pos + prefix.len()..];
            let len = body.iter().take_while(|c| body_char(**c)).count();
            let token = &body[..len];
            // A lowercase word such as `hf_transfer` or `sk-learn` is a name, not a token.
            let looks_random = len >= super::LONG_BODY
                || token
                    .iter()
                    .any(|c| c.is_ascii_digit() || c.is_ascii_uppercase());
            if len >= *min_body && looks_random {
                out.push(Credential {
                    start: pos + prefix.len(),
                    end: pos + prefix.len() + len,
                    reason: format!("it holds what looks like a {prefix} access token"),
                });
            }
        }
        out
    }

    /// `NAME=value`, and `NAME: value` for an environment-style name (`HF_TOKEN: ...`).
    /// A name that is a path segment (`/lustre/exp/token=v1/run`) assigns nothing.
    fn name_assignments(s: &str) -> Vec<Credential> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        if memchr::memchr2(b'=', b':', b).is_none() {
            return out;
        }
        for (at, sep) in s.match_indices(['=', ':']) {
            let start = b[..at]
                .iter()
                .rposition(|c| !(c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-'))
                .map_or(0, |p| p + 1);
            if start > 0 && b[start - 1] == b'/' {
                continue;
            }
            let name = s[start..at].trim_start_matches('-');
            if name.is_empty() || !is_sensitive_name(name) {
                continue;
            }
            let mut value_at = at + 1;
            if sep == ":" {
                let environment_style = name
                    .bytes()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
                if !environment_style || !s[value_at..].starts_with(' ') {
                    continue;
                }
                value_at += s[value_at..].len() - s[value_at..].trim_start_matches(' ').len();
            }
            let after = &s[value_at..];
            let (from, value) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => (value_at + 1, after[1..].split(q).next().unwrap_or("")),
                _ => (
                    value_at,
                    after
                        .split(|c: char| c.is_whitespace() || c == ';' || c == '&')
                        .next()
                        .unwrap_or(""),
                ),
            };
            if is_literal(value) {
                out.push(Credential {
                    start: from,
                    end: from + value.len(),
                    reason: format!("it sets {name} to a literal value"),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_credentials() {
        assert!(find_credential("export HF_TOKEN=hf_AbCdEf123456789").is_some());
        assert!(find_credential("curl https://user:s3cret@example.com/x").is_some());
        assert!(find_credential("run --api-key=abc123").is_some());
        assert!(find_credential("key AKIAIOSFODNN7EXAMPLE").is_some());
        assert!(find_credential("nvapi-Abc123XYZ456def").is_some());
        assert!(find_credential("PASSWORD='hunter2' ./run").is_some());
        // Long lower-case bodies count: what a placeholder for a token looks like.
        assert!(find_credential("--token hf_abcdefghijklmnopqrstuvwxyz").is_some());
        assert!(find_credential("sk-xxxxxxxxxxxxxxxxxxxx").is_some());
        assert!(find_credential("sk-xxxxxxxxxxxxxxxxxxx").is_none()); // 19: a name
    }

    #[test]
    fn leaves_references_names_and_redactions_alone() {
        assert!(find_credential("sbatch dispatched HF_TOKEN=\"${HF_TOKEN}\"").is_none());
        assert!(find_credential("HF_TOKEN=$HF_TOKEN python x.py").is_none());
        assert!(find_credential("pip install hf_transfer sk-learn-intelex").is_none());
        assert!(find_credential("TOKEN=*** done").is_none());
        assert!(find_credential("https://github.com/org/repo").is_none());
        assert!(find_credential("ssh://git@github.com/org/repo").is_none());
        assert!(
            find_credential("python -m package.verify_results --config {config_path}").is_none()
        );
        assert!(find_credential("--max_new_tokens=512 TOKENIZER=/models/tok").is_none());
    }

    #[test]
    fn a_path_segment_assigns_nothing() {
        assert!(find_credential("/lustre/exp/token=v1/keyframes/run").is_none());
        assert!(find_credential("HF_TOKEN: hf_xyz_not_random but SECRET: abc123").is_some());
        assert!(find_credential("max_tokens: 512").is_none());
    }

    #[test]
    fn redacts_what_it_finds_and_nothing_else() {
        let cases = [
            (
                "export HF_TOKEN=hf_AbCdEf123456789 now",
                "export HF_TOKEN=*** now",
            ),
            (
                "curl https://user:s3cret@example.com/x",
                "curl https://user:***@example.com/x",
            ),
            ("PASSWORD='hunter2' ./run", "PASSWORD='***' ./run"),
            ("key AKIAIOSFODNN7EXAMPLE", "key AKIA***"),
            ("token hf_AbCdEf123456789", "token hf_***"),
            ("SECRET: abc123 rest", "SECRET: *** rest"),
            (
                "pip install hf_transfer sk-learn-intelex",
                "pip install hf_transfer sk-learn-intelex",
            ),
            (
                "/lustre/exp/token=v1/keyframes/run",
                "/lustre/exp/token=v1/keyframes/run",
            ),
            ("TOKEN=*** done", "TOKEN=*** done"),
        ];
        for (text, want) in cases {
            assert_eq!(redact(text), want, "{text:?}");
            assert!(find_credential(&redact(text)).is_none(), "{text:?}");
        }
    }

    #[test]
    fn environment_entries() {
        assert!(sensitive_assignment("WANDB_API_KEY", "0123abcd").is_some());
        assert!(sensitive_assignment("HF_TOKEN", "${HF_TOKEN}").is_none());
        assert!(sensitive_assignment("PYTHONUNBUFFERED", "1").is_none());
    }

    const FRAGMENTS: &[&str] = &[
        "hf_",
        "ghp_",
        "nvapi-",
        "sk-",
        "AKIA",
        "AbCdEf12",
        "IOSFODNN7EXAMPLE",
        "abcdefgh",
        "x",
        "Z",
        "7",
        "_",
        "-",
        "=",
        ":",
        ": ",
        "://",
        "@",
        "/",
        "?",
        "#",
        " ",
        "\t",
        "\u{a0}",
        "\u{1f}",
        "\u{2028}",
        "é",
        "€",
        "𝔘",
        "\0",
        "\"",
        "'",
        ";",
        "&",
        "$",
        "${HF_TOKEN}",
        "{job_id}",
        "{",
        "}",
        "<",
        "***",
        "REDACTED",
        "redacted",
        "TOKEN",
        "token",
        "HF_TOKEN",
        "SECRET",
        "PASSWORD",
        "password",
        "API",
        "KEY",
        "API_KEY",
        "api-key",
        "apikey",
        "MAX_TOKENS",
        "TOKENIZER",
        "user",
        "s3cret",
        "https",
        "example.com",
        "--",
        "\\",
        "\n",
    ];

    #[test]
    fn token_prefixes_agree_with_the_reference() {
        let mut cases = crate::text::fuzz::joined(FRAGMENTS, 12, 200_000, 0x9E37_79B9_7F4A_7C15);
        // Long strings, with marks in every place of a word.
        let long: Vec<String> = cases.chunks(40).map(|c| c.concat()).collect();
        cases.extend(long);
        for s in &cases {
            assert_eq!(token_prefixes(s), reference::token_prefixes(s), "{s:?}");
        }
    }

    #[test]
    fn detectors_agree_with_the_reference() {
        let mut cases = crate::text::fuzz::joined(FRAGMENTS, 12, 200_000, 0x9E37_79B9_7F4A_7C15);
        cases.extend(["", " ", "=", ":", "A", "hf_AbCdEf123456789"].map(String::from));
        let mut reasons = std::collections::HashSet::new();
        for s in &cases {
            let found = find_credential(s);
            assert_eq!(found, reference::find_credential(s), "{s:?}");
            assert_eq!(redact(s), reference::redact(s), "{s:?}");
            reasons.extend(found);
        }
        // The strings reach every detector, not only the pre-filters' early answers.
        for (prefix, _, _) in PREFIXES {
            let why = format!("it holds what looks like a {prefix} access token");
            assert!(reasons.contains(&why), "{why}");
        }
        assert!(reasons.contains("it holds a URL with a password in its userinfo"));
        assert!(reasons.iter().any(|why| why.starts_with("it sets ")));
        for pair in cases.chunks(2) {
            let (name, value) = (&pair[0], pair.get(1).map_or("", String::as_str));
            assert_eq!(
                sensitive_assignment(name, value),
                reference::sensitive_assignment(name, value),
                "{name:?} {value:?}"
            );
        }
    }
}
