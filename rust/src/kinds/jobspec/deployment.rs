//! The JobSpec rules that read the deployment's configuration or the admission: the
//! account's projects, GPU series, the per-job and per-project GPU quotas, the
//! handshake with the recipe catalog, the core version range, the image registry,
//! observability, and the owner stamp. Without a configuration (and outside the
//! service) they find nothing to judge.

use crate::admission::AdmissionContext;
use crate::config::{core_version_allowed, CatalogEntry, CoreConfig, Observability};
use crate::gpus;
use crate::kind::Kind;
use crate::node::{few, quote, Value};

use crate::collect::Ctx;
use crate::pointer::ptr;
use crate::refusal;
use crate::rules::Rule;
use crate::schema::COUNT_MAX;
use crate::text::py_trim;

use super::patterns::{project_of, str_of};

/// `forge.project.forbidden`: a JobSpec is admitted only into a project the account
/// is granted.
/// `project` is `metadata.project`.
pub fn project_grant(
    project: Option<Value<'_, '_>>,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'_>,
) {
    let project = project_of(project);
    if !admission.may_submit_to(project) {
        let granted = admission.projects.as_deref().unwrap_or_default();
        ctx.report(
            Rule::ForgeProjectForbidden,
            refusal::forbidden_at(Some(Kind::JobSpec)),
            || refusal::forbidden_message(project, granted),
        );
    }
}

/// `forge.resources.series`: pool `i` asks for a GPU series the deployment offers.
pub fn series(i: usize, pool: Value<'_, '_>, config: &CoreConfig, ctx: &mut Ctx<'_>) {
    if let (Some(offered), Some(series)) = (&config.series, pool.get_str("series")) {
        let series = py_trim(series);
        if !series.is_empty() && !offered.iter().any(|s| s == series) {
            ctx.report(
                Rule::ForgeResourcesSeries,
                ptr!["spec", "resources", "pools", i, "series"],
                || {
                    format!(
                        "GPU series {} is not offered here; choose one of {}",
                        quote(series),
                        few(offered)
                    )
                },
            );
        }
    }
}

/// `forge.quota.job` and `forge.quota.project` for a job asking for `total` GPUs over
/// all its pools; `project` is `metadata.project`. A project outside the account's
/// grant is judged by `forge.project.forbidden` alone: its usage and quota are not the
/// caller's to learn.
pub fn quotas(
    project_field: Option<Value<'_, '_>>,
    total: u64,
    config: &CoreConfig,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'_>,
) {
    if total > COUNT_MAX as u64 {
        ctx.report(Rule::ForgeQuotaJob, ptr!["spec", "resources"], || format!("the job asks for {total} GPUs (nodes * gpus_per_node over all pools), more than the {COUNT_MAX} any job may ask for"));
        return;
    }
    if let Some(limit) = config.max_gpus_per_job {
        if total > limit {
            ctx.report(Rule::ForgeQuotaJob, ptr!["spec", "resources"], || format!("the job asks for {total} GPUs (nodes * gpus_per_node over all pools), over the per-job limit of {limit}"));
        }
    }
    gpus::charge(
        Kind::JobSpec,
        Some(project_of(project_field)),
        total,
        admission,
        ctx,
    );
}

/// The registry host of an image reference, as a container runtime reads it.
pub fn registry_host(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_ascii_lowercase()
        }
        _ => "docker.io".into(),
    }
}

fn registry_allowed(host: &str, allow: &[String]) -> bool {
    allow.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        match a.strip_prefix("*.") {
            Some(suffix) => host.ends_with(&format!(".{suffix}")),
            None => a == host,
        }
    })
}

/// The catalog's terms for the recipe the JobSpec names: a custom job's image, the
/// registry, the handshake (`forge.handshake.*`), the core version range and
/// observability. `recipe` and `framework` are `spec`'s.
pub fn framework(
    recipe: Option<Value<'_, '_>>,
    framework: Option<Value<'_, '_>>,
    root: Value<'_, '_>,
    config: &CoreConfig,
    ctx: &mut Ctx<'_>,
) {
    let recipe = recipe.filter(|r| r.is_object());
    let fw = framework.filter(|f| f.is_object());
    let recipe_name = str_of(recipe.and_then(|r| r.get("name")));
    let image = str_of(fw.and_then(|f| f.get("image")));
    let entry: Option<&CatalogEntry> = config.catalog.as_ref().and_then(|c| c.get(recipe_name));

    let custom = recipe_name == "custom/custom" || entry.is_some_and(|e| e.custom);
    if custom && fw.is_some() && image.is_empty() {
        ctx.report(
            Rule::ForgeFrameworkImageRequired,
            ptr!["spec", "framework", "image"],
            || {
                format!(
                    "recipe {} is a custom job and brings no image; set spec.framework.image",
                    quote(recipe_name)
                )
            },
        );
    }
    if let (Some(allow), false) = (&config.registries, image.is_empty()) {
        let host = registry_host(image);
        if !registry_allowed(&host, allow) {
            ctx.report(Rule::ForgeFrameworkImageRegistry, ptr!["spec", "framework", "image"], || format!("image {} comes from registry {}, which is not on this deployment's allowlist ({})", quote(image), quote(&host), few(allow)));
        }
    }
    let Some(catalog) = &config.catalog else {
        return;
    };
    if recipe.is_none() || !recipe_name.contains('/') {
        return;
    }
    let Some(entry) = entry else {
        let mut known: Vec<&str> = catalog.keys().map(String::as_str).collect();
        known.sort_unstable();
        ctx.report(Rule::ForgeHandshakeRecipeUnknown, ptr!["spec", "recipe", "name"], || format!("the catalog has no recipe {}; `sf recipe status` reports it as removed (catalog: {}); lock a served recipe with `sf recipe upgrade`", quote(recipe_name), few(&known)));
        return;
    };
    let handshake = [
        (
            recipe.and_then(|r| r.get("version")),
            &entry.version,
            ptr!["spec", "recipe", "version"],
            Rule::ForgeHandshakeVersion,
            "recipe version",
        ),
        (
            recipe.and_then(|r| r.get("digest")),
            &entry.digest,
            ptr!["spec", "recipe", "digest"],
            Rule::ForgeHandshakeDigest,
            "recipe digest",
        ),
        (
            fw.and_then(|f| f.get("runtime_id")),
            &entry.runtime_id,
            ptr!["spec", "framework", "runtime_id"],
            Rule::ForgeHandshakeRuntimeId,
            "framework.runtime_id",
        ),
    ];
    for (sent, expected, field, rule, what) in handshake {
        if sent.is_some_and(|s| !s.is_null() && s.as_str().is_none()) {
            continue; // a type error already reported
        }
        let sent = str_of(sent);
        if sent != expected.as_str() {
            ctx.report(rule, field, || format!("{what} {} differs from the catalog's {} for {recipe_name}; `sf recipe status` reports the lock as out of date and `sf recipe upgrade` fixes it", quote(sent), quote(expected)));
        }
    }
    if let Some((raw, specifiers)) = &entry.requires_core {
        let cv = str_of(root.at(&["provenance", "core_version"]));
        if !cv.is_empty() {
            let allowed = core_version_allowed(specifiers, cv);
            if allowed != Ok(true) {
                let why = match allowed {
                    Err(e) => format!(" ({cv:?} is not a PEP 440 version: {e})"),
                    _ => String::new(),
                };
                ctx.report(Rule::ForgeCoreVersionUnsupported, ptr!["provenance", "core_version"], || format!("core version {cv} is outside {raw}, the range recipe {recipe_name} requires{why}; `sf recipe status` reports sdk_incompatible, upgrade the client or `sf recipe upgrade`"));
            }
        }
    }
    let url = str_of(fw.and_then(|f| f.get("observability_url")));
    match entry.observability {
        Observability::External if url.is_empty() && fw.is_some() => {
            ctx.report(Rule::ForgeFrameworkObservabilityUrlRequired, ptr!["spec", "framework", "observability_url"], || format!("recipe {recipe_name} reports to external observability; set spec.framework.observability_url"));
        }
        Observability::Platform if !url.is_empty() => {
            ctx.report(Rule::ForgeFrameworkObservabilityUrlForbidden, ptr!["spec", "framework", "observability_url"], || format!("recipe {recipe_name} uses the platform's observability; remove observability_url {}", quote(url)));
        }
        _ => {}
    }
}

/// `forge.owner_overridden`: the owner the client sent (`metadata.owner`) is replaced
/// by the account.
pub fn owner_overridden(
    owner: Option<Value<'_, '_>>,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'_>,
) {
    if let (Some(account), Some(sent)) = (&admission.owner, owner.and_then(|o| o.as_str())) {
        let sent = py_trim(sent);
        if !sent.is_empty() && sent != account {
            ctx.report(Rule::ForgeOwnerOverridden, ptr!["metadata", "owner"], || format!("the client sent owner {} but the job is stamped with the authenticated account {}", quote(sent), quote(account)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts() {
        assert_eq!(registry_host("nvcr.io/nvidia/tao:1"), "nvcr.io");
        assert_eq!(registry_host("localhost:5000/x"), "localhost:5000");
        assert_eq!(registry_host("ubuntu:22.04"), "docker.io");
        assert_eq!(registry_host("library/ubuntu"), "docker.io");
        assert!(registry_allowed("a.example.com", &["*.example.com".into()]));
    }
}
