//! Nested config dicts, shared by two kinds: a spec-bundle's `spec` and a best_rec's
//! `best.specs` are mapped key by key into a container's config, so no key at any
//! depth may be dotted or empty (`tao.dotted_key`); and the `{name}` placeholders the
//! platform binds (`tao.placeholder.unknown` names the others).
//!
//! Imports no kind, so both kinds can use it.

use std::collections::HashSet;

use crate::collect::Ctx;
use crate::node::{quote, Type, Value};
use crate::pointer::{Child, Here};
use crate::rules::Rule;
use crate::text::has_byte;

/// The placeholders the platform binds when it renders a command or a config.
pub const PLACEHOLDERS: [&str; 3] = ["config_path", "job_id", "results_dir"];

/// Whether a nested dict's strings are checked for `{name}` placeholders: a spec-bundle's
/// `spec` is rendered into the job's config, a best_rec's `best.specs` is not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    Checked,
    Ignored,
}

/// Walks a nested dict, reporting dotted or empty keys (`tao.dotted_key`) and, where
/// asked, unknown placeholders in string values.
pub fn scan_nested<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>, placeholders: Placeholders) {
    match v.ty() {
        Type::Object(_) => {
            for (key, value) in v.entries() {
                if key.is_empty() || has_byte(key, b'.') {
                    ctx.report(Rule::TaoDottedKey, Child(key), || {
                        let hint = if key.is_empty() {
                            "an empty key cannot be mapped into the container's config".to_string()
                        } else {
                            format!("nest it instead, e.g. {}", nest_hint(key))
                        };
                        format!("the key {} is dotted or empty; {hint}", quote(key))
                    });
                }
                // Most values are scalars with nothing to report: the path is pushed
                // only for a value that can hold a violation.
                if worth_scanning(value, placeholders) {
                    ctx.within(key, |ctx| scan_nested(value, ctx, placeholders));
                }
            }
        }
        Type::Array(_) => {
            for (i, item) in v.items().enumerate() {
                if worth_scanning(item, placeholders) {
                    ctx.within(i, |ctx| scan_nested(item, ctx, placeholders));
                }
            }
        }
        Type::Str(s) if placeholders == Placeholders::Checked => placeholders_here(s, ctx),
        _ => {}
    }
}

/// Whether `scan_nested` can find anything in `v`: an object, an array with an item
/// worth scanning, or a string that may hold a placeholder when those are checked.
/// An array of plain scalars (the usual list of numbers or names) is thus passed over
/// without a path pushed for it.
#[inline]
fn worth_scanning(v: Value<'_, '_>, placeholders: Placeholders) -> bool {
    match v.ty() {
        Type::Object(_) => true,
        Type::Array(_) => v.items().any(|item| match item.ty() {
            Type::Object(_) | Type::Array(_) => true,
            Type::Str(s) => may_hold_placeholder(s, placeholders),
            _ => false,
        }),
        Type::Str(s) => may_hold_placeholder(s, placeholders),
        _ => false,
    }
}

#[inline]
fn may_hold_placeholder(s: &str, placeholders: Placeholders) -> bool {
    placeholders == Placeholders::Checked && has_byte(s, b'{')
}

fn nest_hint(key: &str) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    let mut out = String::new();
    for p in &parts {
        out.push_str(&format!("{{{}: ", quote(p)));
    }
    out.push_str("...");
    out.push_str(&"}".repeat(parts.len()));
    out
}

/// Unknown `{name}` placeholders in `s` (`${NAME}` is a shell reference, not one).
pub fn unknown_placeholders(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut found = Vec::new();
    // Made only for a string with an unknown placeholder, which few strings have.
    let mut seen: Option<HashSet<&str>> = None;
    // A short string is searched by a plain loop: a vector search costs more to set up.
    for open in crate::text::byte_positions(b, b'{') {
        if open > 0 && b[open - 1] == b'$' {
            continue;
        }
        let rest = &b[open + 1..];
        // A known placeholder, spelled whole and closed, is the usual case.
        let known = |p: &&str| {
            rest.strip_prefix(p.as_bytes())
                .is_some_and(|after| after.first() == Some(&b'}'))
        };
        if PLACEHOLDERS.iter().any(known) {
            continue;
        }
        let len = rest
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
        if len == 0 || rest.get(len) != Some(&b'}') || rest[0].is_ascii_digit() {
            continue;
        }
        let name = &s[open + 1..open + 1 + len];
        if !PLACEHOLDERS.contains(&name) && seen.get_or_insert_with(HashSet::new).insert(name) {
            found.push(name);
        }
    }
    found
}

/// The `tao.placeholder.unknown` message for `{name}`.
pub fn unknown_placeholder(name: &str) -> String {
    format!("the placeholder {{{name}}} is not one the platform binds; use {{config_path}}, {{job_id}} or {{results_dir}}")
}

/// `tao.placeholder.unknown` for each unknown placeholder of `s`, at the current path.
fn placeholders_here(s: &str, ctx: &mut Ctx<'_>) {
    if !has_byte(s, b'{') {
        return;
    }
    for name in unknown_placeholders(s) {
        ctx.report(Rule::TaoPlaceholderUnknown, Here, || {
            unknown_placeholder(name)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_unknown_placeholders() {
        assert_eq!(
            unknown_placeholders("run {config_path} {job_id} {results_dir}"),
            Vec::<&str>::new()
        );
        assert_eq!(
            unknown_placeholders("x {foo} ${BAR} {foo} {0} {}"),
            vec!["foo"]
        );
    }

    /// `unknown_placeholders` before the known placeholders were told by their spelling.
    fn reference_unknown_placeholders(s: &str) -> Vec<&str> {
        let b = s.as_bytes();
        let mut found = Vec::new();
        let mut seen = HashSet::new();
        for open in memchr::memchr_iter(b'{', b) {
            if open > 0 && b[open - 1] == b'$' {
                continue;
            }
            let rest = &b[open + 1..];
            let len = rest
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            if len == 0 || rest.get(len) != Some(&b'}') || rest[0].is_ascii_digit() {
                continue;
            }
            let name = &s[open + 1..open + 1 + len];
            if !PLACEHOLDERS.contains(&name) && seen.insert(name) {
                found.push(name);
            }
        }
        found
    }

    #[test]
    fn placeholders_and_bytes_agree_with_the_reference() {
        let fragments = [
            "{",
            "}",
            "$",
            "config_path",
            "job_id",
            "results_dir",
            "config_paths",
            "job",
            "_",
            "0",
            "x",
            " ",
            "é",
            "{config_path}",
            "{job_id}",
            "{results_dir}",
            "{foo}",
            ".",
        ];
        for s in crate::text::fuzz::joined(&fragments, 24, 200_000, 0xDA94_2042_E4DD_58B5) {
            assert_eq!(
                unknown_placeholders(&s),
                reference_unknown_placeholders(&s),
                "{s:?}"
            );
            for byte in [b'{', b'.', 0xa9] {
                assert_eq!(has_byte(&s, byte), s.as_bytes().contains(&byte), "{s:?}");
            }
        }
    }
}
