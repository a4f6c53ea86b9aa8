//! The rules of each kind of document, one module per kind, and the dispatch from a
//! kind to them (`behaviour`).
//!
//! A kind module owns its shape (the schema layer), its semantic rules (`check`) and
//! what admission reads from a document of it (`facts`); the large kinds are folders
//! split by concern (`patterns`, `shape`, `document`, `deployment`). `nested` holds
//! what two kinds share. What a kind is besides its rules (its name, number,
//! detection, charge) is its row of `kind::TABLE`.

pub mod best_rec;
pub mod job_record;
pub mod jobspec;
pub mod nested;
pub mod spec_bundle;

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::facts::Facts;
use crate::kind::Kind;
use crate::node::Value;

/// A kind's rules, applied to the document at `root`.
pub type Check = for<'t, 'i> fn(Value<'t, 'i>, &CoreConfig, &AdmissionContext, &mut Ctx<'i>);

/// What a kind's module provides.
pub struct Behaviour {
    pub check: Check,
    /// Fills in what admission charges (project, GPUs) and names a job by; a kind
    /// that launches nothing reads nothing (`launches_nothing`).
    pub facts: fn(Value<'_, '_>, &mut Facts),
}

/// Each kind's module: one arm per kind, so a kind without rules does not build.
pub fn behaviour(kind: Kind) -> Behaviour {
    match kind {
        Kind::JobSpec => Behaviour {
            check: jobspec::check,
            facts: jobspec::facts,
        },
        Kind::SpecBundle => Behaviour {
            check: spec_bundle::check,
            facts: spec_bundle::facts,
        },
        Kind::JobRecord => Behaviour {
            check: job_record::check,
            facts: launches_nothing,
        },
        Kind::BestRec => Behaviour {
            check: best_rec::check,
            facts: launches_nothing,
        },
    }
}

/// The facts of a kind that launches nothing: none to read.
fn launches_nothing(_: Value<'_, '_>, _: &mut Facts) {}

/// Applies `kind`'s rules to the document at `root`.
pub fn check<'t, 'i>(
    kind: Kind,
    root: Value<'t, 'i>,
    config: &CoreConfig,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'i>,
) {
    (behaviour(kind).check)(root, config, admission, ctx);
}

/// What admission needs to know about the document at `root` (`facts::Facts`), its
/// kind detected when not given.
pub fn facts(root: Value<'_, '_>, kind: Option<Kind>) -> Facts {
    let kind = kind.or_else(|| Kind::detect(root));
    let mut f = Facts {
        kind,
        ..Default::default()
    };
    if let Some(kind) = kind {
        (behaviour(kind).facts)(root, &mut f);
    }
    f
}
