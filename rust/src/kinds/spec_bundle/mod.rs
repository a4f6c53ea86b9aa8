//! TAO spec-bundle: the published schema (`spec_bundle.schema.json`) plus the
//! semantic rules: nested-not-dotted, mode discrimination, placeholders, spec keys,
//! credentials, topology, the static supporting-file rules, and the GPU quotas.
//!
//! - `patterns`: the string patterns (images, digests, paths, spec keys);
//! - `shape`: the schema, walked first;
//! - `document`: the rules that read only the document;
//! - `deployment`: the rules that read the configuration or the admission;
//! - `fields`: the top-level values those rules read, found once.
//!
//! Rules that need the files themselves (hashes, symlinks, packages) are in `files`.

mod deployment;
mod document;
mod fields;
pub mod patterns;
mod shape;

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::facts::{charged, text, Facts};
use crate::gpus;
use crate::node::Value;

use fields::Fields;

/// Every rule of a spec-bundle, in the order they report (a report cut at
/// `limits.max_violations` keeps the first found).
pub fn check<'t, 'i>(
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'i>,
) {
    shape::walk(root, ctx);
    let fields = Fields::of(root);
    deployment::quotas(&fields, config, admission, ctx);
    document::mode_rules(&fields, ctx);
    document::spec_keys(&fields, ctx);
    document::commands(&fields, ctx);
    document::execution(&fields, ctx);
}

/// A spec-bundle's facts: it names no project (it is charged to its account's), its
/// GPUs as `gpus::of_bundle` counts them.
pub fn facts(root: Value<'_, '_>, f: &mut Facts) {
    f.network_arch = text(root.get("network_arch"));
    f.action = text(root.get("action"));
    f.image = text(root.get("image"));
    f.gpus = charged(gpus::of_bundle(root.get("compute_shape"), &mut |_| {}));
    if let Some(ex) = root.get("upload_excludes") {
        f.upload_excludes = ex
            .items()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
    }
}
