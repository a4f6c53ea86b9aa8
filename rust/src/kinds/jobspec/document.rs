//! The JobSpec rules that read only the document: pools and roles, data references,
//! plugins and evaluation gates. The rules that read the deployment's configuration
//! or the admission are in `deployment`.

use crate::node::{few, few_of, quote, Type, Value};

use crate::collect::Ctx;
use crate::pointer::ptr;
use crate::rules::Rule;
use crate::seen::{FirstSeen, Seen};
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
        ctx.report(Rule::ForgeResourcesPoolsEmpty, ptr!["spec", "resources", "pools"], || "spec.resources.pools is missing or empty; declare at least one pool, e.g. {\"name\": \"train\", \"nodes\": 1, \"gpus_per_node\": 8}".into());
    }
    empty
}

/// The pools seen so far: their names, for duplicates and roles. (What they ask for
/// is counted by `gpus`.)
pub struct Pools<'i> {
    // A set, not a list: thousands of pools and roles must cost linear time. It keeps
    // the first names in order, which is all a message names.
    named: Seen<&'i str>,
}

impl<'i> Pools<'i> {
    pub fn new() -> Self {
        Pools { named: Seen::new() }
    }

    /// Pool `i`: `forge.resources.pool_duplicate` when its name is taken.
    pub fn add(&mut self, i: usize, pool: Value<'_, 'i>, ctx: &mut Ctx<'_>) {
        if let Some(name) = pool.get_str("name") {
            if !self.named.insert(name) {
                ctx.report(
                    Rule::ForgeResourcesPoolDuplicate,
                    ptr!["spec", "resources", "pools", i, "name"],
                    || {
                        format!(
                            "another pool is already named {}; pool names must be unique",
                            quote(name)
                        )
                    },
                );
            }
        }
    }

    /// `forge.resources.role_pool`: every role names a declared pool.
    pub fn roles(&self, roles: Option<Value<'_, '_>>, ctx: &mut Ctx<'_>) {
        let Some(roles) = roles else {
            return;
        };
        for (role, target) in roles.entries() {
            let Some(target) = target.as_str() else {
                continue;
            };
            if !self.named.contains(&target) {
                ctx.report(
                    Rule::ForgeResourcesRolePool,
                    ptr!["spec", "resources", "roles", role],
                    || {
                        format!(
                            "role {} names pool {}, which is not declared; declared pools: {}",
                            quote(role),
                            quote(target),
                            few_of(self.named.first(), self.named.len())
                        )
                    },
                );
            }
        }
    }
}

/// `spec.data`: volumes and the governed references (datasets, corpus, environment).
pub fn data(data: Option<Value<'_, '_>>, ctx: &mut Ctx<'_>) {
    let Some(data) = data.filter(|d| d.is_object()) else {
        return;
    };
    let [train, validation, corpus, output_dataset, environment, quality, volumes] =
        data.get_each([
            "train",
            "validation",
            "corpus",
            "output_dataset",
            "environment",
            "quality",
            "volumes",
        ]);
    let mut leaves: Vec<(&str, &str)> = Vec::new();
    if let Some(volumes) = volumes {
        for (i, v) in volumes.items().enumerate() {
            let Some(s) = v.as_str() else { continue };
            let field = ptr!["spec", "data", "volumes", i];
            let s = py_trim(s);
            // A reference is never a host path, so the common case is settled by the
            // reference's pattern alone.
            let is_ref = is_data_ref(s, Version::Forbidden);
            if !is_ref && is_host_path(s) {
                ctx.report(Rule::ForgeDataHostPath, field, || format!("{} is a host path or URL; name the volume as <owner>/<name> so the access check applies", quote(s)));
            } else if !is_ref {
                ctx.report(Rule::ForgeDataRef, field, || {
                    format!(
                        "{} is not a volume reference <owner>/<name> (a volume has no version)",
                        quote(s)
                    )
                });
            } else if let Some((owner, leaf)) = split_once_byte(s, b'/') {
                if let Some((other, _)) = leaves.iter().find(|(o, l)| *l == leaf && *o != owner) {
                    ctx.report(Rule::ForgeDataRef, field, || format!("volumes {other}/{leaf} and {owner}/{leaf} would mount at the same path"));
                }
                leaves.push((owner, leaf));
            }
        }
    }
    let quality = quality.filter(|q| q.is_object());
    // Each governed reference, where it lives under /spec/data, and whether it takes a version.
    let refs = [
        (
            train.and_then(|t| t.get("dataset")),
            &["train", "dataset"][..],
            Version::Optional,
        ),
        (
            validation.and_then(|v| v.get("dataset")),
            &["validation", "dataset"][..],
            Version::Optional,
        ),
        (corpus, &["corpus"], Version::Optional),
        (output_dataset, &["output_dataset"], Version::Required),
        (environment, &["environment"], Version::Optional),
        (
            quality.and_then(|q| q.get("overlap_with")),
            &["quality", "overlap_with"],
            Version::Optional,
        ),
    ];
    for (value, at, version) in refs {
        let Some(raw) = value.and_then(|v| v.as_str()) else {
            continue;
        };
        let s = py_trim(raw);
        if s.is_empty() {
            continue;
        }
        let field = ptr!["spec", "data", at];
        let is_ref = is_data_ref(s, version);
        if !is_ref && is_host_path(s) {
            ctx.report(Rule::ForgeDataHostPath, field, || format!("{} is a host path or URL; a dataset or corpus is named <owner>/<name>[@version] so the platform can check access and mount it", quote(s)));
        } else if !is_ref {
            let shape = if version == Version::Required {
                "<owner>/<name>@<version>"
            } else {
                "<owner>/<name>[@version]"
            };
            ctx.report(Rule::ForgeDataRef, field, || {
                format!(
                    "{} is not a reference of the form {shape} made of safe segments",
                    quote(s)
                )
            });
        }
    }
    if let Some(q) = quality {
        let [max_overlap_ratio, overlap_with] = q.get_each(["max_overlap_ratio", "overlap_with"]);
        if max_overlap_ratio.is_some_and(|v| !v.is_null()) && str_of(overlap_with).is_empty() {
            ctx.report(Rule::SchemaDependentRequired, ptr!["spec", "data", "quality", "overlap_with"], || "max_overlap_ratio needs overlap_with to say which dataset it is compared against"
                    .into());
        }
    }
}

pub fn plugins(plugins: Option<Value<'_, '_>>, ctx: &mut Ctx<'_>) {
    let Some(plugins) = plugins else {
        return;
    };
    let mut ids: Seen<(&str, &str)> = Seen::new();
    // The first owner seen for each leaf name.
    let mut leaves: FirstSeen<&str, &str> = FirstSeen::new();
    for (i, p) in plugins.items().enumerate() {
        let Some(id) = p.get_str("id") else { continue };
        let field = ptr!["spec", "plugins", i, "id"];
        let id = py_trim(id);
        let Some((owner, name)) =
            split_once_byte(id, b'/').filter(|(o, n)| is_safe_segment(o) && is_safe_segment(n))
        else {
            ctx.report(Rule::ForgePluginsId, field, || {
                format!("{} is not a plugin id <owner>/<name>", quote(id))
            });
            continue;
        };
        if ids.contains(&(owner, name)) {
            ctx.report(Rule::ForgePluginsDuplicate, field, || {
                format!("plugin {} is listed twice", quote(id))
            });
        } else if let Some(other) = leaves.get(&name).filter(|o| *o != owner) {
            ctx.report(Rule::ForgePluginsLeafCollision, field, || format!("plugins {other}/{name} and {id} would both unpack to forge_plugins/{name}; they cannot be combined"));
        }
        ids.insert((owner, name));
        leaves.keep_first(name, owner);
    }
}

pub fn evaluation(evaluation: Option<Value<'_, '_>>, ctx: &mut Ctx<'_>) {
    let Some(eval) = evaluation.filter(|e| e.is_object()) else {
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
        ctx.report(Rule::ForgeEvaluationGate, ptr!["spec", "evaluation", "suites"], || "gates are declared without any suites to run, so nothing would ever be judged against them".into());
    }
    for (i, g) in gates.items().enumerate() {
        if !g.is_object() {
            continue;
        }
        let bounded = ["min", "max", "max_regression"]
            .iter()
            .any(|k| g.get(k).is_some_and(|v| !v.is_null()));
        if !bounded {
            ctx.report(
                Rule::ForgeEvaluationGate,
                ptr!["spec", "evaluation", "gates", i],
                || "this gate has none of min, max or max_regression, so it decides nothing".into(),
            );
        }
        if let Some(metric) = g.get_str("metric") {
            let benchmark = py_trim(metric).split('/').next().unwrap_or("");
            if has_byte(metric, b'/') && !suites.is_empty() && !suite_set.contains(&benchmark) {
                ctx.report(
                    Rule::ForgeEvaluationGate,
                    ptr!["spec", "evaluation", "gates", i, "metric"],
                    || {
                        format!(
                            "benchmark {} is not in suites ({})",
                            quote(benchmark),
                            few(&suites)
                        )
                    },
                );
            }
        }
    }
}
