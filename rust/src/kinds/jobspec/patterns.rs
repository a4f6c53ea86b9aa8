//! The string patterns of a JobSpec (names, projects, recipe names, experiment
//! paths, artifact and data references, plugin digests, gate metrics), each reported
//! under its named rule, and how the rules read a string field.

use crate::node::Value;
use crate::rules::Rule;
use crate::schema::Pattern;
use crate::text::{
    after_segment, find_scheme_separator, has_byte, is_safe_segment_bytes, py_is_blank, py_trim,
    safe_run, safe_segment, segment_len,
};

pub static NAME: Pattern = Pattern::new(Rule::ForgeName, safe_segment);
pub static PROJECT: Pattern = Pattern::new(Rule::ForgeProject, project);
pub static RECIPE_NAME: Pattern = Pattern::new(Rule::ForgeRecipeName, recipe_name);
pub static EXP: Pattern = Pattern::new(Rule::ForgeSourceExp, exp_path);
pub static ENTRYPOINT: Pattern = Pattern::new(Rule::ForgeSourceEntrypoint, entrypoint);
pub static INIT_FROM: Pattern = Pattern::new(Rule::ForgeModelInitFrom, init_from);
pub static PLUGIN_DIGEST: Pattern = Pattern::new(Rule::ForgePluginsDigest, plugin_digest);
pub static NOT_BLANK: Pattern = Pattern::new(Rule::SchemaMinLength, not_blank);
pub static CORE_VERSION: Pattern = Pattern::new(Rule::ForgeProvenanceCoreVersion, not_blank);
pub static OPTIONAL_SEGMENT: Pattern = Pattern::new(Rule::SchemaPattern, optional_segment);
pub static GATE_METRIC: Pattern = Pattern::new(Rule::SchemaPattern, gate_metric);

/// A string field as the rules read it: stripped as Python strips, and `""` when it is
/// missing or not a string (a type error the shape already reports).
pub fn str_of<'i>(v: Option<Value<'_, 'i>>) -> &'i str {
    v.and_then(|v| v.as_str()).map_or("", py_trim)
}

/// `metadata.project` as every consumer reads it: the grant, the quota, per-project
/// severities and the record. One reading, so no spelling can pass the grant under one
/// name and be charged under another.
pub fn project_of<'i>(metadata_project: Option<Value<'_, 'i>>) -> &'i str {
    str_of(metadata_project)
}

fn not_blank(s: &str) -> Result<(), String> {
    if py_is_blank(s) {
        Err("is blank".into())
    } else {
        Ok(())
    }
}

fn optional_segment(s: &str) -> Result<(), String> {
    if s.is_empty() {
        Ok(())
    } else {
        safe_segment(s)
    }
}

fn project(s: &str) -> Result<(), String> {
    let ok = s.is_empty() || (s != "." && s != ".." && safe_run(s.as_bytes()) == s.len());
    if ok {
        Ok(())
    } else {
        Err(
            "is not a project name: only letters, digits, '.', '_' and '-', and not '.' or '..'"
                .into(),
        )
    }
}

fn recipe_name(s: &str) -> Result<(), String> {
    match after_segment(s.as_bytes(), b'/') {
        Some(rest) if is_safe_segment_bytes(rest) => Ok(()),
        _ => Err("is not <framework>/<method>, two safe segments such as nemo-rl/grpo".into()),
    }
}

fn exp_path(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.first() == Some(&b'/') {
        return Err("is absolute; give the experiment relative to the repository, such as experiments/my-grpo".into());
    }
    // Trailing slashes do not count; `/` is one byte, so trimming bytes trims characters.
    let end = b.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1);
    if end == 0 {
        return Err("is empty; name the experiment directory, such as experiments/my-grpo".into());
    }
    // Segment by segment: each safe, each but the last followed by one `/`.
    let mut rest = &b[..end];
    let ok = loop {
        let n = segment_len(rest);
        match rest.get(n) {
            _ if n == 0 => break false,
            None => break true,
            Some(b'/') => rest = &rest[n + 1..],
            Some(_) => break false,
        }
    };
    if ok {
        Ok(())
    } else {
        Err("has an unsafe segment: each must start with a letter or digit and hold only letters, digits, '.', '_' and '-'".into())
    }
}

fn entrypoint(s: &str) -> Result<(), String> {
    if py_is_blank(s) {
        Ok(())
    } else {
        Err("overrides the recipe's entrypoint; leave it empty, or use the custom/custom recipe to run your own command".into())
    }
}

/// `run/<run_id>/<kind>` with an optional `@step=<N>`.
pub fn is_init_from(s: &str) -> bool {
    let Some(rest) = s.as_bytes().strip_prefix(b"run/") else {
        return false;
    };
    // The segments end at the first byte that cannot be in one, which must be the
    // `/` between them, then the end or the `@` of the step.
    let Some(kind) = after_segment(rest, b'/') else {
        return false;
    };
    let n = segment_len(kind);
    if n == 0 {
        return false;
    }
    match &kind[n..] {
        [] => true,
        [b'@', step @ ..] => match step.strip_prefix(b"step=") {
            Some(digits) => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
            None => false,
        },
        _ => false,
    }
}

fn init_from(s: &str) -> Result<(), String> {
    if py_is_blank(s) || is_init_from(s) {
        Ok(())
    } else {
        Err("is not an artifact reference: run/<run_id>/<kind>, optionally @step=<N>".into())
    }
}

fn plugin_digest(s: &str) -> Result<(), String> {
    if py_trim(s).starts_with("sha256:") {
        Ok(())
    } else {
        Err("is not a plugin digest: it must start with sha256:".into())
    }
}

fn gate_metric(s: &str) -> Result<(), String> {
    if has_byte(s, b'/') {
        Ok(())
    } else {
        Err("is not <benchmark>/<metric key>, such as gsm8k/exact_match,strict-match".into())
    }
}

/// `<owner>/<name>[@version]`, each a safe segment.
pub fn is_data_ref(s: &str, version: Version) -> bool {
    // A safe segment holds neither `/` nor `@`: the name ends at the end or at the `@`.
    let Some(name) = after_segment(s.as_bytes(), b'/') else {
        return false;
    };
    let n = segment_len(name);
    if n == 0 {
        return false;
    }
    match &name[n..] {
        [] => version != Version::Required,
        [b'@', v @ ..] => version != Version::Forbidden && is_safe_segment_bytes(v),
        _ => false,
    }
}

#[derive(Clone, Copy, PartialEq)]
pub enum Version {
    Optional,
    Required,
    Forbidden,
}

/// A path or URL given where a governed reference belongs.
pub fn is_host_path(s: &str) -> bool {
    s.starts_with('/')
        || s.starts_with("./")
        || s.starts_with("../")
        || s.starts_with('~')
        || find_scheme_separator(s, 0).is_some()
        || s.starts_with("file:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::fuzz;

    #[test]
    fn init_from_references() {
        assert!(is_init_from("run/abc/checkpoint"));
        assert!(is_init_from("run/abc/checkpoint@step=100"));
        for bad in [
            "run/abc",
            "runs/a/b",
            "run/a/b@step=",
            "run/a/b@epoch=1",
            "run//a/b",
            "run/../b",
        ] {
            assert!(!is_init_from(bad), "{bad}");
        }
    }

    #[test]
    fn data_references() {
        assert!(is_data_ref("alice/gsm8k-zh@v2", Version::Optional));
        assert!(is_data_ref("alice/handbook", Version::Optional));
        assert!(!is_data_ref("alice/handbook", Version::Required));
        assert!(!is_data_ref("alice/handbook@v1", Version::Forbidden));
        assert!(!is_data_ref("alice", Version::Optional));
        assert!(is_host_path("/data/x"));
        assert!(is_host_path("s3://bucket/x"));
    }

    /// The patterns as they were written before they were read in one pass: the
    /// reference the one-pass forms must agree with on every string.
    mod reference {
        use crate::text::py_trim;

        fn is_safe_segment(s: &str) -> bool {
            let b = s.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }

        pub fn project(s: &str) -> bool {
            s.is_empty()
                || (s != "."
                    && s != ".."
                    && s.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')))
        }

        pub fn recipe_name(s: &str) -> bool {
            matches!(s.split_once('/'), Some((a, b)) if is_safe_segment(a) && is_safe_segment(b))
        }

        /// 0: accepted, 1: absolute, 2: empty, 3: an unsafe segment.
        pub fn exp_path(s: &str) -> u8 {
            if s.starts_with('/') {
                return 1;
            }
            let trimmed = s.trim_end_matches('/');
            if trimmed.is_empty() {
                return 2;
            }
            if trimmed.split('/').all(is_safe_segment) {
                0
            } else {
                3
            }
        }

        pub fn is_init_from(s: &str) -> bool {
            let body = match s.split_once('@') {
                Some((body, q)) => match q.strip_prefix("step=") {
                    Some(n) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => body,
                    _ => return false,
                },
                None => s,
            };
            match body.split_once('/') {
                Some(("run", rest)) => matches!(
                    rest.split_once('/'),
                    Some((run_id, kind)) if is_safe_segment(run_id) && is_safe_segment(kind)
                ),
                _ => false,
            }
        }

        pub fn blank(s: &str) -> bool {
            py_trim(s).is_empty()
        }

        pub fn is_data_ref(s: &str, version: super::Version) -> bool {
            use super::Version;
            let (id, ver) = match s.split_once('@') {
                Some((id, v)) => (id, Some(v)),
                None => (s, None),
            };
            let version_ok = match (version, ver) {
                (Version::Forbidden, Some(_)) | (Version::Required, None) => false,
                (_, Some(v)) => is_safe_segment(v),
                (_, None) => true,
            };
            version_ok
                && matches!(id.split_once('/'), Some((o, n)) if is_safe_segment(o) && is_safe_segment(n))
        }
    }

    #[test]
    fn one_pass_patterns_agree_with_the_reference() {
        let seeds = [
            "experiments/my-grpo",
            "experiments/my-grpo/",
            "/abs/x",
            "a//b",
            "./a",
            "nemo-rl/grpo",
            "custom/custom",
            "run/sft-0042/checkpoint@step=1200",
            "run/abc/checkpoint",
            "run/a/b@step=",
            "alice/gsm8k-zh@v2",
            "alice/handbook",
            "my-lab",
            ".",
            "..",
            "",
            " ",
        ];
        let strings = fuzz::strings(&seeds, 60_000);
        for s in &strings {
            let s = s.as_str();
            assert_eq!(project(s).is_ok(), reference::project(s), "project {s:?}");
            assert_eq!(
                recipe_name(s).is_ok(),
                reference::recipe_name(s),
                "recipe_name {s:?}"
            );
            let exp = match exp_path(s) {
                Ok(()) => 0,
                Err(why) if why.starts_with("is absolute") => 1,
                Err(why) if why.starts_with("is empty") => 2,
                Err(_) => 3,
            };
            assert_eq!(exp, reference::exp_path(s), "exp_path {s:?}");
            assert_eq!(
                is_init_from(s),
                reference::is_init_from(s),
                "init_from {s:?}"
            );
            assert_eq!(
                not_blank(s).is_err(),
                reference::blank(s),
                "not_blank {s:?}"
            );
            assert_eq!(
                entrypoint(s).is_ok(),
                reference::blank(s),
                "entrypoint {s:?}"
            );
            assert_eq!(
                init_from(s).is_ok(),
                reference::blank(s) || reference::is_init_from(s),
                "init_from {s:?}"
            );
            for v in [Version::Optional, Version::Required, Version::Forbidden] {
                assert_eq!(
                    is_data_ref(s, v),
                    reference::is_data_ref(s, v),
                    "is_data_ref {s:?}"
                );
            }
        }
    }
}
