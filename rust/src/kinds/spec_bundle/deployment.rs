//! The spec-bundle rules that read the deployment's configuration: the per-job GPU
//! limit (`forge.quota.job`), applied to `compute_shape` as to a JobSpec's pools.

use crate::config::CoreConfig;
use crate::node::Value;
use crate::rules::Rule;
use crate::schema::{Ctx, COUNT_MAX};

use super::fields::Fields;

/// The per-job GPU limit applies to a bundle's `nodes * gpus` as to a JobSpec's pools.
pub(super) fn job_gpus(fields: &Fields<'_, '_>, config: &CoreConfig, ctx: &mut Ctx<'_>) {
    let count = |v: Option<Value<'_, '_>>| {
        v.and_then(|v| v.as_schema_int())
            .filter(|n| (0..=COUNT_MAX as i128).contains(n))
    };
    let nodes = fields.compute_shape.and_then(|c| c.get("nodes"));
    let (Some(gpus), Some(nodes)) = (count(fields.gpus), count(nodes)) else {
        return; // missing or out of range: the schema rules say so
    };
    let total = gpus * nodes;
    if let Some(limit) = config.max_gpus_per_job {
        if total > limit as i128 {
            ctx.at(
                "/compute_shape".into(),
                Rule::ForgeQuotaJob,
                format!("the job asks for {total} GPUs (compute_shape.nodes * gpus), over the per-job limit of {limit}"),
            );
        }
    }
}
