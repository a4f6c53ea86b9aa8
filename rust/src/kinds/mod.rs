//! The rules of each kind of document, one module per kind, and the dispatch from a
//! kind to its rules.
//!
//! A kind module owns its shape (the schema layer) and its semantic rules; the large
//! kinds are folders split by concern (`patterns`, `shape`, `document`,
//! `deployment`). `nested` holds what two kinds share. Adding a kind: a variant of
//! `kind::Kind` (its name and how it is detected), a module here with a `check`, and
//! its arm in `check` below; its rules go in the catalogue (`rules`).

pub mod best_rec;
pub mod job_record;
pub mod jobspec;
pub mod nested;
pub mod spec_bundle;

use crate::admission::Admission;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::kind::Kind;
use crate::node::Value;

/// Applies `kind`'s rules to the document at `root`.
pub fn check<'t, 'i>(
    kind: Kind,
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &Admission,
    ctx: &mut Ctx<'i>,
) {
    match kind {
        Kind::JobSpec => jobspec::check(root, config, admission, ctx),
        Kind::SpecBundle => spec_bundle::check(root, config, admission, ctx),
        Kind::JobRecord => job_record::check(root, ctx),
        Kind::BestRec => best_rec::check(root, ctx),
    }
}
