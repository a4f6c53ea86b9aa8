//! The string patterns of a JobSpec (names, projects, recipe names, experiment
//! paths, artifact and data references, plugin digests, gate metrics), each reported
//! under its named rule, and how the rules read a string field.

use crate::node::Value;
use crate::rules::Rule;
use crate::schema::Pattern;
use crate::text::{
    find_scheme_separator, has_byte, is_safe_segment, py_trim, safe_segment, split_once_byte,
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

fn not_blank(s: &str) -> Result<(), String> {
    if py_trim(s).is_empty() {
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
    let ok = s.is_empty()
        || (s != "."
            && s != ".."
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')));
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
    match split_once_byte(s, b'/') {
        Some((a, b)) if is_safe_segment(a) && is_safe_segment(b) => Ok(()),
        _ => Err("is not <framework>/<method>, two safe segments such as nemo-rl/grpo".into()),
    }
}

fn exp_path(s: &str) -> Result<(), String> {
    if s.starts_with('/') {
        return Err("is absolute; give the experiment relative to the repository, such as experiments/my-grpo".into());
    }
    let trimmed = s.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err("is empty; name the experiment directory, such as experiments/my-grpo".into());
    }
    if trimmed.split('/').all(is_safe_segment) {
        Ok(())
    } else {
        Err("has an unsafe segment: each must start with a letter or digit and hold only letters, digits, '.', '_' and '-'".into())
    }
}

fn entrypoint(s: &str) -> Result<(), String> {
    if py_trim(s).is_empty() {
        Ok(())
    } else {
        Err("overrides the recipe's entrypoint; leave it empty, or use the custom/custom recipe to run your own command".into())
    }
}

/// `run/<run_id>/<kind>` with an optional `@step=<N>`.
pub fn is_init_from(s: &str) -> bool {
    let (body, step) = match split_once_byte(s, b'@') {
        Some((body, q)) => match q.strip_prefix("step=") {
            Some(n) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => (body, true),
            _ => return false,
        },
        None => (s, false),
    };
    let _ = step;
    match split_once_byte(body, b'/') {
        Some(("run", rest)) => matches!(
            split_once_byte(rest, b'/'),
            Some((run_id, kind)) if is_safe_segment(run_id) && is_safe_segment(kind)
        ),
        _ => false,
    }
}

fn init_from(s: &str) -> Result<(), String> {
    if py_trim(s).is_empty() || is_init_from(s) {
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
    let (id, ver) = match split_once_byte(s, b'@') {
        Some((id, v)) => (id, Some(v)),
        None => (s, None),
    };
    let version_ok = match (version, ver) {
        (Version::Forbidden, Some(_)) | (Version::Required, None) => false,
        (_, Some(v)) => is_safe_segment(v),
        (_, None) => true,
    };
    version_ok
        && matches!(split_once_byte(id, b'/'), Some((o, n)) if is_safe_segment(o) && is_safe_segment(n))
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
}
