//! forge/v2 JobSpec: the shape and field table of the seed, every check that
//! `starforge-core` makes, and the deployment rules (handshake, core version,
//! registry, observability, series, quotas) when a configuration is given.
//!
//! - `patterns`: the string patterns, each under its named rule;
//! - `shape`: the field table, walked first;
//! - `document`: the rules that read only the document;
//! - `deployment`: the rules that read the configuration or the admission;
//! - `lock`: how a `recipe.lock.json` stands against the catalog (`RecipeStatus`),
//!   by the handshake's terms.

mod deployment;
mod document;
pub mod lock;
pub mod patterns;
mod shape;

pub use shape::{API_VERSION, KIND};

use crate::admission::Admission;
use crate::config::CoreConfig;
use crate::node::Value;
use crate::schema::Ctx;

/// Every rule of a JobSpec, in the order they report (a report cut at
/// `limits.max_violations` keeps the first found).
pub fn check<'t, 'i>(
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'i>,
) {
    shape::walk(root, ctx);
    deployment::project_grant(root, admission, ctx);
    if let Some(spec) = root.get("spec").filter(|s| s.is_object()) {
        resources(spec, root, config, admission, ctx);
        document::data(spec, ctx);
        document::plugins(spec, ctx);
        document::evaluation(spec, ctx);
        deployment::framework(spec, root, config, ctx);
    }
    deployment::owner_overridden(root, admission, ctx);
}

/// `spec.resources`, pool by pool: each pool meets the document's rules and then the
/// deployment's offer, so the report lists them in the order they were found.
fn resources(
    spec: Value<'_, '_>,
    root: Value<'_, '_>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'_>,
) {
    let Some(resources) = spec.get("resources").filter(|r| r.is_object()) else {
        return;
    };
    let pools = resources.get("pools");
    let empty = document::pools_declared(pools, ctx);
    let mut seen = document::Pools::new();
    for (i, pool) in pools.map(|p| p.items()).into_iter().flatten().enumerate() {
        seen.add(i, pool, ctx);
        deployment::series(i, pool, config, ctx);
    }
    seen.roles(resources, ctx);
    if let Some(total) = seen.gpus.filter(|_| !empty) {
        deployment::quotas(root, total, config, admission, ctx);
    }
}
