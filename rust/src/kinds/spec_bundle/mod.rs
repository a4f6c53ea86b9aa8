//! TAO spec-bundle: the published schema (`spec_bundle.schema.json`) plus the
//! semantic rules: nested-not-dotted, mode discrimination, placeholders, spec keys,
//! credentials, topology, the static supporting-file rules, and the per-job GPU limit.
//!
//! - `patterns`: the string patterns (images, digests, paths, spec keys);
//! - `shape`: the schema, walked first;
//! - `document`: the rules that read only the document;
//! - `deployment`: the rules that read the configuration.
//!
//! Rules that need the files themselves (hashes, symlinks, packages) are in `files`.

mod deployment;
mod document;
pub mod patterns;
mod shape;

use crate::config::CoreConfig;
use crate::node::Value;
use crate::schema::Ctx;

/// Every rule of a spec-bundle, in the order they report (a report cut at
/// `limits.max_violations` keeps the first found).
pub fn check<'t, 'i>(root: Value<'t, 'i>, config: &CoreConfig, ctx: &mut Ctx<'i>) {
    shape::walk(root, ctx);
    deployment::job_gpus(root, config, ctx);
    document::mode_rules(root, ctx);
    document::spec_keys(root, ctx);
    document::commands(root, ctx);
    document::execution(root, ctx);
}
