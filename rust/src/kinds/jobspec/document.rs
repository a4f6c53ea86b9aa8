//! The JobSpec rules that read only the document: pools and roles, data references,
//! plugins and evaluation gates. The rules that read the deployment's configuration
//! or the admission are in `deployment`.

use std::collections::HashMap;

use crate::node::{few, quote, Type, Value};
use crate::pointer::pointer;
use crate::rules::Rule;
use crate::schema::{Ctx, COUNT_MAX};
use crate::seen::Seen;
use crate::text::{has_byte, is_safe_segment, py_trim, split_once_byte};

use super::patterns::{is_data_ref, is_host_path, str_of, Version};

/// `forge.resources.pools_empty`: no pool to run on. Returns whether pools are missing
/// or empty (the GPU count of such a job means nothing).
pub fn pools_declared(pools: Option<Value<'_, '_>>, ctx: &mut Ctx<'_>) -> bool {
    let empty = matches!(
        pools.map(|p| p.ty()),
        None | Some(Type::Null) | Some(Type::Array(0))
    );
    if empty {
        ctx.at(pointer(&["spec", "resources", "pools"]), Rule::ForgeResourcesPoolsEmpty, "spec.resources.pools is missing or empty; declare at least one pool, e.g. {\"name\": \"train\", \"nodes\": 1, \"gpus_per_node\": 8}".into());
    }
    empty
}

/// The pools seen so far: their names, for duplicates and roles, and the GPUs they ask
/// for together (`None` once a count cannot be read; the shape reports it).
pub struct Pools<'i> {
    // Sets, not lists: thousands of pools and roles must cost linear time.
    names: Vec<&'i str>,
    named: Seen<&'i str>,
    pub gpus: Option<u64>,
}

impl<'i> Pools<'i> {
    pub fn new() -> Self {
        Pools {
            names: Vec::new(),
            named: Seen::new(),
            gpus: Some(0),
        }
    }

    /// Pool `i`: `forge.resources.pool_duplicate` when its name is taken, and its GPUs.
    pub fn add(&mut self, i: usize, pool: Value<'_, 'i>, ctx: &mut Ctx<'_>) {
        if let Some(name) = pool.get_str("name") {
            if !self.named.insert(name) {
                ctx.at(
                    pointer(&["spec", "resources", "pools", &i.to_string(), "name"]),
                    Rule::ForgeResourcesPoolDuplicate,
                    format!(
                        "another pool is already named {}; pool names must be unique",
                        quote(name)
                    ),
                );
            } else {
                self.names.push(name);
            }
        }
        let gpus = count(pool.get("nodes"))
            .zip(count(pool.get("gpus_per_node")))
            .map(|(n, g)| n.saturating_mul(g));
        self.gpus = self.gpus.zip(gpus).map(|(t, g)| t.saturating_add(g));
    }

    /// `forge.resources.role_pool`: every role names a declared pool.
    pub fn roles(&self, resources: Value<'_, '_>, ctx: &mut Ctx<'_>) {
        let Some(roles) = resources.get("roles") else {
            return;
        };
        for (role, target) in roles.entries() {
            let Some(target) = target.as_str() else {
                continue;
            };
            if !self.named.contains(&target) {
                ctx.at(
                    pointer(&["spec", "resources", "roles", role]),
                    Rule::ForgeResourcesRolePool,
                    format!(
                        "role {} names pool {}, which is not declared; declared pools: {}",
                        quote(role),
                        quote(target),
                        few(&self.names)
                    ),
                );
            }
        }
    }
}

/// A pool's `nodes` or `gpus_per_node`: 1 when absent, `None` when not a valid count.
fn count(v: Option<Value<'_, '_>>) -> Option<u64> {
    match v {
        None => Some(1),
        Some(v) => v
            .as_lexical_int()
            .filter(|n| (1..=COUNT_MAX as i128).contains(n))
            .and_then(|n| u64::try_from(n).ok()),
    }
}

pub fn data(spec: Value<'_, '_>, ctx: &mut Ctx<'_>) {
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
            let field = || pointer(&["spec", "data", "volumes", &i.to_string()]);
            let s = py_trim(s);
            if is_host_path(s) {
                ctx.at(field(), Rule::ForgeDataHostPath, format!("{} is a host path or URL; name the volume as <owner>/<name> so the access check applies", quote(s)));
            } else if !is_data_ref(s, Version::Forbidden) {
                ctx.at(
                    field(),
                    Rule::ForgeDataRef,
                    format!(
                        "{} is not a volume reference <owner>/<name> (a volume has no version)",
                        quote(s)
                    ),
                );
            } else if let Some((owner, leaf)) = split_once_byte(s, b'/') {
                if let Some((other, _)) = leaves.iter().find(|(o, l)| *l == leaf && *o != owner) {
                    ctx.at(field(), Rule::ForgeDataRef, format!("volumes {other}/{leaf} and {owner}/{leaf} would mount at the same path"));
                }
                leaves.push((owner, leaf));
            }
        }
    }
    for (keys, version) in REFS {
        let Some(raw) = data.at(keys).and_then(|v| v.as_str()) else {
            continue;
        };
        let s = py_trim(raw);
        if s.is_empty() {
            continue;
        }
        let field = || format!("/spec/data/{}", keys.join("/"));
        if is_host_path(s) {
            ctx.at(field(), Rule::ForgeDataHostPath, format!("{} is a host path or URL; a dataset or corpus is named <owner>/<name>[@version] so the platform can check access and mount it", quote(s)));
        } else if !is_data_ref(s, version) {
            let shape = if version == Version::Required {
                "<owner>/<name>@<version>"
            } else {
                "<owner>/<name>[@version]"
            };
            ctx.at(
                field(),
                Rule::ForgeDataRef,
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
            ctx.at(
                pointer(&["spec", "data", "quality", "overlap_with"]),
                Rule::SchemaDependentRequired,
                "max_overlap_ratio needs overlap_with to say which dataset it is compared against"
                    .into(),
            );
        }
    }
}

pub fn plugins(spec: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(plugins) = spec.get("plugins") else {
        return;
    };
    let mut ids: Seen<(&str, &str)> = Seen::new();
    // The first owner seen for each leaf name.
    let mut leaves: HashMap<&str, &str> = HashMap::new();
    for (i, p) in plugins.items().enumerate() {
        let Some(id) = p.get_str("id") else { continue };
        let field = || pointer(&["spec", "plugins", &i.to_string(), "id"]);
        let id = py_trim(id);
        let Some((owner, name)) =
            split_once_byte(id, b'/').filter(|(o, n)| is_safe_segment(o) && is_safe_segment(n))
        else {
            ctx.at(
                field(),
                Rule::ForgePluginsId,
                format!("{} is not a plugin id <owner>/<name>", quote(id)),
            );
            continue;
        };
        if ids.contains(&(owner, name)) {
            ctx.at(
                field(),
                Rule::ForgePluginsDuplicate,
                format!("plugin {} is listed twice", quote(id)),
            );
        } else if let Some(other) = leaves.get(name).filter(|o| **o != owner) {
            ctx.at(field(), Rule::ForgePluginsLeafCollision, format!("plugins {other}/{name} and {id} would both unpack to forge_plugins/{name}; they cannot be combined"));
        }
        ids.insert((owner, name));
        leaves.entry(name).or_insert(owner);
    }
}

pub fn evaluation(spec: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let Some(eval) = spec.get("evaluation").filter(|e| e.is_object()) else {
        return;
    };
    let suites: Vec<&str> = eval
        .get("suites")
        .map(|s| {
            s.items()
                .filter_map(|v| v.as_str())
                .map(py_trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let suite_set: Seen<&str> = suites.iter().copied().collect();
    let Some(gates) = eval.get("gates") else {
        return;
    };
    if matches!(gates.ty(), Type::Array(n) if n > 0) && suites.is_empty() {
        ctx.at(pointer(&["spec", "evaluation", "suites"]), Rule::ForgeEvaluationGate, "gates are declared without any suites to run, so nothing would ever be judged against them".into());
    }
    for (i, g) in gates.items().enumerate() {
        if !g.is_object() {
            continue;
        }
        let bounded = ["min", "max", "max_regression"]
            .iter()
            .any(|k| g.get(k).is_some_and(|v| !v.is_null()));
        if !bounded {
            ctx.at(
                pointer(&["spec", "evaluation", "gates", &i.to_string()]),
                Rule::ForgeEvaluationGate,
                "this gate has none of min, max or max_regression, so it decides nothing".into(),
            );
        }
        if let Some(metric) = g.get_str("metric") {
            let benchmark = py_trim(metric).split('/').next().unwrap_or("");
            if has_byte(metric, b'/') && !suites.is_empty() && !suite_set.contains(&benchmark) {
                ctx.at(
                    pointer(&["spec", "evaluation", "gates", &i.to_string(), "metric"]),
                    Rule::ForgeEvaluationGate,
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
