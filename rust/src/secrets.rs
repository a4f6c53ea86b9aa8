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

const SENSITIVE_NAMES: &[&str] = &["SECRET", "PASSWORD", "TOKEN", "API_KEY"];

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
    // Token prefixes say the most, then URL passwords, then assignments.
    token_prefixes(s)
        .into_iter()
        .chain(url_userinfo(s))
        .chain(name_assignments(s))
        .next()
        .map(|c| c.reason)
}

/// `s` with the secret part of every credential replaced by `***`: what a job record
/// stores of a message. The same detector as `find_credential`, so what is stored
/// passes `tao.record.secret`, and what that rule leaves alone is stored as it is.
pub fn redact(s: &str) -> String {
    let mut found: Vec<Credential> = token_prefixes(s)
        .into_iter()
        .chain(url_userinfo(s))
        .chain(name_assignments(s))
        .collect();
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

fn token_prefixes(s: &str) -> Vec<Credential> {
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
        let looks_random = token
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
}
