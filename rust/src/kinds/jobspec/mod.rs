//! forge/v2 JobSpec: the shape and field table of the seed, every check that
//! `starforge-core` makes, and the deployment rules (handshake, core version,
//! registry, observability, series, quotas) when a configuration is given.
//!
//! - `patterns`: the string patterns, each under its named rule;
//! - `shape`: the field table, walked first;
//! - `document`: the rules that read only the document;
//! - `deployment`: the rules that read the configuration or the admission.
//!
//! How a `recipe.lock.json` stands against the catalog, by the same handshake's terms,
//! is `recipe_status`: it judges a lock file, not a JobSpec.

mod deployment;
mod document;
pub mod patterns;
mod shape;

pub use shape::{API_VERSION, KIND};

use patterns::project_of;

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::facts::{charged, text, Facts};
use crate::gpus;
use crate::node::Value;

/// Every rule of a JobSpec, in the order they report (a report cut at
/// `limits.max_violations` keeps the first found).
///
/// The fields the rules read are found here, each object's in one pass, and each rule
/// is handed the fields it judges: `get` on any of them finds what these find (the
/// first of duplicate keys).
pub fn check<'t, 'i>(
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'i>,
) {
    shape::walk(root, ctx);
    let [metadata, spec] = root.get_each(["metadata", "spec"]);
    let [project, owner] = metadata.map_or([None; 2], |m| m.get_each(["project", "owner"]));
    deployment::project_grant(project, admission, ctx);
    // The project as `facts` names it, whose own severities `[rules.projects.NAME]` set.
    let name = project.and_then(|p| p.as_str()).map_or("", str::trim);
    let gpus = gpus::of_jobspec(spec, &mut |u| gpus::judge(u, config, Some(name), ctx));
    if let Some(spec) = spec.filter(|s| s.is_object()) {
        let [recipe, framework, resources, data, plugins, evaluation] = spec.get_each([
            "recipe",
            "framework",
            "resources",
            "data",
            "plugins",
            "evaluation",
        ]);
        if let Some(resources) = resources.filter(|r| r.is_object()) {
            self::resources(resources, project, gpus, config, admission, ctx);
        }
        document::data(data, ctx);
        document::plugins(plugins, ctx);
        document::evaluation(evaluation, ctx);
        deployment::framework(recipe, framework, root, config, ctx);
    }
    deployment::owner_overridden(owner, admission, ctx);
}

/// `spec.resources`, pool by pool: each pool meets the document's rules and then the
/// deployment's offer, so the report lists them in the order they were found. `gpus`
/// is what the pools ask for in all (`gpus::of_jobspec`), `None` when it cannot be
/// counted; then no quota is judged.
fn resources(
    resources: Value<'_, '_>,
    project: Option<Value<'_, '_>>,
    gpus: Option<u64>,
    config: &CoreConfig,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'_>,
) {
    let [pools, roles] = resources.get_each(["pools", "roles"]);
    let empty = document::pools_declared(pools, ctx);
    let mut seen = document::Pools::new();
    for (i, pool) in pools.map(|p| p.items()).into_iter().flatten().enumerate() {
        seen.add(i, pool, ctx);
        deployment::series(i, pool, config, ctx);
    }
    seen.roles(roles, ctx);
    if let Some(total) = gpus.filter(|_| !empty) {
        deployment::quotas(project, total, config, admission, ctx);
    }
}

/// A JobSpec's facts: charged to its own project, its GPUs as `gpus::of_jobspec`
/// counts them.
pub fn facts(root: Value<'_, '_>, f: &mut Facts) {
    f.project = project_of(root.at(&["metadata", "project"])).to_string();
    let spec = root.get("spec");
    f.gpus = charged(gpus::of_jobspec(spec, &mut |_| {}));
    let recipe = text(spec.and_then(|s| s.at(&["recipe", "name"])));
    let version = text(spec.and_then(|s| s.at(&["recipe", "version"])));
    f.network_arch = recipe.rsplit('/').next().unwrap_or("").to_string();
    let exp = text(spec.and_then(|s| s.at(&["source", "exp"])));
    f.action = exp
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    f.image = text(spec.and_then(|s| s.at(&["framework", "image"])));
    if f.image.is_empty() {
        f.image = format!("recipe:{recipe}@{version}");
    }
}
