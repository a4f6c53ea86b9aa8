//! TAO spec-bundle: the published schema (`spec_bundle.schema.json`) plus the
//! semantic rules: nested-not-dotted, mode discrimination, placeholders, spec keys,
//! credentials, topology, and the static supporting-file rules.
//!
//! Rules that need the files themselves (hashes, symlinks, packages) are not here.

use crate::config::CoreConfig;
use crate::node::{quote, Type, Value};
use crate::pointer::pointer;
use crate::report::Severity;
use crate::schema::{
    self, array_of, opt, py_isspace, req, str_matching, Additional, Ctx, ObjectShape, Pattern,
    Shape, COUNT_MAX, NONEMPTY, STRING,
};
use crate::secrets;

const PLACEHOLDERS: [&str; 3] = ["config_path", "job_id", "results_dir"];

// ---------------------------------------------------------------- shapes

static IMAGE: Pattern = Pattern {
    rule: "schema.pattern",
    severity: Severity::Error,
    test: image_uri,
};
static SHA256: Pattern = Pattern {
    rule: "schema.pattern",
    severity: Severity::Error,
    test: lowercase_sha256,
};
static SUPPORTING_PATH: Pattern = Pattern {
    rule: "tao.supporting_file.path",
    severity: Severity::Error,
    test: supporting_path,
};
static SPEC_KEY: Pattern = Pattern {
    rule: "tao.spec_key.syntax",
    severity: Severity::Error,
    test: spec_key_syntax,
};
static ENV_NAME: Pattern = Pattern {
    rule: "schema.propertyNames",
    severity: Severity::Error,
    test: env_name,
};

const SPEC_KEY_STR: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: "tao.spec_key.syntax",
    pattern: Some(&SPEC_KEY),
};
const SUPPORTING_PATH_STR: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: "schema.minLength",
    pattern: Some(&SUPPORTING_PATH),
};
const FILE_TYPE: Shape = Shape::Enum {
    values: &["file", "folder"],
    nullable: false,
};

static DECLARED_INPUT: ObjectShape = ObjectShape {
    fields: &[
        req("spec_key", SPEC_KEY_STR),
        req("type", FILE_TYPE),
        opt("optional", schema::BOOL),
        req("uri", NONEMPTY),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static DECLARED_OUTPUT: ObjectShape = ObjectShape {
    fields: &[req("spec_key", SPEC_KEY_STR), req("type", FILE_TYPE)],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static COMPUTE_SHAPE: ObjectShape = ObjectShape {
    fields: &[
        req(
            "gpus",
            Shape::Int {
                min: Some(0),
                max: Some(COUNT_MAX),
                lexical: false,
            },
        ),
        req(
            "nodes",
            Shape::Int {
                min: Some(1),
                max: Some(COUNT_MAX),
                lexical: false,
            },
        ),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static SUPPORTING_FILE: ObjectShape = ObjectShape {
    fields: &[
        req("source", SUPPORTING_PATH_STR),
        req("destination", SUPPORTING_PATH_STR),
        req("sha256", str_matching(&SHA256)),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static DISTRIBUTED: ObjectShape = ObjectShape {
    fields: &[
        req(
            "launcher",
            Shape::Enum {
                values: &["direct", "torchrun"],
                nullable: false,
            },
        ),
        req(
            "processes_per_node",
            Shape::Int {
                min: Some(1),
                max: None,
                lexical: false,
            },
        ),
        opt("tasks_per_node", Shape::ConstInt(1)),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static COMPLETION: ObjectShape = ObjectShape {
    fields: &[
        req("child_exit_code_path", NONEMPTY),
        opt("structured_status_path", NONEMPTY),
        opt(
            "success_states",
            Shape::Array {
                items: &NONEMPTY,
                min_items: 1,
                min_items_rule: "schema.minItems",
                unique: true,
            },
        ),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static ENVIRONMENT: ObjectShape = ObjectShape {
    fields: &[],
    additional: Additional::Values(&STRING),
    keys: Some(&ENV_NAME),
};
static EXECUTION: ObjectShape = ObjectShape {
    fields: &[
        opt("environment", Shape::Object(&ENVIRONMENT)),
        opt("pre_commands", array_of(&NONEMPTY)),
        opt("post_commands", array_of(&NONEMPTY)),
        opt(
            "post_scope",
            Shape::Enum {
                values: &["all", "leader"],
                nullable: false,
            },
        ),
        opt("distributed", Shape::Object(&DISTRIBUTED)),
        opt(
            "supporting_files",
            array_of(&Shape::Object(&SUPPORTING_FILE)),
        ),
        opt("completion", Shape::Object(&COMPLETION)),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};
static BUNDLE: ObjectShape = ObjectShape {
    fields: &[
        req("network_arch", NONEMPTY),
        req("action", NONEMPTY),
        req("image", str_matching(&IMAGE)),
        req(
            "mode",
            Shape::Enum {
                values: &["config", "args"],
                nullable: false,
            },
        ),
        req("command", NONEMPTY),
        opt(
            "config_format",
            Shape::Enum {
                values: &["yaml", "toml", "json"],
                nullable: false,
            },
        ),
        opt("spec", Shape::Custom(nested_spec)),
        opt("args", array_of(&STRING)),
        req("declared_inputs", array_of(&Shape::Object(&DECLARED_INPUT))),
        req(
            "declared_outputs",
            Shape::Array {
                items: &Shape::Object(&DECLARED_OUTPUT),
                min_items: 1,
                min_items_rule: "schema.minItems",
                unique: false,
            },
        ),
        opt("upload_excludes", array_of(&STRING)),
        req("compute_shape", Shape::Object(&COMPUTE_SHAPE)),
        opt("gpu_spec_key", str_matching(&SPEC_KEY)),
        opt("execution", Shape::Object(&EXECUTION)),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};

/// `^\S+/\S+$`: a resolved registry/path:tag, never a versions.yaml key.
fn image_uri(s: &str) -> Result<(), String> {
    // Some '/' with at least one character on each side, and no whitespace anywhere:
    // exactly what the pattern matches ("//0" does: "/" + "/" + "0").
    let b = s.as_bytes();
    let interior_slash = b.len() >= 3 && b[1..b.len() - 1].contains(&b'/');
    if interior_slash && !s.chars().any(py_isspace) {
        Ok(())
    } else {
        Err("is not a resolved container URI (registry/path:tag, no whitespace); resolve the image key first".into())
    }
}

fn lowercase_sha256(s: &str) -> Result<(), String> {
    if s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
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

/// Relative, no `..` segment, no backslash, whitespace or NUL.
pub fn supporting_path(s: &str) -> Result<(), String> {
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
    if !s.is_empty() && s.split('/').all(|seg| seg.is_empty() || seg == ".") {
        return Err("names no file, only the directory itself; give the file's path".into());
    }
    Ok(())
}

/// One step of a dotted/indexed spec pointer such as `dataset.sources[0].dir`.
#[derive(Debug, PartialEq)]
pub enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The steps of a spec pointer, or `None` when it is not one. Allocates nothing: the
/// pointer is checked once, then walked step by step.
pub fn parse_spec_key(s: &str) -> Option<impl Iterator<Item = Step<'_>>> {
    if !is_spec_key(s) {
        return None;
    }
    Some(s.split('.').flat_map(|part| {
        let name_end = part.find('[').unwrap_or(part.len());
        let indexes = part[name_end..]
            .split(']')
            .filter(|x| !x.is_empty())
            .map(|x| Step::Index(x[1..].parse().unwrap_or(usize::MAX)));
        std::iter::once(Step::Key(&part[..name_end])).chain(indexes)
    }))
}

/// `name([digits])*` segments joined by `.`; names hold no `.`, `[`, `]` or whitespace.
fn is_spec_key(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len()
            && !matches!(b[i], b'.' | b'[' | b']')
            && !b[i].is_ascii_whitespace()
            && b[i] != 0x1c
            && b[i] != 0x1d
            && b[i] != 0x1e
            && b[i] != 0x1f
        {
            i += 1;
        }
        if i == start || s[start..i].chars().any(py_isspace) {
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

// ---------------------------------------------------------------- the nested spec

/// `spec` is a nested dict: no key anywhere may contain `.` or be empty (also inside
/// arrays). String values are scanned for placeholders on the same walk.
fn nested_spec<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if !v.is_object() {
        ctx.here(
            "schema.type",
            Severity::Error,
            format!(
                "expected an object (the nested config dict), got {}",
                v.describe()
            ),
        );
        return;
    }
    scan_nested(v, ctx, Placeholders::Checked);
}

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
    let rule = "tao.dotted_key";
    match v.ty() {
        Type::Object(_) => {
            for (key, value) in v.entries() {
                if key.is_empty() || key.contains('.') {
                    ctx.at_key(key, rule, Severity::Error, || {
                        let hint = if key.is_empty() {
                            "an empty key cannot be mapped into the container's config".to_string()
                        } else {
                            format!("nest it instead, e.g. {}", nest_hint(key))
                        };
                        format!("the key {} is dotted or empty; {hint}", quote(key))
                    });
                }
                ctx.path.push_key(key);
                scan_nested(value, ctx, placeholders);
                ctx.path.pop();
            }
        }
        Type::Array(_) => {
            for (i, item) in v.items().enumerate() {
                ctx.path.push_index(i);
                scan_nested(item, ctx, placeholders);
                ctx.path.pop();
            }
        }
        Type::Str(s) if placeholders == Placeholders::Checked => placeholders_here(s, ctx),
        _ => {}
    }
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

// ---------------------------------------------------------------- placeholders

/// Unknown `{name}` placeholders in `s` (`${NAME}` is a shell reference, not one).
pub fn unknown_placeholders(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
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

fn placeholders_here(s: &str, ctx: &mut Ctx<'_>) {
    if !s.contains('{') {
        return;
    }
    for name in unknown_placeholders(s) {
        ctx.here(
            "tao.placeholder.unknown",
            Severity::Warning,
            format!("the placeholder {{{name}}} is not one the platform binds; use {{config_path}}, {{job_id}} or {{results_dir}}"),
        );
    }
}

// ---------------------------------------------------------------- entry point

pub fn check<'t, 'i>(root: Value<'t, 'i>, config: &CoreConfig, ctx: &mut Ctx<'i>) {
    schema::walk(root, &Shape::Object(&BUNDLE), ctx);
    job_gpus(root, config, ctx);
    mode_rules(root, ctx);
    spec_keys(root, ctx);
    commands(root, ctx);
    execution(root, ctx);
}

/// The per-job GPU limit applies to a bundle's `nodes * gpus` as to a JobSpec's pools.
fn job_gpus(root: Value<'_, '_>, config: &CoreConfig, ctx: &mut Ctx<'_>) {
    let count = |key: &str| {
        root.at(&["compute_shape", key])
            .and_then(|v| v.as_schema_int())
            .filter(|n| (0..=COUNT_MAX as i128).contains(n))
    };
    let (Some(gpus), Some(nodes)) = (count("gpus"), count("nodes")) else {
        return; // missing or out of range: the schema rules say so
    };
    let total = gpus * nodes;
    if let Some(limit) = config.max_gpus_per_job {
        if total > limit as i128 {
            ctx.error(
                "/compute_shape".into(),
                "forge.quota.job",
                format!("the job asks for {total} GPUs (compute_shape.nodes * gpus), over the per-job limit of {limit}"),
            );
        }
    }
}

fn mode_rules(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let has = |k: &str| root.get(k).is_some();
    match root.get_str("mode") {
        Some("config") => {
            if !has("spec") {
                ctx.error(
                    pointer(&["spec"]),
                    "tao.mode.config_requires_spec",
                    "mode \"config\" needs a nested spec dict; add spec or use mode \"args\""
                        .into(),
                );
            }
            if !has("config_format") {
                ctx.error(
                    pointer(&["config_format"]),
                    "tao.mode.config_requires_config_format",
                    "mode \"config\" needs config_format: one of \"yaml\", \"toml\", \"json\""
                        .into(),
                );
            }
            if let Some(command) = root.get_str("command") {
                if !command.is_empty() && !command.contains("{config_path}") {
                    ctx.error(pointer(&["command"]), "tao.mode.config_path_placeholder", format!("in mode \"config\" the command {} must pass the rendered config with {{config_path}}", quote(command)));
                }
            }
            if has("args") {
                ctx.error(pointer(&["args"]), "tao.mode.config_forbids_args", "mode \"config\" takes its settings from spec; remove args or use mode \"args\"".into());
            }
        }
        Some("args") => {
            if !has("args") {
                ctx.error(
                    pointer(&["args"]),
                    "tao.mode.args_requires_args",
                    "mode \"args\" needs an args list; add args or use mode \"config\"".into(),
                );
            }
            if has("spec") {
                ctx.error(
                    pointer(&["spec"]),
                    "tao.mode.args_forbids_spec",
                    "mode \"args\" takes no spec; remove spec or use mode \"config\"".into(),
                );
            }
            if has("config_format") {
                ctx.error(
                    pointer(&["config_format"]),
                    "tao.mode.args_forbids_config_format",
                    "mode \"args\" renders no config file; remove config_format".into(),
                );
            }
        }
        _ => {}
    }
}

/// Binding of declared inputs and outputs into `spec` (config mode), and the GPU key.
fn spec_keys(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let spec = root.get("spec").filter(|s| s.is_object());
    let config_mode = root.get_str("mode") == Some("config");
    if let (true, Some(spec)) = (config_mode, spec) {
        for (list, is_input) in [("declared_inputs", true), ("declared_outputs", false)] {
            let Some(items) = root.get(list) else {
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
                if let Err(why) = bind(spec, steps) {
                    let optional =
                        is_input && item.get("optional").and_then(|v| v.as_bool()) == Some(true);
                    let severity = if optional {
                        Severity::Warning
                    } else {
                        Severity::Error
                    };
                    ctx.at(
                        pointer(&[list, &i.to_string(), "spec_key"]),
                        "tao.spec_key.unresolved",
                        severity,
                        format!(
                            "the spec_key {} cannot be bound inside spec: {why}",
                            quote(key)
                        ),
                    );
                }
            }
        }
    }
    if let (Some(spec), Some(key)) = (spec, root.get_str("gpu_spec_key")) {
        // Only a well-typed GPU count is compared; a bad one is already a schema violation.
        let gpus = root
            .at(&["compute_shape", "gpus"])
            .filter(|g| g.as_schema_int().is_some());
        if let (Some(steps), Some(gpus)) = (parse_spec_key(key), gpus) {
            if let Ok(Some(value)) = bind(spec, steps) {
                if !value.same_scalar(&gpus) {
                    ctx.warning(
                        pointer(&["gpu_spec_key"]),
                        "tao.gpu_spec_key.mismatch",
                        format!("spec sets {key} to {} but compute_shape.gpus is {}; the job would see a different GPU count", value.describe(), gpus.describe()),
                    );
                }
            }
        }
    }
}

/// Follows a spec pointer: `Ok(Some)` at an existing value, `Ok(None)` where a missing
/// key stops it (the platform writes it), `Err` where it cannot bind.
fn bind<'t, 'i, 'k>(
    spec: Value<'t, 'i>,
    steps: impl Iterator<Item = Step<'k>>,
) -> Result<Option<Value<'t, 'i>>, String> {
    let mut cur = spec;
    let mut walked = String::new();
    let mut steps = steps;
    while let Some(step) = steps.next() {
        let next = match (&step, cur.ty()) {
            (Step::Key(k), Type::Object(_)) => match cur.get(k) {
                Some(v) => v,
                // The platform creates missing object keys, never arrays: the rest binds
                // only if it indexes nothing.
                None => {
                    return match steps.find(|s| matches!(s, Step::Index(_))) {
                        None => Ok(None),
                        Some(Step::Index(i)) => Err(format!(
                            "{} is missing, and the platform creates missing keys but never arrays, so [{i}] below it cannot be bound",
                            if walked.is_empty() { (*k).to_string() } else { format!("{walked}.{k}") }
                        )),
                        Some(Step::Key(_)) => Ok(None),
                    };
                }
            },
            (Step::Index(i), Type::Array(len)) => {
                if *i >= len {
                    return Err(format!(
                        "{walked} has {len} item{} and index {i} is past its end",
                        if len == 1 { "" } else { "s" }
                    ));
                }
                cur.item(*i)
                    .ok_or_else(|| "index out of range".to_string())?
            }
            (Step::Key(k), Type::Array(_)) => {
                return Err(format!(
                    "{walked} is an array, so it has no key {}",
                    quote(k)
                ))
            }
            (Step::Index(i), Type::Object(_)) => {
                return Err(format!(
                    "{walked} is an object, so it cannot be indexed with [{i}]"
                ))
            }
            (_, _) => {
                return Err(format!(
                    "{walked} is {} ({}), not an object or array",
                    cur.type_name(),
                    cur.describe()
                ))
            }
        };
        match step {
            Step::Key(k) => {
                if !walked.is_empty() {
                    walked.push('.');
                }
                walked.push_str(k);
            }
            Step::Index(i) => walked.push_str(&format!("[{i}]")),
        }
        cur = next;
    }
    Ok(Some(cur))
}

/// Placeholders and credentials in `command` and `args`.
fn commands(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    if let Some(command) = root.get_str("command") {
        strings_rules(command, || pointer(&["command"]), ctx);
    }
    if let Some(args) = root.get("args") {
        for (i, arg) in args.items().enumerate() {
            if let Some(s) = arg.as_str() {
                strings_rules(s, || pointer(&["args", &i.to_string()]), ctx);
            }
        }
    }
}

/// Placeholders and credentials in one command string; `field` is rendered only on a hit.
fn strings_rules(s: &str, field: impl Fn() -> String, ctx: &mut Ctx<'_>) {
    if s.contains('{') {
        for name in unknown_placeholders(s) {
            ctx.warning(field(), "tao.placeholder.unknown", format!("the placeholder {{{name}}} is not one the platform binds; use {{config_path}}, {{job_id}} or {{results_dir}}"));
        }
    }
    if let Some(why) = secrets::find_credential(s) {
        ctx.error(
            field(),
            "tao.execution.secret",
            format!(
                "{} looks like a credential: {why}; credentials never enter a spec-bundle",
                quote(s)
            ),
        );
    }
}

fn execution(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(exec) = root.get("execution").filter(|e| e.is_object()) else {
        return;
    };
    for list in ["pre_commands", "post_commands"] {
        if let Some(cmds) = exec.get(list) {
            for (i, c) in cmds.items().enumerate() {
                if let Some(s) = c.as_str() {
                    strings_rules(s, || pointer(&["execution", list, &i.to_string()]), ctx);
                }
            }
        }
    }
    if let Some(env) = exec.get("environment") {
        for (name, value) in env.entries() {
            let Some(s) = value.as_str() else { continue };
            let field = || pointer(&["execution", "environment", name]);
            if s.contains('{') {
                for p in unknown_placeholders(s) {
                    ctx.warning(field(), "tao.placeholder.unknown", format!("the placeholder {{{p}}} is not one the platform binds; use {{config_path}}, {{job_id}} or {{results_dir}}"));
                }
            }
            if let Some(why) = secrets::sensitive_assignment(name, s) {
                ctx.error(field(), "tao.execution.secret", format!("the environment value of {name} looks like a credential: {why}; credentials never enter a spec-bundle"));
            }
        }
    }
    if let Some(dist) = exec.get("distributed") {
        let ppn = dist
            .get("processes_per_node")
            .and_then(|v| v.as_schema_int());
        let gpus = root
            .at(&["compute_shape", "gpus"])
            .and_then(|v| v.as_schema_int());
        if let (Some("torchrun"), Some(ppn), Some(gpus)) = (dist.get_str("launcher"), ppn, gpus) {
            if gpus > 0 && ppn != gpus {
                ctx.warning(
                    pointer(&["execution", "distributed", "processes_per_node"]),
                    "tao.execution.processes_per_node",
                    format!("torchrun starts {ppn} processes per node but compute_shape.gpus is {gpus}; one process per GPU is expected"),
                );
            }
        }
    }
    if let Some(files) = exec.get("supporting_files") {
        let destinations: Vec<(usize, &str)> = files
            .items()
            .enumerate()
            .filter_map(|(i, f)| Some((i, f.get_str("destination")?)))
            .collect();
        for (i, message) in destination_clashes(&destinations) {
            ctx.error(
                pointer(&[
                    "execution",
                    "supporting_files",
                    &i.to_string(),
                    "destination",
                ]),
                "tao.supporting_file.duplicate_destination",
                message,
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

fn segments(dest: &str) -> impl Iterator<Item = &str> {
    dest.split('/').filter(|s| !s.is_empty() && *s != ".")
}

/// `a//b/./c` and `a/b/c` stage to the same place.
pub fn normalize_destination(dest: &str) -> String {
    segments(dest).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn supporting_paths() {
        assert!(supporting_path("scripts/a.py").is_ok());
        for bad in ["/abs", "../x", "a/../b", "a\\b", "a b", "a\0b", "a\u{1f}b"] {
            assert!(supporting_path(bad).is_err(), "{bad:?}");
        }
        assert!(supporting_path("a..b/c").is_ok());
    }
}
