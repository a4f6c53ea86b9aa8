//! The spec-bundle rules that read only the document: mode discrimination, the
//! binding of spec keys into `spec`, placeholders and credentials in commands and the
//! environment, the launcher's topology, and supporting-file destinations.

use crate::collect::Ctx;
use crate::kinds::nested::{unknown_placeholder, unknown_placeholders};
use crate::node::{quote, Type, Value};
use crate::paths::segments;
use crate::pointer::ptr;
use crate::pointer::Place;
use crate::rules::{Rule, Severity};
use crate::secrets;

use super::fields::{Execution, Fields};
use super::patterns::{parse_spec_key, Step};

pub(super) fn mode_rules(f: &Fields<'_, '_>, ctx: &mut Ctx<'_>) {
    match Fields::str_of(f.mode) {
        Some("config") => {
            if f.spec.is_none() {
                ctx.report(Rule::TaoModeConfigRequiresSpec, ptr!["spec"], || {
                    "mode \"config\" needs a nested spec dict; add spec or use mode \"args\"".into()
                });
            }
            if f.config_format.is_none() {
                ctx.report(
                    Rule::TaoModeConfigRequiresConfigFormat,
                    ptr!["config_format"],
                    || {
                        "mode \"config\" needs config_format: one of \"yaml\", \"toml\", \"json\""
                            .into()
                    },
                );
            }
            if let Some(command) = Fields::str_of(f.command) {
                if !command.is_empty() && !has_config_path(command) {
                    ctx.report(Rule::TaoModeConfigPathPlaceholder, ptr!["command"], || format!("in mode \"config\" the command {} must pass the rendered config with {{config_path}}", quote(command)));
                }
            }
            if f.args.is_some() {
                ctx.report(Rule::TaoModeConfigForbidsArgs, ptr!["args"], || {
                    "mode \"config\" takes its settings from spec; remove args or use mode \"args\""
                        .into()
                });
            }
        }
        Some("args") => {
            if f.args.is_none() {
                ctx.report(Rule::TaoModeArgsRequiresArgs, ptr!["args"], || {
                    "mode \"args\" needs an args list; add args or use mode \"config\"".into()
                });
            }
            if f.spec.is_some() {
                ctx.report(Rule::TaoModeArgsForbidsSpec, ptr!["spec"], || {
                    "mode \"args\" takes no spec; remove spec or use mode \"config\"".into()
                });
            }
            if f.config_format.is_some() {
                ctx.report(
                    Rule::TaoModeArgsForbidsConfigFormat,
                    ptr!["config_format"],
                    || "mode \"args\" renders no config file; remove config_format".into(),
                );
            }
        }
        _ => {}
    }
}

/// `command.contains("{config_path}")`, from the few `{` a command holds: no substring
/// searcher (nor, for a short one, a vector search) to set up for one string.
fn has_config_path(command: &str) -> bool {
    let b = command.as_bytes();
    crate::text::byte_positions(b, b'{').any(|at| b[at..].starts_with(b"{config_path}"))
}

/// Binding of declared inputs and outputs into `spec` (config mode), and the GPU key.
pub(super) fn spec_keys(f: &Fields<'_, '_>, ctx: &mut Ctx<'_>) {
    let spec = f.spec.filter(|s| s.is_object());
    let config_mode = Fields::str_of(f.mode) == Some("config");
    if let (true, Some(spec)) = (config_mode, spec) {
        let lists = [
            ("declared_inputs", f.declared_inputs, true),
            ("declared_outputs", f.declared_outputs, false),
        ];
        for (list, items, is_input) in lists {
            let Some(items) = items else {
                continue;
            };
            for (i, item) in items.items().enumerate() {
                let Some(key) = item.get_str("spec_key") else {
                    continue;
                };
                if key == "results_dir" {
                    continue;
                }
                let Some(steps) = parse_spec_key(key) else {
                    continue;
                };
                let (message, severity) = match bind(spec, steps) {
                    Ok(_) => continue,
                    // Whether the platform creates the array is its business, and the
                    // producer's own fixtures call such a bundle valid: a warning.
                    Err(Unbound::IndexesMissing { missing, index }) => (
                        format!("the spec_key {} may not bind inside spec: {missing} is missing, so [{index}] below it binds only if the platform creates that array; add {missing} to spec to be sure", quote(key)),
                        Severity::Warning,
                    ),
                    Err(Unbound::Broken(why)) => (
                        format!("the spec_key {} cannot be bound inside spec: {why}", quote(key)),
                        Rule::TaoSpecKeyUnresolved.severity(),
                    ),
                };
                // An optional input the platform may leave unset only warns.
                let optional =
                    is_input && item.get("optional").and_then(|v| v.as_bool()) == Some(true);
                ctx.report(
                    Rule::TaoSpecKeyUnresolved.with_severity(if optional {
                        Severity::Warning
                    } else {
                        severity
                    }),
                    ptr![list, i, "spec_key"],
                    || message,
                );
            }
        }
    }
    if let (Some(spec), Some(key)) = (spec, Fields::str_of(f.gpu_spec_key)) {
        // Only a well-typed GPU count is compared; a bad one is already a schema violation.
        let gpus = f.gpus.filter(|g| g.as_schema_int().is_some());
        if let (Some(steps), Some(gpus)) = (parse_spec_key(key), gpus) {
            if let Ok(Some(value)) = bind(spec, steps) {
                if !value.same_scalar(&gpus) {
                    ctx.report(Rule::TaoGpuSpecKeyMismatch, ptr!["gpu_spec_key"], || format!("spec sets {key} to {} but compute_shape.gpus is {}; the job would see a different GPU count", value.describe(), gpus.describe()));
                }
            }
        }
    }
}

/// Why a spec pointer does not bind.
enum Unbound {
    /// A step indexes below a key that is missing (`a.b[0]` with no `b`): `missing` is
    /// the pointer to that key, `index` the first index below it.
    IndexesMissing { missing: String, index: usize },
    /// A step passes through a scalar, names a key of an array, indexes an object, or
    /// indexes past the end of an array that exists.
    Broken(String),
}

/// Follows a spec pointer: `Ok(Some)` at an existing value, `Ok(None)` where a missing
/// key stops it and nothing below it is indexed (the platform creates missing keys).
fn bind<'t, 'i, 'k>(
    spec: Value<'t, 'i>,
    all: impl Iterator<Item = Step<'k>> + Clone,
) -> Result<Option<Value<'t, 'i>>, Unbound> {
    let mut cur = spec;
    // The steps already followed, worded only when a message needs them.
    let mut taken = 0;
    let walked = |taken: usize| {
        let mut out = String::new();
        for step in all.clone().take(taken) {
            match step {
                Step::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Step::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    };
    let mut steps = all.clone();
    while let Some(step) = steps.next() {
        let next = match (&step, cur.ty()) {
            (Step::Key(k), Type::Object(_)) => match cur.get(k) {
                Some(v) => v,
                // Nothing exists below a missing key, so nothing below it can be wrong.
                None => {
                    return match steps.find(|s| matches!(s, Step::Index(_))) {
                        Some(Step::Index(index)) => Err(Unbound::IndexesMissing {
                            missing: walked(taken + 1),
                            index,
                        }),
                        _ => Ok(None),
                    };
                }
            },
            (Step::Index(i), Type::Array(len)) => {
                if *i >= len {
                    return Err(Unbound::Broken(format!(
                        "{} has {len} item{} and index {i} is past its end",
                        walked(taken),
                        if len == 1 { "" } else { "s" }
                    )));
                }
                cur.item(*i)
                    .ok_or_else(|| Unbound::Broken("index out of range".to_string()))?
            }
            (Step::Key(k), Type::Array(_)) => {
                return Err(Unbound::Broken(format!(
                    "{} is an array, so it has no key {}",
                    walked(taken),
                    quote(k)
                )))
            }
            (Step::Index(i), Type::Object(_)) => {
                return Err(Unbound::Broken(format!(
                    "{} is an object, so it cannot be indexed with [{i}]",
                    walked(taken)
                )))
            }
            (_, _) => {
                return Err(Unbound::Broken(format!(
                    "{} is {} ({}), not an object or array",
                    walked(taken),
                    cur.type_name(),
                    cur.describe()
                )))
            }
        };
        taken += 1;
        cur = next;
    }
    Ok(Some(cur))
}

/// Placeholders and credentials in `command` and `args`. A flag's value in `args` is
/// the element after it (`["--password", "hunter2"]`): the credential is reported there.
pub(super) fn commands(f: &Fields<'_, '_>, ctx: &mut Ctx<'_>) {
    if let Some(command) = Fields::str_of(f.command) {
        strings_rules(command, None, ptr!["command"], ctx);
    }
    if let Some(args) = f.args {
        let mut previous = None;
        for (i, arg) in args.items().enumerate() {
            let s = arg.as_str();
            if let Some(s) = s {
                strings_rules(s, previous, ptr!["args", i], ctx);
            }
            previous = s;
        }
    }
}

/// Placeholders and credentials in one command string, `previous` the argument before
/// it when it is one of `args`; `field` is rendered only on a hit.
fn strings_rules(s: &str, previous: Option<&str>, field: impl Place + Copy, ctx: &mut Ctx<'_>) {
    if crate::text::has_byte(s, b'{') {
        for name in unknown_placeholders(s) {
            ctx.report(Rule::TaoPlaceholderUnknown, field, || {
                unknown_placeholder(name)
            });
        }
    }
    if let Some(why) = secrets::find_credential_in_arg(previous, s) {
        ctx.report(Rule::TaoExecutionSecret, field, || {
            format!(
                "{} looks like a credential: {why}; credentials never enter a spec-bundle",
                quote(s)
            )
        });
    }
}

pub(super) fn execution(f: &Fields<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(exec) = f.execution.filter(|e| e.is_object()) else {
        return;
    };
    let exec = Execution::of(exec);
    let lists = [
        ("pre_commands", exec.pre_commands),
        ("post_commands", exec.post_commands),
    ];
    for (list, cmds) in lists {
        if let Some(cmds) = cmds {
            for (i, c) in cmds.items().enumerate() {
                if let Some(s) = c.as_str() {
                    strings_rules(s, None, ptr!["execution", list, i], ctx);
                }
            }
        }
    }
    if let Some(env) = exec.environment {
        for (name, value) in env.entries() {
            let Some(s) = value.as_str() else { continue };
            let field = ptr!["execution", "environment", name];
            if crate::text::has_byte(s, b'{') {
                for p in unknown_placeholders(s) {
                    ctx.report(Rule::TaoPlaceholderUnknown, field, || {
                        unknown_placeholder(p)
                    });
                }
            }
            if let Some(why) = secrets::sensitive_assignment(name, s) {
                ctx.report(Rule::TaoExecutionSecret, field, || format!("the environment value of {name} looks like a credential: {why}; credentials never enter a spec-bundle"));
            }
        }
    }
    if let Some(dist) = exec.distributed {
        let ppn = dist
            .get("processes_per_node")
            .and_then(|v| v.as_schema_int());
        let gpus = f.gpus.and_then(|v| v.as_schema_int());
        if let (Some("torchrun"), Some(ppn), Some(gpus)) = (dist.get_str("launcher"), ppn, gpus) {
            if gpus > 0 && ppn != gpus {
                ctx.report(Rule::TaoExecutionProcessesPerNode, ptr!["execution", "distributed", "processes_per_node"], || format!("torchrun starts {ppn} processes per node but compute_shape.gpus is {gpus}; one process per GPU is expected"));
            }
        }
    }
    // A clash takes two entries: fewer are not gathered.
    let files = exec.supporting_files;
    if let Some(files) = files.filter(|f| matches!(f.ty(), Type::Array(2..))) {
        let destinations: Vec<(usize, &str)> = files
            .items()
            .enumerate()
            .filter_map(|(i, f)| Some((i, f.get_str("destination")?)))
            .collect();
        for (i, message) in destination_clashes(&destinations) {
            ctx.report(
                Rule::TaoSupportingFileDuplicateDestination,
                ptr!["execution", "supporting_files", i, "destination"],
                || message,
            );
        }
    }
}

/// Destinations that cannot all be staged, as (the later entry's index, why): the same
/// place twice, or one staged inside another that is staged as a file (`x` and
/// `x/y`). Sorted by segments, equal destinations are neighbours and each one's
/// descendants follow it directly, so one pass with a stack of the current
/// ancestors finds every clash: O(n log n) comparisons, never every pair.
fn destination_clashes(destinations: &[(usize, &str)]) -> Vec<(usize, String)> {
    type Entry<'s> = (Vec<&'s str>, usize, &'s str);
    let mut sorted: Vec<Entry<'_>> = destinations
        .iter()
        .map(|&(i, dest)| (segments(dest).collect(), i, dest))
        .collect();
    sorted.sort();
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut reported = std::collections::HashSet::new();
    let mut previous: Option<&Entry<'_>> = None;
    let mut ancestors: Vec<&Entry<'_>> = Vec::new();
    for entry in &sorted {
        let (segs, i, dest) = entry;
        if previous.is_some_and(|p| p.0 == *segs) {
            // Among equals the earliest entry comes first and is kept.
            if reported.insert(*i) {
                out.push((*i, format!("another supporting file already stages to {}; give each file its own destination", quote(dest))));
            }
            continue;
        }
        previous = Some(entry);
        if segs.is_empty() {
            continue; // names the staging directory itself, not a file anything could sit in
        }
        while ancestors.last().is_some_and(|a| !segs.starts_with(&a.0)) {
            ancestors.pop();
        }
        if let Some(&(_, j, above)) = ancestors.last() {
            let later = (*i).max(*j);
            if reported.insert(later) {
                let message = if later == *i {
                    format!("{} would stage inside {}, which another supporting file stages as a file; a destination cannot be both a file and a directory", quote(dest), quote(above))
                } else {
                    format!("{} stages as a file, but another supporting file stages {} inside it; a destination cannot be both a file and a directory", quote(above), quote(dest))
                };
                out.push((later, message));
            }
        }
        ancestors.push(entry);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AdmissionContext, Kind, Validator};

    /// The `tao.spec_key.unresolved` violations (pointer, severity, message) of a
    /// config-mode bundle whose spec is `spec` and whose one input is `key`.
    fn unresolved(spec: &str, key: &str, optional: bool) -> Vec<(String, Severity, String)> {
        let bundle = format!(
            r#"{{"network_arch":"dino","action":"train","image":"nvcr.io/nvidia/tao:6","mode":"config",
            "command":"dino train -e {{config_path}}","config_format":"yaml","spec":{spec},
            "declared_inputs":[{{"spec_key":"{key}","type":"file","optional":{optional},"uri":"ngc://x/y:z"}}],
            "declared_outputs":[{{"spec_key":"results_dir","type":"folder"}}],
            "compute_shape":{{"gpus":1,"nodes":1}}}}"#
        );
        let report = Validator::default().check(
            bundle.as_bytes(),
            Some(Kind::SpecBundle),
            &AdmissionContext::default(),
        );
        let (unresolved, others): (Vec<_>, Vec<_>) = report
            .violations
            .into_iter()
            .partition(|v| v.rule == Rule::TaoSpecKeyUnresolved);
        assert!(others.is_empty(), "{others:?}");
        unresolved
            .into_iter()
            .map(|v| (v.field, v.severity, v.message))
            .collect()
    }

    #[test]
    fn indexing_into_a_missing_key_warns_and_names_it() {
        let spec = r#"{"a":{"x":1}}"#;
        let found = unresolved(spec, "a.b[0].c", false);
        assert_eq!(found.len(), 1, "{found:?}");
        let (field, severity, message) = &found[0];
        assert_eq!(
            (field.as_str(), *severity),
            ("/declared_inputs/0/spec_key", Severity::Warning)
        );
        assert!(message.contains("a.b is missing"), "{message}");
        // The first missing key is named, whatever follows it.
        let (_, _, message) = &unresolved(spec, "a.b.c[2].d", false)[0];
        assert!(message.contains("a.b is missing"), "{message}");
        assert!(message.contains("[2]"), "{message}");
        let (_, severity, message) = &unresolved("{}", "top[0]", false)[0];
        assert_eq!(*severity, Severity::Warning);
        assert!(message.contains("top is missing"), "{message}");
    }

    #[test]
    fn a_missing_key_binds_when_nothing_below_it_is_indexed() {
        assert_eq!(unresolved(r#"{"a":{}}"#, "a.b", false), vec![]);
        assert_eq!(unresolved(r#"{"a":{}}"#, "a.b.c.d", false), vec![]);
        assert_eq!(
            unresolved(r#"{"a":{"b":[{"c":1},{}]}}"#, "a.b[1].c", false),
            vec![]
        );
        assert_eq!(unresolved("{}", "results_dir", false), vec![]);
    }

    #[test]
    fn what_exists_and_cannot_be_bound_is_an_error() {
        let cases = [
            (
                r#"{"a":{"b":[1,2]}}"#,
                "a.b[5]",
                "a.b has 2 items and index 5 is past its end",
            ),
            (r#"{"a":{"b":"text"}}"#, "a.b.c", "a.b is string"),
            (r#"{"a":{"b":null}}"#, "a.b[0].c", "a.b is null"),
            (r#"{"a":{"b":[1]}}"#, "a.b.c", "a.b is an array"),
            (r#"{"a":{"b":{}}}"#, "a.b[0]", "a.b is an object"),
        ];
        for (spec, key, why) in cases {
            let found = unresolved(spec, key, false);
            assert_eq!(found.len(), 1, "{key}: {found:?}");
            let (field, severity, message) = &found[0];
            assert_eq!(
                (field.as_str(), *severity),
                ("/declared_inputs/0/spec_key", Severity::Error),
                "{key}"
            );
            assert!(message.contains(why), "{key}: {message}");
            // An optional input the platform may leave unset only warns, in every case.
            let found = unresolved(spec, key, true);
            assert_eq!(found.len(), 1, "{key}: {found:?}");
            assert_eq!(found[0].1, Severity::Warning, "{key}");
        }
        let found = unresolved(r#"{"a":{}}"#, "a.b[0].c", true);
        assert_eq!(found[0].1, Severity::Warning);
    }

    #[test]
    fn destination_clashes_name_the_later_entry() {
        let clashes = |d: &[&str]| {
            let indexed: Vec<(usize, &str)> = d.iter().copied().enumerate().collect();
            let mut out: Vec<usize> = destination_clashes(&indexed)
                .into_iter()
                .map(|(i, _)| i)
                .collect();
            out.sort();
            out
        };
        assert_eq!(
            clashes(&["a", "b", "a.b/c", "a0", "c/d"]),
            Vec::<usize>::new()
        );
        assert_eq!(clashes(&["x", "x/y"]), vec![1]);
        assert_eq!(clashes(&["x/y", "x"]), vec![1]);
        assert_eq!(clashes(&["x", "x.a", "x/y"]), vec![2]); // '.' sorts before '/'
        assert_eq!(clashes(&["./x", "x//y/z", "a//b", "a/b"]), vec![1, 3]);
        assert_eq!(clashes(&["x/y", "x/z", "x"]), vec![2]); // reported once
        assert_eq!(clashes(&["x", "x", "x"]), vec![1, 2]);
        assert_eq!(clashes(&[".", "./", "a"]), vec![1]);
        let (_, message) = &destination_clashes(&[(0, "x"), (1, "x/y")])[0];
        assert!(
            message.starts_with(
                r#""x/y" would stage inside "x", which another supporting file stages as a file"#
            ),
            "{message}"
        );
        let (_, message) = &destination_clashes(&[(0, "x/y"), (1, "x")])[0];
        assert!(
            message.starts_with(
                r#""x" stages as a file, but another supporting file stages "x/y" inside it"#
            ),
            "{message}"
        );
    }

    #[test]
    fn many_destinations_in_one_pass() {
        let names: Vec<String> = (0..50_000).map(|i| format!("d{}/f{i}", i % 100)).collect();
        let mut indexed: Vec<(usize, &str)> =
            names.iter().map(String::as_str).enumerate().collect();
        indexed.push((50_000, "d7"));
        assert_eq!(destination_clashes(&indexed).len(), 1);
    }

    #[test]
    fn config_path_as_contains_finds_it() {
        for command in [
            "",
            "{",
            "{config_path",
            "x {config_path}",
            "{{config_path}}",
            "{config_path}",
            "{job_id} {config_path} y",
            "config_path}",
            "{ config_path}",
            "é{config_path}é",
        ] {
            assert_eq!(
                has_config_path(command),
                command.contains("{config_path}"),
                "{command:?}"
            );
        }
    }
}
