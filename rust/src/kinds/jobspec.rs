//! forge/v2 JobSpec: the shape and field table of the seed, every check that
//! `starforge-core` makes, and the deployment rules (handshake, core version,
//! registry, observability, series, quotas) when a configuration is given.
//!
//! Unknown fields are warnings: a newer client may send them.

use std::collections::{HashMap, HashSet};

use crate::config::{core_version_allowed, CatalogEntry, CoreConfig, Observability};
use crate::kinds::Admission;
use crate::node::{few, quote, Type, Value};
use crate::pointer::pointer;
use crate::report::Severity;
use crate::schema::{
    self, array_of, opt, py_isspace, req, str_matching, Additional, Ctx, Field, ObjectShape,
    Pattern, Shape, ANY, COUNT_MAX, SAFE_SEGMENT, STRING,
};

pub const API_VERSION: &str = "forge/v2";
pub const KIND: &str = "TrainingJob";
const WARN: Additional = Additional::Forbid(Severity::Warning);

// ---------------------------------------------------------------- patterns

const fn pattern(rule: &'static str, test: schema::Test) -> Pattern {
    Pattern {
        rule,
        severity: Severity::Error,
        test,
    }
}

static NAME: Pattern = pattern("forge.name", schema::safe_segment);
static PROJECT: Pattern = pattern("forge.project", project);
static RECIPE_NAME: Pattern = pattern("forge.recipe.name", recipe_name);
static EXP: Pattern = pattern("forge.source.exp", exp_path);
static ENTRYPOINT: Pattern = pattern("forge.source.entrypoint", entrypoint);
static INIT_FROM: Pattern = pattern("forge.model.init_from", init_from);
static PLUGIN_DIGEST: Pattern = pattern("forge.plugins.digest", plugin_digest);
static NOT_BLANK: Pattern = pattern("schema.minLength", not_blank);
static CORE_VERSION: Pattern = pattern("forge.provenance.core_version", not_blank);
static OPTIONAL_SEGMENT: Pattern = pattern("schema.pattern", optional_segment);
static GATE_METRIC: Pattern = pattern("schema.pattern", gate_metric);

fn trim_py(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

fn not_blank(s: &str) -> Result<(), String> {
    if trim_py(s).is_empty() {
        Err("is blank".into())
    } else {
        Ok(())
    }
}

fn optional_segment(s: &str) -> Result<(), String> {
    if s.is_empty() {
        Ok(())
    } else {
        schema::safe_segment(s)
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
    match s.split_once('/') {
        Some((a, b)) if schema::is_safe_segment(a) && schema::is_safe_segment(b) => Ok(()),
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
    if trimmed.split('/').all(schema::is_safe_segment) {
        Ok(())
    } else {
        Err("has an unsafe segment: each must start with a letter or digit and hold only letters, digits, '.', '_' and '-'".into())
    }
}

fn entrypoint(s: &str) -> Result<(), String> {
    if trim_py(s).is_empty() {
        Ok(())
    } else {
        Err("overrides the recipe's entrypoint; leave it empty, or use the custom/custom recipe to run your own command".into())
    }
}

/// `run/<run_id>/<kind>` with an optional `@step=<N>`.
pub fn is_init_from(s: &str) -> bool {
    let (body, step) = match s.split_once('@') {
        Some((body, q)) => match q.strip_prefix("step=") {
            Some(n) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => (body, true),
            _ => return false,
        },
        None => (s, false),
    };
    let _ = step;
    let parts: Vec<&str> = body.split('/').collect();
    parts.len() == 3
        && parts[0] == "run"
        && schema::is_safe_segment(parts[1])
        && schema::is_safe_segment(parts[2])
}

fn init_from(s: &str) -> Result<(), String> {
    if trim_py(s).is_empty() || is_init_from(s) {
        Ok(())
    } else {
        Err("is not an artifact reference: run/<run_id>/<kind>, optionally @step=<N>".into())
    }
}

fn plugin_digest(s: &str) -> Result<(), String> {
    if trim_py(s).starts_with("sha256:") {
        Ok(())
    } else {
        Err("is not a plugin digest: it must start with sha256:".into())
    }
}

fn gate_metric(s: &str) -> Result<(), String> {
    if s.contains('/') {
        Ok(())
    } else {
        Err("is not <benchmark>/<metric key>, such as gsm8k/exact_match,strict-match".into())
    }
}

/// `<owner>/<name>[@version]`, each a safe segment.
pub fn is_data_ref(s: &str, version: Version) -> bool {
    let (id, ver) = match s.split_once('@') {
        Some((id, v)) => (id, Some(v)),
        None => (s, None),
    };
    let version_ok = match (version, ver) {
        (Version::Forbidden, Some(_)) | (Version::Required, None) => false,
        (_, Some(v)) => schema::is_safe_segment(v),
        (_, None) => true,
    };
    version_ok
        && matches!(id.split_once('/'), Some((o, n)) if schema::is_safe_segment(o) && schema::is_safe_segment(n))
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
        || s.contains("://")
        || s.starts_with("file:")
}

// ---------------------------------------------------------------- shapes

const OPT_STRING: Shape = Shape::Nullable(&STRING);
const NONBLANK: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: "schema.minLength",
    pattern: Some(&NOT_BLANK),
};
const COUNT: Shape = Shape::Int {
    min: Some(1),
    max: Some(COUNT_MAX),
    lexical: true,
};
const RATIO: Shape = Shape::Nullable(&Shape::Number {
    min: Some(0.0),
    max: Some(1.0),
});
const BOUND: Shape = Shape::Nullable(&Shape::Number {
    min: None,
    max: None,
});

static STRING_MAP: ObjectShape = ObjectShape {
    fields: &[],
    additional: Additional::Values(&STRING),
    keys: None,
};
static FREE_MAP: ObjectShape = ObjectShape {
    fields: &[],
    additional: Additional::Allow,
    keys: None,
};

/// An optional object that starforge-core also accepts as `null`.
macro_rules! object {
    ($shape:expr) => {
        Shape::Nullable(&Shape::Object($shape))
    };
}

/// An optional string, `null` accepted, checked by a pattern.
macro_rules! opt_str {
    ($p:expr) => {
        Shape::Nullable(&Shape::Str {
            min_len: 0,
            min_len_rule: "schema.minLength",
            pattern: Some($p),
        })
    };
}

static METADATA: ObjectShape = ObjectShape {
    fields: &[
        req("name", str_matching(&NAME)),
        opt("project", opt_str!(&PROJECT)),
        opt("owner", OPT_STRING),
        opt("display_name", OPT_STRING),
        opt("labels", object!(&STRING_MAP)),
    ],
    additional: WARN,
    keys: None,
};
static RECIPE: ObjectShape = ObjectShape {
    fields: &[
        req("name", str_matching(&RECIPE_NAME)),
        req("version", NONBLANK),
        req("digest", NONBLANK),
        opt(
            "plugins",
            Shape::Nullable(&array_of(&str_matching(&SAFE_SEGMENT))),
        ),
    ],
    additional: WARN,
    keys: None,
};
static SOURCE: ObjectShape = ObjectShape {
    fields: &[
        req("exp", str_matching(&EXP)),
        opt("entrypoint", opt_str!(&ENTRYPOINT)),
    ],
    additional: WARN,
    keys: None,
};
static FRAMEWORK: ObjectShape = ObjectShape {
    fields: &[
        req("kind", str_matching(&SAFE_SEGMENT)),
        req("version", NONBLANK),
        opt("runtime_id", opt_str!(&OPTIONAL_SEGMENT)),
        opt("image", OPT_STRING),
        opt("observability_url", OPT_STRING),
    ],
    additional: WARN,
    keys: None,
};
static POOL: ObjectShape = ObjectShape {
    fields: &[
        req("name", str_matching(&SAFE_SEGMENT)),
        opt("series", OPT_STRING),
        opt("nodes", COUNT),
        opt("gpus_per_node", COUNT),
    ],
    additional: WARN,
    keys: None,
};
static RESOURCES: ObjectShape = ObjectShape {
    fields: &[
        opt("pools", Shape::Nullable(&array_of(&Shape::Object(&POOL)))),
        opt("roles", object!(&STRING_MAP)),
    ],
    additional: WARN,
    keys: None,
};
static PEFT: ObjectShape = ObjectShape {
    fields: &[opt("kind", OPT_STRING), opt("dim", ANY), opt("alpha", ANY)],
    additional: WARN,
    keys: None,
};
static MODEL: ObjectShape = ObjectShape {
    fields: &[
        opt("base", OPT_STRING),
        opt("peft", object!(&PEFT)),
        opt("init_from", opt_str!(&INIT_FROM)),
    ],
    additional: WARN,
    keys: None,
};
static DATA_REF: ObjectShape = ObjectShape {
    fields: &[
        opt("dataset", OPT_STRING),
        opt("split", OPT_STRING),
        opt("path", OPT_STRING),
    ],
    additional: WARN,
    keys: None,
};
static QUALITY: ObjectShape = ObjectShape {
    fields: &[
        opt("max_duplicate_ratio", RATIO),
        opt("overlap_with", OPT_STRING),
        opt("max_overlap_ratio", RATIO),
    ],
    additional: WARN,
    keys: None,
};
static DATA: ObjectShape = ObjectShape {
    fields: &[
        opt("train", object!(&DATA_REF)),
        opt("validation", object!(&DATA_REF)),
        opt("corpus", OPT_STRING),
        opt("volumes", Shape::Nullable(&array_of(&STRING))),
        opt("output_dataset", OPT_STRING),
        opt("environment", OPT_STRING),
        opt("quality", object!(&QUALITY)),
    ],
    additional: WARN,
    keys: None,
};
static LIFECYCLE: ObjectShape = ObjectShape {
    fields: &[opt(
        "on_success",
        Shape::Nullable(&array_of(&str_matching(&SAFE_SEGMENT))),
    )],
    additional: WARN,
    keys: None,
};
static GATE: ObjectShape = ObjectShape {
    fields: &[
        req("metric", str_matching(&GATE_METRIC)),
        opt("min", BOUND),
        opt("max", BOUND),
        opt(
            "max_regression",
            Shape::Nullable(&Shape::Number {
                min: Some(0.0),
                max: None,
            }),
        ),
    ],
    additional: WARN,
    keys: None,
};
static EVALUATION: ObjectShape = ObjectShape {
    fields: &[
        opt(
            "suites",
            Shape::Nullable(&array_of(&str_matching(&SAFE_SEGMENT))),
        ),
        opt("runner", OPT_STRING),
        opt("baseline", OPT_STRING),
        opt("limit", Shape::Nullable(&COUNT)),
        opt("gates", Shape::Nullable(&array_of(&Shape::Object(&GATE)))),
    ],
    additional: WARN,
    keys: None,
};
static PLUGIN: ObjectShape = ObjectShape {
    fields: &[
        req("id", STRING),
        req("version", NONBLANK),
        req("digest", str_matching(&PLUGIN_DIGEST)),
    ],
    additional: WARN,
    keys: None,
};
static SPEC: ObjectShape = ObjectShape {
    fields: &[
        req("recipe", Shape::Object(&RECIPE)),
        req("source", Shape::Object(&SOURCE)),
        req("framework", Shape::Object(&FRAMEWORK)),
        req("resources", Shape::Object(&RESOURCES)),
        opt("model", object!(&MODEL)),
        opt("data", object!(&DATA)),
        opt("hyperparams", object!(&FREE_MAP)),
        opt("lifecycle", object!(&LIFECYCLE)),
        opt("evaluation", object!(&EVALUATION)),
        opt(
            "plugins",
            Shape::Nullable(&array_of(&Shape::Object(&PLUGIN))),
        ),
    ],
    additional: WARN,
    keys: None,
};
static PROVENANCE: ObjectShape = ObjectShape {
    fields: &[
        Field {
            name: "core_version",
            shape: Shape::Str {
                min_len: 1,
                min_len_rule: "forge.provenance.core_version",
                pattern: Some(&CORE_VERSION),
            },
            required: true,
            missing_rule: "forge.provenance.core_version",
        },
        opt("git_commit", OPT_STRING),
        opt("git_dirty", Shape::Nullable(&schema::BOOL)),
        opt("config_sha", OPT_STRING),
        opt("model_name", OPT_STRING),
    ],
    additional: WARN,
    keys: None,
};
static JOBSPEC: ObjectShape = ObjectShape {
    fields: &[
        Field {
            name: "apiVersion",
            shape: Shape::Custom(api_version),
            required: true,
            missing_rule: "forge.api_version",
        },
        Field {
            name: "kind",
            shape: Shape::Custom(kind),
            required: true,
            missing_rule: "forge.kind",
        },
        req("metadata", Shape::Object(&METADATA)),
        req("spec", Shape::Object(&SPEC)),
        req("provenance", Shape::Object(&PROVENANCE)),
    ],
    additional: WARN,
    keys: None,
};

fn api_version<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if v.as_str() != Some(API_VERSION) {
        ctx.here(
            "forge.api_version",
            Severity::Error,
            format!(
                "apiVersion is {}; this gate speaks exactly \"{API_VERSION}\"",
                v.describe()
            ),
        );
    }
}

fn kind<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if v.as_str() != Some(KIND) {
        ctx.here(
            "forge.kind",
            Severity::Error,
            format!(
                "kind is {}; the only kind admitted is \"{KIND}\"",
                v.describe()
            ),
        );
    }
}

// ---------------------------------------------------------------- semantic rules

pub fn check<'t, 'i>(
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'i>,
) {
    schema::walk(root, &Shape::Object(&JOBSPEC), ctx);
    project_grant(root, admission, ctx);
    let spec = root.get("spec").filter(|s| s.is_object());
    if let Some(spec) = spec {
        resources(spec, root, config, admission, ctx);
        data(spec, ctx);
        plugins(spec, ctx);
        evaluation(spec, ctx);
        framework(spec, root, config, ctx);
    }
    if let (Some(account), Some(sent)) = (
        &admission.owner,
        root.at(&["metadata", "owner"]).and_then(|o| o.as_str()),
    ) {
        let sent = trim_py(sent);
        if !sent.is_empty() && sent != account {
            ctx.warning(
                pointer(&["metadata", "owner"]),
                "forge.owner_overridden",
                format!("the client sent owner {} but the job is stamped with the authenticated account {}", quote(sent), quote(account)),
            );
        }
    }
}

/// A JobSpec admitted only into a project the account is granted.
fn project_grant(root: Value<'_, '_>, admission: &Admission, ctx: &mut Ctx<'_>) {
    let project = str_of(root.at(&["metadata", "project"]));
    if !admission.may_submit_to(project) {
        let granted = admission.projects.as_deref().unwrap_or_default();
        ctx.error(
            pointer(&["metadata", "project"]),
            "forge.project.forbidden",
            format!(
                "this account may not submit to project {}; it may submit to {}",
                quote(project),
                few(granted)
            ),
        );
    }
}

fn str_of<'i>(v: Option<Value<'_, 'i>>) -> &'i str {
    v.and_then(|v| v.as_str()).map_or("", trim_py)
}

fn count(v: Option<Value<'_, '_>>) -> Option<u64> {
    match v {
        None => Some(1),
        Some(v) => v
            .as_lexical_int()
            .filter(|n| (1..=COUNT_MAX as i128).contains(n))
            .and_then(|n| u64::try_from(n).ok()),
    }
}

fn resources(
    spec: Value<'_, '_>,
    root: Value<'_, '_>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'_>,
) {
    let Some(res) = spec.get("resources").filter(|r| r.is_object()) else {
        return;
    };
    let pools = res.get("pools");
    let empty = matches!(
        pools.map(|p| p.ty()),
        None | Some(Type::Null) | Some(Type::Array(0))
    );
    if empty {
        ctx.error(pointer(&["spec", "resources", "pools"]), "forge.resources.pools_empty", "spec.resources.pools is missing or empty; declare at least one pool, e.g. {\"name\": \"train\", \"nodes\": 1, \"gpus_per_node\": 8}".into());
    }
    // Sets, not lists: thousands of pools and roles must cost linear time.
    let mut names: Vec<&str> = Vec::new();
    let mut named: HashSet<&str> = HashSet::new();
    let mut total: Option<u64> = Some(0);
    for (i, pool) in pools.map(|p| p.items()).into_iter().flatten().enumerate() {
        if let Some(name) = pool.get_str("name") {
            if !named.insert(name) {
                ctx.error(
                    pointer(&["spec", "resources", "pools", &i.to_string(), "name"]),
                    "forge.resources.pool_duplicate",
                    format!(
                        "another pool is already named {}; pool names must be unique",
                        quote(name)
                    ),
                );
            } else {
                names.push(name);
            }
        }
        if let (Some(offered), Some(series)) = (&config.series, pool.get_str("series")) {
            let series = trim_py(series);
            if !series.is_empty() && !offered.iter().any(|s| s == series) {
                ctx.error(
                    pointer(&["spec", "resources", "pools", &i.to_string(), "series"]),
                    "forge.resources.series",
                    format!(
                        "GPU series {} is not offered here; choose one of {}",
                        quote(series),
                        few(offered)
                    ),
                );
            }
        }
        let gpus = count(pool.get("nodes"))
            .zip(count(pool.get("gpus_per_node")))
            .map(|(n, g)| n.saturating_mul(g));
        total = total.zip(gpus).map(|(t, g)| t.saturating_add(g));
    }
    if let Some(roles) = res.get("roles") {
        for (role, target) in roles.entries() {
            let Some(target) = target.as_str() else {
                continue;
            };
            if !named.contains(target) {
                ctx.error(
                    pointer(&["spec", "resources", "roles", role]),
                    "forge.resources.role_pool",
                    format!(
                        "role {} names pool {}, which is not declared; declared pools: {}",
                        quote(role),
                        quote(target),
                        few(&names)
                    ),
                );
            }
        }
    }
    let Some(total) = total.filter(|_| !empty) else {
        return;
    };
    if total > COUNT_MAX as u64 {
        ctx.error(pointer(&["spec", "resources"]), "forge.quota.job", format!("the job asks for {total} GPUs (nodes * gpus_per_node over all pools), more than the {COUNT_MAX} any job may ask for"));
        return;
    }
    if let Some(limit) = config.max_gpus_per_job {
        if total > limit {
            ctx.error(pointer(&["spec", "resources"]), "forge.quota.job", format!("the job asks for {total} GPUs (nodes * gpus_per_node over all pools), over the per-job limit of {limit}"));
        }
    }
    let project = root
        .at(&["metadata", "project"])
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if let Some((quota, in_use)) = admission.quota_for(project) {
        if in_use.saturating_add(total) > quota {
            let project = str_of(root.at(&["metadata", "project"]));
            ctx.error(pointer(&["spec", "resources"]), "forge.quota.project", format!("project {} holds {in_use} GPUs in unfinished jobs; {total} more would exceed its quota of {quota}", quote(project)));
        }
    }
}

fn data(spec: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(data) = spec.get("data").filter(|d| d.is_object()) else {
        return;
    };
    // Where each governed reference lives under /spec/data, and whether it takes a version.
    const REFS: [(&[&str], Version); 6] = [
        (&["train", "dataset"], Version::Optional),
        (&["validation", "dataset"], Version::Optional),
        (&["corpus"], Version::Optional),
        (&["output_dataset"], Version::Required),
        (&["environment"], Version::Optional),
        (&["quality", "overlap_with"], Version::Optional),
    ];
    let mut leaves: Vec<(&str, &str)> = Vec::new();
    if let Some(volumes) = data.get("volumes") {
        for (i, v) in volumes.items().enumerate() {
            let Some(s) = v.as_str() else { continue };
            let field = pointer(&["spec", "data", "volumes", &i.to_string()]);
            let s = trim_py(s);
            if is_host_path(s) {
                ctx.error(field, "forge.data.host_path", format!("{} is a host path or URL; name the volume as <owner>/<name> so the access check applies", quote(s)));
            } else if !is_data_ref(s, Version::Forbidden) {
                ctx.error(
                    field,
                    "forge.data.ref",
                    format!(
                        "{} is not a volume reference <owner>/<name> (a volume has no version)",
                        quote(s)
                    ),
                );
            } else if let Some((owner, leaf)) = s.split_once('/') {
                if let Some((other, _)) = leaves.iter().find(|(o, l)| *l == leaf && *o != owner) {
                    ctx.error(field, "forge.data.ref", format!("volumes {other}/{leaf} and {owner}/{leaf} would mount at the same path"));
                }
                leaves.push((owner, leaf));
            }
        }
    }
    for (keys, version) in REFS {
        let Some(raw) = data.at(keys).and_then(|v| v.as_str()) else {
            continue;
        };
        let s = trim_py(raw);
        if s.is_empty() {
            continue;
        }
        let field = || format!("/spec/data/{}", keys.join("/"));
        if is_host_path(s) {
            ctx.error(field(), "forge.data.host_path", format!("{} is a host path or URL; a dataset or corpus is named <owner>/<name>[@version] so the platform can check access and mount it", quote(s)));
        } else if !is_data_ref(s, version) {
            let shape = if version == Version::Required {
                "<owner>/<name>@<version>"
            } else {
                "<owner>/<name>[@version]"
            };
            ctx.error(
                field(),
                "forge.data.ref",
                format!(
                    "{} is not a reference of the form {shape} made of safe segments",
                    quote(s)
                ),
            );
        }
    }
    if let Some(q) = data.get("quality").filter(|q| q.is_object()) {
        let has = |k: &str| q.get(k).is_some_and(|v| !v.is_null());
        if has("max_overlap_ratio") && str_of(q.get("overlap_with")).is_empty() {
            ctx.error(
                pointer(&["spec", "data", "quality", "overlap_with"]),
                "schema.dependentRequired",
                "max_overlap_ratio needs overlap_with to say which dataset it is compared against"
                    .into(),
            );
        }
    }
}

fn plugins(spec: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(plugins) = spec.get("plugins") else {
        return;
    };
    let mut ids: HashSet<(&str, &str)> = HashSet::new();
    // The first owner seen for each leaf name.
    let mut leaves: HashMap<&str, &str> = HashMap::new();
    for (i, p) in plugins.items().enumerate() {
        let Some(id) = p.get_str("id") else { continue };
        let field = pointer(&["spec", "plugins", &i.to_string(), "id"]);
        let id = trim_py(id);
        let Some((owner, name)) = id
            .split_once('/')
            .filter(|(o, n)| schema::is_safe_segment(o) && schema::is_safe_segment(n))
        else {
            ctx.error(
                field,
                "forge.plugins.id",
                format!("{} is not a plugin id <owner>/<name>", quote(id)),
            );
            continue;
        };
        if ids.contains(&(owner, name)) {
            ctx.error(
                field,
                "forge.plugins.duplicate",
                format!("plugin {} is listed twice", quote(id)),
            );
        } else if let Some(other) = leaves.get(name).filter(|o| **o != owner) {
            ctx.error(field, "forge.plugins.leaf_collision", format!("plugins {other}/{name} and {id} would both unpack to forge_plugins/{name}; they cannot be combined"));
        }
        ids.insert((owner, name));
        leaves.entry(name).or_insert(owner);
    }
}

fn evaluation(spec: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(eval) = spec.get("evaluation").filter(|e| e.is_object()) else {
        return;
    };
    let suites: Vec<&str> = eval
        .get("suites")
        .map(|s| {
            s.items()
                .filter_map(|v| v.as_str())
                .map(trim_py)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let suite_set: HashSet<&str> = suites.iter().copied().collect();
    let Some(gates) = eval.get("gates") else {
        return;
    };
    if matches!(gates.ty(), Type::Array(n) if n > 0) && suites.is_empty() {
        ctx.error(pointer(&["spec", "evaluation", "suites"]), "forge.evaluation.gate", "gates are declared without any suites to run, so nothing would ever be judged against them".into());
    }
    for (i, g) in gates.items().enumerate() {
        if !g.is_object() {
            continue;
        }
        let bounded = ["min", "max", "max_regression"]
            .iter()
            .any(|k| g.get(k).is_some_and(|v| !v.is_null()));
        if !bounded {
            ctx.error(
                pointer(&["spec", "evaluation", "gates", &i.to_string()]),
                "forge.evaluation.gate",
                "this gate has none of min, max or max_regression, so it decides nothing".into(),
            );
        }
        if let Some(metric) = g.get_str("metric") {
            let benchmark = trim_py(metric).split('/').next().unwrap_or("");
            if metric.contains('/') && !suites.is_empty() && !suite_set.contains(benchmark) {
                ctx.error(
                    pointer(&["spec", "evaluation", "gates", &i.to_string(), "metric"]),
                    "forge.evaluation.gate",
                    format!(
                        "benchmark {} is not in suites ({})",
                        quote(benchmark),
                        few(&suites)
                    ),
                );
            }
        }
    }
}

/// The registry host of an image reference, as a container runtime reads it.
pub fn registry_host(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_ascii_lowercase()
        }
        _ => "docker.io".into(),
    }
}

fn registry_allowed(host: &str, allow: &[String]) -> bool {
    allow.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        match a.strip_prefix("*.") {
            Some(suffix) => host.ends_with(&format!(".{suffix}")),
            None => a == host,
        }
    })
}

fn framework(spec: Value<'_, '_>, root: Value<'_, '_>, config: &CoreConfig, ctx: &mut Ctx<'_>) {
    let recipe = spec.get("recipe").filter(|r| r.is_object());
    let fw = spec.get("framework").filter(|f| f.is_object());
    let recipe_name = str_of(recipe.and_then(|r| r.get("name")));
    let image = str_of(fw.and_then(|f| f.get("image")));
    let entry: Option<&CatalogEntry> = config.catalog.as_ref().and_then(|c| c.get(recipe_name));

    let custom = recipe_name == "custom/custom" || entry.is_some_and(|e| e.custom);
    if custom && fw.is_some() && image.is_empty() {
        ctx.error(
            pointer(&["spec", "framework", "image"]),
            "forge.framework.image_required",
            format!(
                "recipe {} is a custom job and brings no image; set spec.framework.image",
                quote(recipe_name)
            ),
        );
    }
    if let (Some(allow), false) = (&config.registries, image.is_empty()) {
        let host = registry_host(image);
        if !registry_allowed(&host, allow) {
            ctx.error(pointer(&["spec", "framework", "image"]), "forge.framework.image_registry", format!("image {} comes from registry {}, which is not on this deployment's allowlist ({})", quote(image), quote(&host), few(allow)));
        }
    }
    let Some(catalog) = &config.catalog else {
        return;
    };
    if recipe.is_none() || !recipe_name.contains('/') {
        return;
    }
    let Some(entry) = entry else {
        let mut known: Vec<&str> = catalog.keys().map(String::as_str).collect();
        known.sort_unstable();
        ctx.error(pointer(&["spec", "recipe", "name"]), "forge.handshake.recipe_unknown", format!("the catalog has no recipe {}; `sf recipe status` reports it as removed (catalog: {}); lock a served recipe with `sf recipe upgrade`", quote(recipe_name), few(&known)));
        return;
    };
    let handshake = [
        (
            recipe.and_then(|r| r.get("version")),
            &entry.version,
            pointer(&["spec", "recipe", "version"]),
            "forge.handshake.version",
            "recipe version",
        ),
        (
            recipe.and_then(|r| r.get("digest")),
            &entry.digest,
            pointer(&["spec", "recipe", "digest"]),
            "forge.handshake.digest",
            "recipe digest",
        ),
        (
            fw.and_then(|f| f.get("runtime_id")),
            &entry.runtime_id,
            pointer(&["spec", "framework", "runtime_id"]),
            "forge.handshake.runtime_id",
            "framework.runtime_id",
        ),
    ];
    for (sent, expected, field, rule, what) in handshake {
        if sent.is_some_and(|s| !s.is_null() && s.as_str().is_none()) {
            continue; // a type error already reported
        }
        let sent = str_of(sent);
        if sent != expected.as_str() {
            ctx.error(field, rule, format!("{what} {} differs from the catalog's {} for {recipe_name}; `sf recipe status` reports the lock as out of date and `sf recipe upgrade` fixes it", quote(sent), quote(expected)));
        }
    }
    if let Some((raw, specifiers)) = &entry.requires_core {
        let cv = str_of(root.at(&["provenance", "core_version"]));
        if !cv.is_empty() {
            let allowed = core_version_allowed(specifiers, cv);
            if allowed != Ok(true) {
                let why = match allowed {
                    Err(e) => format!(" ({cv:?} is not a PEP 440 version: {e})"),
                    _ => String::new(),
                };
                ctx.error(pointer(&["provenance", "core_version"]), "forge.core_version.unsupported", format!("core version {cv} is outside {raw}, the range recipe {recipe_name} requires{why}; `sf recipe status` reports sdk_incompatible, upgrade the client or `sf recipe upgrade`"));
            }
        }
    }
    let url = str_of(fw.and_then(|f| f.get("observability_url")));
    match entry.observability {
        Observability::External if url.is_empty() && fw.is_some() => {
            ctx.error(pointer(&["spec", "framework", "observability_url"]), "forge.framework.observability_url_required", format!("recipe {recipe_name} reports to external observability; set spec.framework.observability_url"));
        }
        Observability::Platform if !url.is_empty() => {
            ctx.error(pointer(&["spec", "framework", "observability_url"]), "forge.framework.observability_url_forbidden", format!("recipe {recipe_name} uses the platform's observability; remove observability_url {}", quote(url)));
        }
        _ => {}
    }
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

    #[test]
    fn registry_hosts() {
        assert_eq!(registry_host("nvcr.io/nvidia/tao:1"), "nvcr.io");
        assert_eq!(registry_host("localhost:5000/x"), "localhost:5000");
        assert_eq!(registry_host("ubuntu:22.04"), "docker.io");
        assert_eq!(registry_host("library/ubuntu"), "docker.io");
        assert!(registry_allowed("a.example.com", &["*.example.com".into()]));
    }
}
