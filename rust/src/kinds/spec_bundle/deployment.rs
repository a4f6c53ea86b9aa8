//! The spec-bundle rules that read the deployment's configuration or the admission:
//! the GPU quotas (`forge.quota.job`, `forge.quota.project`), applied to
//! `compute_shape` as to a JobSpec's pools. A bundle names no project: it is charged
//! to its account's (`AdmissionContext::home`).

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::gpus;
use crate::kind::Kind;
use crate::pointer::ptr;
use crate::rules::Rule;
use crate::schema::COUNT_MAX;

use super::fields::Fields;

/// `forge.quota.job` and `forge.quota.project` for the `nodes * gpus` of
/// `compute_shape`; a count that cannot be charged is `gpus::judge`'s.
pub(super) fn quotas(
    fields: &Fields<'_, '_>,
    config: &CoreConfig,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'_>,
) {
    // Bundles name no project: the deployment's severities alone apply.
    let Some(total) = gpus::of_bundle(fields.compute_shape, &mut |u| {
        gpus::judge(u, config, None, ctx)
    }) else {
        return;
    };
    if total > COUNT_MAX as u64 {
        ctx.report(Rule::ForgeQuotaJob, ptr!["compute_shape"], || format!("the job asks for {total} GPUs (compute_shape.nodes * gpus), more than the {COUNT_MAX} any job may ask for"));
        return;
    }
    if let Some(limit) = config.max_gpus_per_job {
        if total > limit {
            ctx.report(Rule::ForgeQuotaJob, ptr!["compute_shape"], || format!("the job asks for {total} GPUs (compute_shape.nodes * gpus), over the per-job limit of {limit}"));
        }
    }
    // Bundles name no project: they are charged to their account's.
    gpus::charge(
        Kind::SpecBundle,
        admission.home.as_deref(),
        total,
        admission,
        ctx,
    );
}
