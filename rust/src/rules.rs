//! The rule catalogue: every rule id jobgate reports, its default severity and what
//! it means. Listable from Python (`jobgate.rules()`), so tools and docs never
//! drift from the engine.

use crate::report::Severity::{self, Error, Warning};

pub struct Rule {
    pub id: &'static str,
    pub severity: Severity,
    pub summary: &'static str,
}

const fn rule(id: &'static str, severity: Severity, summary: &'static str) -> Rule {
    Rule {
        id,
        severity,
        summary,
    }
}

pub static CATALOGUE: &[Rule] = &[
    rule(
        "json.syntax",
        Error,
        "not valid JSON/YAML, not UTF-8, or the top level is not an object",
    ),
    rule("json.duplicate_key", Error, "an object repeats a key"),
    rule(
        "limits.size",
        Error,
        "the document is larger than the configured limit",
    ),
    rule(
        "limits.depth",
        Error,
        "the document nests deeper than the configured limit",
    ),
    rule(
        "forge.project.forbidden",
        Error,
        "(service) the authenticated account may not submit to metadata.project",
    ),
    rule(
        "limits.violations",
        Error,
        "more violations than limits.max_violations (or than the report's byte budget): the rest are counted, not listed",
    ),
    rule(
        "kind.unknown",
        Error,
        "the kind cannot be detected and was not given",
    ),
    rule("schema.type", Error, "a value has the wrong JSON type"),
    rule("schema.required", Error, "a required field is missing"),
    rule(
        "schema.additionalProperties",
        Error,
        "a field the schema does not know (a warning in JobSpecs)",
    ),
    rule(
        "schema.enum",
        Error,
        "a value is not one of the allowed values",
    ),
    rule(
        "schema.const",
        Error,
        "a value differs from the only allowed value",
    ),
    rule(
        "schema.pattern",
        Error,
        "a string does not match the required pattern",
    ),
    rule(
        "schema.minLength",
        Error,
        "a string is empty or blank where text is required",
    ),
    rule("schema.minItems", Error, "an array has too few items"),
    rule("schema.minimum", Error, "a number is below the minimum"),
    rule("schema.maximum", Error, "a number is above the maximum"),
    rule("schema.uniqueItems", Error, "an array repeats an item"),
    rule(
        "schema.propertyNames",
        Error,
        "an object key does not match the required pattern",
    ),
    rule(
        "schema.dependentRequired",
        Error,
        "a field needs another field that is missing",
    ),
    rule(
        "forge.api_version",
        Error,
        "apiVersion is not exactly forge/v2",
    ),
    rule("forge.kind", Error, "kind is not TrainingJob"),
    rule(
        "forge.name",
        Error,
        "metadata.name is not one safe path segment",
    ),
    rule(
        "forge.project",
        Error,
        "metadata.project has unsafe characters or is . or ..",
    ),
    rule(
        "forge.owner_overridden",
        Warning,
        "the client sent an owner; it is replaced by the authenticated account",
    ),
    rule(
        "forge.recipe.name",
        Error,
        "spec.recipe.name is not <framework>/<method>",
    ),
    rule(
        "forge.source.exp",
        Error,
        "spec.source.exp is absolute, empty, or has an unsafe segment",
    ),
    rule(
        "forge.source.entrypoint",
        Error,
        "spec.source.entrypoint is set",
    ),
    rule(
        "forge.framework.image_required",
        Error,
        "a custom job has no spec.framework.image",
    ),
    rule(
        "forge.framework.image_registry",
        Error,
        "the image's registry is not on the allowlist",
    ),
    rule(
        "forge.framework.observability_url_required",
        Error,
        "the recipe's observability is external and no observability_url is given",
    ),
    rule(
        "forge.framework.observability_url_forbidden",
        Error,
        "the recipe's observability is platform and an observability_url is given",
    ),
    rule(
        "forge.resources.pools_empty",
        Error,
        "spec.resources.pools is missing or empty",
    ),
    rule(
        "forge.resources.pool_duplicate",
        Error,
        "two pools share a name",
    ),
    rule(
        "forge.resources.role_pool",
        Error,
        "a role names a pool that does not exist",
    ),
    rule(
        "forge.resources.series",
        Error,
        "a pool's series is not offered by the deployment",
    ),
    rule(
        "forge.model.init_from",
        Error,
        "spec.model.init_from is not run/<run_id>/<kind>[@step=<N>]",
    ),
    rule(
        "forge.data.ref",
        Error,
        "a dataset, corpus or volume reference is malformed",
    ),
    rule(
        "forge.data.host_path",
        Error,
        "a dataset or corpus is a host path or URL",
    ),
    rule(
        "forge.plugins.id",
        Error,
        "a plugin id is not <owner>/<name>",
    ),
    rule(
        "forge.plugins.digest",
        Error,
        "a plugin digest does not start with sha256:",
    ),
    rule("forge.plugins.duplicate", Error, "the same plugin id twice"),
    rule(
        "forge.plugins.leaf_collision",
        Error,
        "two plugins would unpack to the same directory",
    ),
    rule(
        "forge.evaluation.gate",
        Error,
        "an evaluation gate decides nothing or names a benchmark that is not run",
    ),
    rule(
        "forge.provenance.core_version",
        Error,
        "provenance.core_version is missing or empty",
    ),
    rule(
        "forge.handshake.recipe_unknown",
        Error,
        "the catalog has no recipe of that name",
    ),
    rule(
        "forge.handshake.version",
        Error,
        "the recipe version differs from the catalog",
    ),
    rule(
        "forge.handshake.digest",
        Error,
        "the recipe digest differs from the catalog",
    ),
    rule(
        "forge.handshake.runtime_id",
        Error,
        "framework.runtime_id differs from the catalog",
    ),
    rule(
        "forge.core_version.unsupported",
        Error,
        "provenance.core_version is outside the recipe's requires.core range",
    ),
    rule(
        "forge.quota.job",
        Error,
        "the job's GPU count exceeds the per-job limit",
    ),
    rule(
        "forge.quota.project",
        Error,
        "the project's GPUs in unfinished jobs plus this job's exceed its quota",
    ),
    rule(
        "tao.dotted_key",
        Error,
        "a key inside spec (or best.specs) contains '.' or is empty",
    ),
    rule(
        "tao.mode.config_requires_spec",
        Error,
        "mode config without spec",
    ),
    rule(
        "tao.mode.config_requires_config_format",
        Error,
        "mode config without config_format",
    ),
    rule(
        "tao.mode.config_path_placeholder",
        Error,
        "mode config with a command lacking {config_path}",
    ),
    rule(
        "tao.mode.config_forbids_args",
        Error,
        "mode config with args",
    ),
    rule(
        "tao.mode.args_requires_args",
        Error,
        "mode args without args",
    ),
    rule("tao.mode.args_forbids_spec", Error, "mode args with spec"),
    rule(
        "tao.mode.args_forbids_config_format",
        Error,
        "mode args with config_format",
    ),
    rule(
        "tao.placeholder.unknown",
        Warning,
        "a {name} placeholder other than {config_path}, {job_id}, {results_dir}",
    ),
    rule(
        "tao.spec_key.syntax",
        Error,
        "a spec_key or gpu_spec_key is not a dotted/indexed pointer",
    ),
    rule(
        "tao.spec_key.unresolved",
        Error,
        "a declared spec_key cannot be bound inside spec (a warning for optional inputs)",
    ),
    rule(
        "tao.gpu_spec_key.mismatch",
        Warning,
        "the value at gpu_spec_key differs from compute_shape.gpus",
    ),
    rule(
        "tao.execution.secret",
        Error,
        "a credential literal in the environment, commands or args",
    ),
    rule(
        "tao.execution.processes_per_node",
        Warning,
        "torchrun processes_per_node differs from compute_shape.gpus",
    ),
    rule(
        "tao.supporting_file.path",
        Error,
        "a supporting file path is absolute, has '..', a backslash, whitespace or NUL",
    ),
    rule(
        "tao.supporting_file.duplicate_destination",
        Error,
        "two supporting files stage to the same destination, or one inside another staged as a file",
    ),
    rule(
        "tao.supporting_file.missing",
        Error,
        "a supporting file's source does not exist under the producer root",
    ),
    rule(
        "tao.supporting_file.not_regular",
        Error,
        "a supporting file's source is not a regular file",
    ),
    rule(
        "tao.supporting_file.escape",
        Error,
        "a supporting file's source resolves outside the producer root",
    ),
    rule(
        "tao.supporting_file.sha256_mismatch",
        Error,
        "a supporting file's SHA-256 differs from the declared one",
    ),
    rule(
        "tao.supporting_file.undeclared",
        Error,
        "a package holds a file that is neither the bundle nor a declared source",
    ),
    rule(
        "tao.supporting_file.undeclared_import",
        Error,
        "a Python helper imports an undeclared sibling module",
    ),
    rule(
        "tao.staging.conflict",
        Error,
        "the staging directory holds a different bundle or extra files",
    ),
    rule(
        "tao.record.first_state",
        Error,
        "the first transition is not PENDING",
    ),
    rule(
        "tao.record.after_terminal",
        Error,
        "a transition follows a terminal one",
    ),
    rule(
        "tao.record.terminal_mismatch",
        Error,
        "terminal_state disagrees with the last terminal transition",
    ),
    rule(
        "tao.record.ts_order",
        Warning,
        "transition timestamps go backwards",
    ),
    rule(
        "tao.record.secret",
        Error,
        "an unredacted credential in a job record",
    ),
    rule(
        "tao.best_rec.not_best",
        Error,
        "best is not the best of all_recs in the declared direction",
    ),
];
