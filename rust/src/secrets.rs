//! Credential literals in strings: `tao.execution.secret`, `tao.record.secret`, and
//! what the store redacts of a message.
//!
//! Credentials never enter a spec-bundle or a job record; one detector finds the shapes
//! SPEC lists: well-known token prefixes, URL userinfo with a password, an HTTP
//! `Authorization: Bearer|Basic` value, a `--password`/`--token`/`--secret`/`--api-key`
//! flag with a literal value, and `NAME=value` where NAME says SECRET, PASSWORD, TOKEN or
//! API_KEY. References (`${HF_TOKEN}`, `$TOKEN`, `$(cat f)`, `{job_id}`) and redaction
//! marks are not literals. This module owns the shapes; it must not know where in a
//! document a string sits (the kinds say that).

/// Which shapes a string is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shapes {
    /// Every shape: a spec-bundle's commands, `args` and environment, and what the store
    /// redacts of a message.
    All,
    /// `tao.record.secret`: token prefixes, URL userinfo and assignments. The TAO writer's
    /// own redactor leaves header values and `--secret` words alone and its records must
    /// pass; jobgate's store redacts every shape, so what it keeps passes either way.
    Record,
}

/// A token prefix as the scan finds it.
struct Prefix {
    text: &'static str,
    /// Where `text` holds the byte the scan stops at (`is_mark`): its last `_` or `-`,
    /// or the `A` of `AKIA`.
    mark_at: usize,
    /// The characters its body uses.
    body: fn(u8) -> bool,
    /// The shortest body counted.
    min_body: usize,
}

const fn prefix(
    text: &'static str,
    mark_at: usize,
    body: fn(u8) -> bool,
    min_body: usize,
) -> Prefix {
    Prefix {
        text,
        mark_at,
        body,
        min_body,
    }
}

fn alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}
fn alnum_underscore(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}
fn alnum_dash(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}
fn alnum_dash_underscore(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}
fn upper_digit(c: u8) -> bool {
    c.is_ascii_uppercase() || c.is_ascii_digit()
}

const HF: usize = 0;
const GHP: usize = 1;
const GITHUB_PAT: usize = 2;
const NVAPI: usize = 3;
const GLPAT: usize = 4;
const XOXA: usize = 5;
const XOXB: usize = 6;
const XOXP: usize = 7;
const XOXR: usize = 8;
const SK: usize = 9;
const SK_LIVE: usize = 10;
const PYPI: usize = 11;
const NPM: usize = 12;
const AKIA: usize = 13;

/// The token shapes of SPEC's table (Hugging Face, NGC, GitHub, GitLab, Slack, OpenAI
/// and Stripe, PyPI, npm, AWS), indexed by the constants above.
const PREFIXES: [Prefix; 14] = [
    prefix("hf_", 2, alnum, 8),
    prefix("ghp_", 3, alnum, 8),
    prefix("github_pat_", 10, alnum_underscore, 8),
    prefix("nvapi-", 5, alnum_dash_underscore, 8),
    prefix("glpat-", 5, alnum_dash_underscore, 8),
    prefix("xoxa-", 4, alnum_dash, 8),
    prefix("xoxb-", 4, alnum_dash, 8),
    prefix("xoxp-", 4, alnum_dash, 8),
    prefix("xoxr-", 4, alnum_dash, 8),
    prefix("sk-", 2, alnum_dash_underscore, 8),
    prefix("sk_live_", 7, alnum, 8),
    prefix("pypi-", 4, alnum_dash_underscore, 8),
    prefix("npm_", 3, alnum, 8),
    prefix("AKIA", 0, upper_digit, 16),
];

/// Where a credential's secret part sits in a string, and why it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// The byte range of the part that is secret (a token's body after its public
    /// prefix, a URL's password, a header's or a flag's value, an assignment's value).
    pub start: usize,
    pub end: usize,
    pub reason: String,
}

/// Why `s` holds a credential literal of `shapes`, or `None`.
pub fn find_credential(s: &str, shapes: Shapes) -> Option<String> {
    // Token prefixes say the most, then URL passwords, headers, flags and assignments.
    // One pass over the bytes looks for tokens at their marks, finds where the first
    // `--` that can start a credential flag is, and which bytes the other detectors
    // need: most strings hold none of them. The first token found is the first of the
    // string, and answers.
    let b = s.as_bytes();
    let all = shapes == Shapes::All;
    let mut present = 0;
    let mut flags_from = None;
    for (at, c) in b.iter().enumerate() {
        let class = CLASSES[*c as usize];
        present |= class;
        if class & MARK != 0 {
            if let Some(token) = token_at(b, at) {
                return Some(token.reason);
            }
            if *c == b'-' && all && flags_from.is_none() && credential_flag_end(b, at).is_some() {
                flags_from = Some(at);
            }
        }
    }
    let separated = present & SEPARATOR != 0;
    let first = |found: Vec<Credential>| found.into_iter().next();
    if separated {
        if let Some(c) = first(url_userinfo(s)) {
            return Some(c.reason);
        }
        if all && present & Z_LETTER != 0 {
            if let Some(c) = first(authorization_values(s)) {
                return Some(c.reason);
            }
        }
    }
    if let Some(from) = flags_from {
        if let Some(c) = (from..b.len()).find_map(|at| flag_at(s, at)) {
            return Some(c.reason);
        }
    }
    if !separated {
        return None;
    }
    first(name_assignments(s)).map(|c| c.reason)
}

/// The credential in one element of a command's `args`, given the element before it:
/// a flag and its value are two elements (`["--password", "hunter2"]`), and the value
/// is the credential.
pub fn find_credential_in_arg(previous: Option<&str>, arg: &str) -> Option<String> {
    if let Some(why) = find_credential(arg, Shapes::All) {
        return Some(why);
    }
    let flag = previous.filter(|p| is_credential_flag(p))?;
    is_flag_value(arg).then(|| format!("it is the literal value of {flag}, the argument before it"))
}

/// A token body this long counts even in lower case (`hf_` and twenty letters): the
/// names that share a prefix (`hf_transfer`, `sk-learn-intelex`) are short words,
/// placeholders written for a token (`hf_xxxxxxxxxxxxxxxxxxxxxxxx`) are not.
const LONG_BODY: usize = 20;

/// A byte some token prefix holds at its `mark_at`, which `is_mark` tells.
const MARK: u8 = 1;
/// A byte a URL's userinfo, a header or an assignment needs: a URL's userinfo follows
/// the `:` of `://`, a header's name ends in `:`, and an assignment is made by `=` or `:`.
const SEPARATOR: u8 = 2;
/// A letter every sensitive name holds: each word has a C (SECRET), W (PASSWORD) or K
/// (TOKEN, KEY), in either case.
const NAME_LETTER: u8 = 4;
/// The `z` of `Authorization`, a letter few strings hold.
const Z_LETTER: u8 = 8;

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
        if byte.eq_ignore_ascii_case(&b'Z') {
            table[c] |= Z_LETTER;
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
/// stores of a message. Every shape is hidden, so what is stored passes both
/// `tao.execution.secret` and `tao.record.secret`, and what the first leaves alone is
/// stored as it is.
pub fn redact(s: &str) -> String {
    let found = token_prefixes(s)
        .into_iter()
        .chain(url_userinfo(s))
        .chain(authorization_values(s))
        .chain(flag_values(s))
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
    find_credential(value, Shapes::All)
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

/// A value that is really there: not empty, not a shell reference (`$X`, `${X}`,
/// `$(cmd)`, `` `cmd` ``) or placeholder (`{job_id}`, `<token>`), not a redaction mark.
fn is_literal(value: &str) -> bool {
    let v = value.trim().trim_matches(|c| c == '"' || c == '\'');
    if v.is_empty()
        || v.starts_with('$')
        || v.starts_with('`')
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

/// A byte some token prefix holds at its `mark_at`: few words hold one, and those that
/// do seldom hold the byte a prefix has before it.
const fn is_mark(c: u8) -> bool {
    matches!(c, b'_' | b'-' | b'A')
}

/// The prefixes whose mark `b[mark]` can be, told by the mark and the byte before it:
/// prefixes that share a mark differ in that byte, except `nvapi-` and `pypi-`. A
/// prefix is looked for only around its marks, rather than at its first letter (`h`,
/// `g`, `n`, `s`, `p` are everywhere in a command).
fn candidates(b: &[u8], mark: usize) -> &'static [usize] {
    let before = mark.checked_sub(1).map_or(0, |i| b[i]);
    match (b[mark], before) {
        (b'A', _) => &[AKIA],
        (b'_', b'f') => &[HF],
        (b'_', b'p') => &[GHP],
        (b'_', b't') => &[GITHUB_PAT],
        (b'_', b'e') => &[SK_LIVE],
        (b'_', b'm') => &[NPM],
        (b'-', b'k') => &[SK],
        (b'-', b'i') => &[NVAPI, PYPI],
        (b'-', b't') => &[GLPAT],
        (b'-', b'a') => &[XOXA],
        (b'-', b'b') => &[XOXB],
        (b'-', b'p') => &[XOXP],
        (b'-', b'r') => &[XOXR],
        _ => &[],
    }
}

/// Whether a word can start at `b[at]`: a prefix inside a word (`my_hf_x`) is none.
fn starts_word(b: &[u8], at: usize) -> bool {
    at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_')
}

/// The token whose prefix holds the mark at `b[mark]`, if one does. A position starts
/// at most one prefix, and a mark is in at most one spelled prefix.
fn token_at(b: &[u8], mark: usize) -> Option<Credential> {
    for &p in candidates(b, mark) {
        let prefix = &PREFIXES[p];
        let Some(pos) = mark.checked_sub(prefix.mark_at) else {
            continue;
        };
        if !starts_word(b, pos) || !b[pos..].starts_with(prefix.text.as_bytes()) {
            continue;
        }
        let start = pos + prefix.text.len();
        let len = b[start..].iter().take_while(|c| (prefix.body)(**c)).count();
        if len >= prefix.min_body && looks_like_token(&b[start..start + len]) {
            return Some(Credential {
                start,
                end: start + len,
                reason: format!("it holds what looks like a {} access token", prefix.text),
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

/// Spaces and tabs from `at` on: where the next word starts.
fn skip_blanks(b: &[u8], at: usize) -> usize {
    at + b[at..]
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t'))
        .count()
}

/// The word that starts at `s[at]`, and where its text starts: inside its quotes when
/// it is quoted, else up to a blank, `;` or `&`.
fn word_at(s: &str, at: usize) -> (usize, &str) {
    let after = &s[at..];
    match after.chars().next() {
        Some(q @ ('"' | '\'')) => (at + 1, after[1..].split(q).next().unwrap_or("")),
        _ => (
            at,
            after
                .split(|c: char| c.is_whitespace() || c == ';' || c == '&')
                .next()
                .unwrap_or(""),
        ),
    }
}

/// An HTTP `Authorization: Bearer …` or `Basic …` value, as in `curl -H` or a JSON or
/// Python map of headers (`"Authorization": "Bearer …"`). The credential is the
/// token68 of RFC 7235, so a reference (`Bearer $TOKEN`, `Bearer {token}`) holds none.
fn authorization_values(s: &str) -> Vec<Credential> {
    const NAME: &[u8] = b"authorization";
    let b = s.as_bytes();
    let mut out = Vec::new();
    for colon in crate::text::byte_positions(b, b':') {
        let end = match colon.checked_sub(1).map(|i| b[i]) {
            Some(b'"' | b'\'') => colon - 1,
            _ => colon,
        };
        let Some(start) = end.checked_sub(NAME.len()) else {
            continue;
        };
        if !b[start..end].eq_ignore_ascii_case(NAME)
            || (start > 0 && b[start - 1].is_ascii_alphanumeric())
        {
            continue;
        }
        let mut at = skip_blanks(b, colon + 1);
        if matches!(b.get(at), Some(b'"' | b'\'')) {
            at += 1;
        }
        let scheme = ["Bearer", "Basic"].into_iter().find(|scheme| {
            b[at..].len() > scheme.len()
                && b[at..at + scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
                && matches!(b[at + scheme.len()], b' ' | b'\t')
        });
        let Some(scheme) = scheme else {
            continue;
        };
        let from = skip_blanks(b, at + scheme.len());
        let token68 = |c: &u8| c.is_ascii_alphanumeric() || b"-._~+/".contains(c);
        let mut to = from + b[from..].iter().take_while(|c| token68(c)).count();
        to += b[to..].iter().take_while(|c| **c == b'=').count();
        if to > from && is_literal(&s[from..to]) {
            out.push(Credential {
                start: from,
                end: to,
                reason: format!("it holds a literal HTTP Authorization: {scheme} credential"),
            });
        }
    }
    out
}

/// A credential flag: `--password`, `--token`, `--secret`, `--api-key` (or `--api_key`,
/// as Python's argparse users spell it), in lower case as command lines write them. A
/// flag that names where a credential is (`--token-file`, `--password-stdin`) is
/// another flag.
pub fn is_credential_flag(word: &str) -> bool {
    credential_flag_end(word.as_bytes(), 0) == Some(word.len())
}

/// Where the credential flag whose `--` is at `b[at]` ends, if one is there: its first
/// letter picks the one name it can be, so most flags are told apart in a compare.
#[inline]
fn credential_flag_end(b: &[u8], at: usize) -> Option<usize> {
    let name = b.get(at..)?.strip_prefix(b"--")?;
    let len = match name.first()? {
        b'p' if name.starts_with(b"password") => 8,
        b't' if name.starts_with(b"token") => 5,
        b's' if name.starts_with(b"secret") => 6,
        b'a' if name.starts_with(b"api-key") || name.starts_with(b"api_key") => 7,
        _ => return None,
    };
    (!name.get(len).is_some_and(is_word_byte)).then_some(at + 2 + len)
}

/// A byte of a command-line word such as a flag's name.
fn is_word_byte(c: &u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_')
}

/// A value given to a flag: a literal, and not the next flag (`--token --verbose`).
fn is_flag_value(value: &str) -> bool {
    is_literal(value) && !value.trim_start_matches(['"', '\'']).starts_with('-')
}

/// `--password hunter2`: a credential flag and its value as the next word, in a command
/// line or in a list of words written out (`['--password', 'hunter2']`, as Python
/// prints an argv). `--password=hunter2` is an assignment (`name_assignments`).
fn flag_values(s: &str) -> Vec<Credential> {
    (0..s.len()).filter_map(|at| flag_at(s, at)).collect()
}

/// The literal value of the credential flag whose `--` starts at `s[at]`, if one does.
fn flag_at(s: &str, at: usize) -> Option<Credential> {
    let b = s.as_bytes();
    let name_end = credential_flag_end(b, at)?;
    if at > 0 && is_word_byte(&b[at - 1]) {
        return None;
    }
    let flag = &s[at..name_end];
    // The value is the next word: after blanks, or after a list's comma when the flag
    // is quoted. With no gap, `--password=…` is an assignment.
    let quote = at
        .checked_sub(1)
        .map(|i| b[i])
        .filter(|c| matches!(c, b'"' | b'\''));
    let closed = quote.is_some() && b.get(name_end) == quote.as_ref();
    let after = name_end + usize::from(closed);
    let gap = skip_blanks(b, after);
    let value_at = match b.get(gap) {
        Some(b',') if closed => skip_blanks(b, gap + 1),
        Some(_) if gap > after => gap,
        _ => return None,
    };
    let (from, value) = word_at(s, value_at);
    is_flag_value(value).then(|| Credential {
        start: from,
        end: from + value.len(),
        reason: format!("it gives {flag} a literal value"),
    })
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
        let (from, value) = word_at(s, value_at);
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
    use super::{
        authorization_values, flag_values, is_literal, url_userinfo, Credential, Shapes, PREFIXES,
    };

    const SENSITIVE_NAMES: &[&str] = &["SECRET", "PASSWORD", "TOKEN", "API_KEY"];

    /// Why `s` holds a credential literal of `shapes`, or `None`.
    pub fn find_credential(s: &str, shapes: Shapes) -> Option<String> {
        // Token prefixes say the most, then URL passwords, headers, flags, assignments.
        let all = shapes == Shapes::All;
        token_prefixes(s)
            .into_iter()
            .chain(url_userinfo(s))
            .chain(if all {
                authorization_values(s)
            } else {
                Vec::new()
            })
            .chain(if all { flag_values(s) } else { Vec::new() })
            .chain(name_assignments(s))
            .next()
            .map(|c| c.reason)
    }

    /// `redact` with the reference detectors.
    pub fn redact(s: &str) -> String {
        let found = token_prefixes(s)
            .into_iter()
            .chain(url_userinfo(s))
            .chain(authorization_values(s))
            .chain(flag_values(s))
            .chain(name_assignments(s))
            .collect();
        super::hide(s, found)
    }

    /// A `NAME=value` pair given apart (an environment entry): sensitive name, literal value.
    pub fn sensitive_assignment(name: &str, value: &str) -> Option<String> {
        if is_sensitive_name(name) && is_literal(value) {
            return Some(format!("{name} is a credential name and its value is a literal; pass it through the platform's secret mechanism"));
        }
        find_credential(value, Shapes::All)
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

    /// Every prefix tried at every position.
    pub fn token_prefixes(s: &str) -> Vec<Credential> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        for pos in 0..b.len() {
            if pos > 0 && (b[pos - 1].is_ascii_alphanumeric() || b[pos - 1] == b'_') {
                continue;
            }
            for prefix in &PREFIXES {
                if !b[pos..].starts_with(prefix.text.as_bytes()) {
                    continue;
                }
                let body = &b[pos + prefix.text.len()..];
                let len = body.iter().take_while(|c| (prefix.body)(**c)).count();
                let token = &body[..len];
                // A lowercase word such as `hf_transfer` or `sk-learn` is a name, not a token.
                let looks_random = len >= super::LONG_BODY
                    || token
                        .iter()
                        .any(|c| c.is_ascii_digit() || c.is_ascii_uppercase());
                if len >= prefix.min_body && looks_random {
                    out.push(Credential {
                        start: pos + prefix.text.len(),
                        end: pos + prefix.text.len() + len,
                        reason: format!("it holds what looks like a {} access token", prefix.text),
                    });
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

    fn found(s: &str) -> bool {
        find_credential(s, Shapes::All).is_some()
    }

    #[test]
    fn finds_credentials() {
        assert!(found("export HF_TOKEN=hf_AbCdEf123456789"));
        assert!(found("curl https://user:s3cret@example.com/x"));
        assert!(found("run --api-key=abc123"));
        assert!(found("key AKIAIOSFODNN7EXAMPLE"));
        assert!(found("nvapi-Abc123XYZ456def"));
        assert!(found("PASSWORD='hunter2' ./run"));
        // Long lower-case bodies count: what a placeholder for a token looks like.
        assert!(found("--token hf_abcdefghijklmnopqrstuvwxyz"));
        assert!(found("sk-xxxxxxxxxxxxxxxxxxxx"));
        assert!(!found("sk-xxxxxxxxxxxxxxxxxxx")); // 19: a name
    }

    #[test]
    fn finds_every_token_shape_of_the_table() {
        let tokens = [
            ("hf_", "hf_AbCdEf123456789"),
            ("nvapi-", "nvapi-Abc123XYZ456def"),
            ("ghp_", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
            (
                "github_pat_",
                "github_pat_11ABCDEFG0abcdefghij_KLMNOPqrstuvwxyz0123456789",
            ),
            ("glpat-", "glpat-xY9zAb3Cd-EfGh1JkL2m"),
            ("xoxa-", "xoxa-2-1234567890-abcdefABCDEF"),
            (
                "xoxb-",
                "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            ),
            ("xoxp-", "xoxp-123456789012-123456789012-abcdef0123456789"),
            ("xoxr-", "xoxr-1234567890-AbCdEfGh"),
            ("sk-", "sk-proj-Ab12Cd34Ef56Gh78"),
            ("sk_live_", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
            ("pypi-", "pypi-AgEIcHlwaS5vcmcCJGE0ZDRiYjQw"),
            ("npm_", "npm_aBcDeF0123456789aBcDeF0123456789aBcD"),
            ("AKIA", "AKIAIOSFODNN7EXAMPLE"),
        ];
        for (prefix, token) in tokens {
            let s = format!("step failed: {token} rejected");
            let why = format!("it holds what looks like a {prefix} access token");
            assert_eq!(
                find_credential(&s, Shapes::All).as_deref(),
                Some(why.as_str()),
                "{s}"
            );
            assert_eq!(
                find_credential(&s, Shapes::Record).as_deref(),
                Some(why.as_str()),
                "{s}"
            );
            assert_eq!(redact(&s), format!("step failed: {prefix}*** rejected"));
        }
    }

    #[test]
    fn leaves_references_names_and_redactions_alone() {
        assert!(!found("sbatch dispatched HF_TOKEN=\"${HF_TOKEN}\""));
        assert!(!found("HF_TOKEN=$HF_TOKEN python x.py"));
        assert!(!found("pip install hf_transfer sk-learn-intelex"));
        assert!(!found("TOKEN=*** done"));
        assert!(!found("https://github.com/org/repo"));
        assert!(!found("ssh://git@github.com/org/repo"));
        assert!(!found(
            "python -m package.verify_results --config {config_path}"
        ));
        assert!(!found("--max_new_tokens=512 TOKENIZER=/models/tok"));
        // Words that share a new prefix's letters are names.
        assert!(!found(
            "npm_config_registry=https://registry.npmjs.org npm_package_version=1"
        ));
        assert!(!found(
            "pip install --index-url https://pypi-mirror.internal/simple pypi-simple"
        ));
        assert!(!found(
            "slack xoxb-bot github_pat_file glpat-helper sk_live_mode"
        ));
        assert!(!found("my_hf_AbCdEf123456789 xnpm_aBcDeF0123456789"));
    }

    #[test]
    fn a_path_segment_assigns_nothing() {
        assert!(!found("/lustre/exp/token=v1/keyframes/run"));
        assert!(found("HF_TOKEN: hf_xyz_not_random but SECRET: abc123"));
        assert!(!found("max_tokens: 512"));
    }

    #[test]
    fn finds_authorization_header_values() {
        let cases = [
            (
                "curl -H 'Authorization: Bearer abc123def' https://x",
                "curl -H 'Authorization: Bearer ***' https://x",
                "Bearer",
            ),
            (
                "curl -H \"authorization:basic dXNlcjpwYXNz\" x",
                "curl -H \"authorization:basic ***\" x",
                "Basic",
            ),
            (
                "headers={\"Authorization\": \"Bearer eyJ0.eyJz.c2ln\"}",
                "headers={\"Authorization\": \"Bearer ***\"}",
                "Bearer",
            ),
            (
                "Proxy-Authorization: Basic Zm9vOmJhcg== sent",
                "Proxy-Authorization: Basic *** sent",
                "Basic",
            ),
        ];
        for (s, redacted, scheme) in cases {
            let why = format!("it holds a literal HTTP Authorization: {scheme} credential");
            assert_eq!(find_credential(s, Shapes::All), Some(why), "{s}");
            assert_eq!(redact(s), redacted);
            assert_eq!(find_credential(&redact(s), Shapes::All), None, "{s}");
        }
        for s in [
            "curl -H \"Authorization: Bearer $TOKEN\" x",
            "curl -H \"Authorization: Bearer ${HF_TOKEN}\" x",
            "Authorization: Bearer {token}",
            "Authorization: Bearer <token>",
            "Authorization: Bearer ***",
            "Authorization: Token abc123",
            "Authorization: Bearer",
            "XAuthorization: Bearer abc123",
        ] {
            assert_eq!(find_credential(s, Shapes::All), None, "{s}");
            assert_eq!(redact(s), s);
        }
    }

    #[test]
    fn finds_credential_flags_with_literal_values() {
        let cases = [
            (
                "login --password hunter2 now",
                "login --password *** now",
                "--password",
            ),
            ("run --token  abc123", "run --token  ***", "--token"),
            ("run --secret 'a b c' x", "run --secret '***' x", "--secret"),
            (
                "run --api-key \"k-123\"",
                "run --api-key \"***\"",
                "--api-key",
            ),
            ("run --api_key k123", "run --api_key ***", "--api_key"),
            (
                "Command '['tool', '--password', 'hunter2']' returned 1",
                "Command '['tool', '--password', '***']' returned 1",
                "--password",
            ),
        ];
        for (s, redacted, flag) in cases {
            let why = format!("it gives {flag} a literal value");
            assert_eq!(find_credential(s, Shapes::All), Some(why), "{s}");
            assert_eq!(find_credential(s, Shapes::Record), None, "{s}");
            assert_eq!(redact(s), redacted);
        }
        // The `=` form is an assignment, a record's shape too.
        let why = Some("it sets password to a literal value".to_string());
        assert_eq!(
            find_credential("login --password=hunter2", Shapes::All),
            why
        );
        assert_eq!(
            find_credential("login --password=hunter2", Shapes::Record),
            why
        );
        assert_eq!(
            redact("login --password=hunter2 x"),
            "login --password=*** x"
        );
        for s in [
            "login --password $PASSWORD",
            "login --password \"${PASSWORD}\"",
            "login --password \"$(cat /run/secrets/pw)\"",
            "login --password $(cat /run/secrets/pw)",
            "login --password `cat pw`",
            "run --token {job_id}",
            "run --token <redacted>",
            "run --token --verbose",
            "run --token",
            "run --token-file /run/secrets/token",
            "docker login --password-stdin",
            "run --max-new-tokens 512 --tokenizer t5",
            "run x--password hunter2",
        ] {
            assert_eq!(find_credential(s, Shapes::All), None, "{s}");
            assert_eq!(redact(s), s);
        }
    }

    #[test]
    fn an_arg_after_a_credential_flag_is_its_value() {
        let why = Some("it is the literal value of --password, the argument before it".to_string());
        assert_eq!(find_credential_in_arg(Some("--password"), "hunter2"), why);
        assert_eq!(
            find_credential_in_arg(Some("--password"), "${PASSWORD}"),
            None
        );
        assert_eq!(
            find_credential_in_arg(Some("--password"), "--verbose"),
            None
        );
        assert_eq!(
            find_credential_in_arg(Some("--token-file"), "/run/token"),
            None
        );
        assert_eq!(find_credential_in_arg(Some("--top-k"), "200"), None);
        assert_eq!(find_credential_in_arg(None, "hunter2"), None);
        // What the argument holds itself says the most.
        assert_eq!(
            find_credential_in_arg(Some("--token"), "hf_AbCdEf123456789"),
            Some("it holds what looks like a hf_ access token".to_string())
        );
    }

    #[test]
    fn records_are_held_to_tokens_urls_and_assignments() {
        let record = [
            "pull https://bob:hunter2@registry.example.com/x",
            "export HF_TOKEN=abc",
            "SECRET: abc123",
            "token xoxb-123456789012-AbCdEf",
        ];
        for s in record {
            assert!(find_credential(s, Shapes::Record).is_some(), "{s}");
        }
        // Shapes the TAO writer's redactor leaves alone; the store hides them all.
        for s in [
            "curl -H 'Authorization: Bearer abc123'",
            "tool --secret s3cr3t",
        ] {
            assert_eq!(find_credential(s, Shapes::Record), None, "{s}");
            assert!(find_credential(s, Shapes::All).is_some(), "{s}");
            assert_eq!(find_credential(&redact(s), Shapes::All), None, "{s}");
        }
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
            ("--token hf_AbCdEf123456789", "--token ***"),
            (
                "Authorization: Bearer xoxb-1234-AbCdEfGh",
                "Authorization: Bearer ***",
            ),
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
            assert!(
                find_credential(&redact(text), Shapes::All).is_none(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn environment_entries() {
        assert!(sensitive_assignment("WANDB_API_KEY", "0123abcd").is_some());
        assert!(sensitive_assignment("HF_TOKEN", "${HF_TOKEN}").is_none());
        assert!(sensitive_assignment("PYTHONUNBUFFERED", "1").is_none());
        assert!(sensitive_assignment("CURL_HEADER", "Authorization: Bearer abc123").is_some());
    }

    #[test]
    fn every_prefix_is_found_at_its_mark() {
        for (p, prefix) in PREFIXES.iter().enumerate() {
            let b = prefix.text.as_bytes();
            assert!(is_mark(b[prefix.mark_at]), "{}", prefix.text);
            assert!(
                candidates(b, prefix.mark_at).contains(&p),
                "{}",
                prefix.text
            );
        }
    }

    const FRAGMENTS: &[&str] = &[
        "hf_",
        "ghp_",
        "github_pat_",
        "nvapi-",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "xox",
        "sk-",
        "sk_live_",
        "pypi-",
        "npm_",
        "AKIA",
        "AbCdEf12",
        "IOSFODNN7EXAMPLE",
        "abcdefgh",
        "x",
        "Z",
        "7",
        "_",
        "-",
        "--",
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
        ",",
        ";",
        "&",
        "$",
        "`",
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
        "secret",
        "PASSWORD",
        "password",
        "--password",
        "--token ",
        "API",
        "KEY",
        "API_KEY",
        "api-key",
        "apikey",
        "Authorization",
        "authorization: ",
        "Bearer ",
        "basic",
        "==",
        "MAX_TOKENS",
        "TOKENIZER",
        "user",
        "s3cret",
        "https",
        "example.com",
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
            let found = find_credential(s, Shapes::All);
            assert_eq!(found, reference::find_credential(s, Shapes::All), "{s:?}");
            let in_record = find_credential(s, Shapes::Record);
            assert_eq!(
                in_record,
                reference::find_credential(s, Shapes::Record),
                "{s:?}"
            );
            assert_eq!(redact(s), reference::redact(s), "{s:?}");
            reasons.extend(found);
        }
        // The strings reach every detector, not only the pre-filters' early answers.
        for prefix in [
            "hf_",
            "ghp_",
            "github_pat_",
            "nvapi-",
            "glpat-",
            "xoxb-",
            "sk-",
            "sk_live_",
            "pypi-",
            "npm_",
            "AKIA",
        ] {
            let why = format!("it holds what looks like a {prefix} access token");
            assert!(reasons.contains(&why), "{why}");
        }
        assert!(reasons.contains("it holds a URL with a password in its userinfo"));
        assert!(reasons
            .iter()
            .any(|why| why.starts_with("it holds a literal HTTP Authorization")));
        assert!(reasons.iter().any(|why| why.starts_with("it gives --")));
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
