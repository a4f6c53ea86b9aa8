//! The rule catalogue: every rule id jobgate reports, its default severity, whether a
//! deployment may relax it, and what
//! it means, in one table. A violation names a `Rule`, so no call site can report a
//! rule the catalogue does not list, and a rule's severity is written once, here
//! (the few rules whose severity depends on the case say so where they report).
//! Listable from Python (`jobgate.rules()`), so tools and docs never drift from the
//! engine.
//!
//! A leaf of the crate: imports nothing from it.

/// `error` blocks admission; `warning` is reported and does not; `off` is a rule a
/// deployment turned off (`[rules]`): still listed, never counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
    Off,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Off => "off",
        }
    }

    pub fn parse(text: &str) -> Option<Severity> {
        match text {
            "error" => Some(Severity::Error),
            "warning" => Some(Severity::Warning),
            "off" => Some(Severity::Off),
            _ => None,
        }
    }
}

/// Declares `Rule`, one variant per catalogued rule, with its id, default severity,
/// whether a deployment may change that severity (`relaxable`) or not (`locked`), and
/// summary; the variant is the id in CamelCase (`tao.dotted_key` is `TaoDottedKey`).
///
/// The rules that protect the gate itself are locked: reading (`json.*`,
/// `kind.unknown`), bounds (`limits.*`), the supporting files and their staging,
/// quotas, the account's projects, and credentials.
macro_rules! catalogue {
    ($($rule:ident = $id:literal, $severity:ident, $relax:ident, $summary:literal;)*) => {
        /// One rule of the catalogue.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Rule {
            $($rule,)*
        }

        impl Rule {
            /// Every rule, in catalogue order.
            pub const ALL: &'static [Rule] = &[$(Rule::$rule,)*];

            /// The stable id reports carry, e.g. `tao.dotted_key`.
            pub const fn id(self) -> &'static str {
                match self {
                    $(Rule::$rule => $id,)*
                }
            }

            /// The severity a violation of this rule has unless its rule says otherwise.
            pub const fn severity(self) -> Severity {
                match self {
                    $(Rule::$rule => Severity::$severity,)*
                }
            }

            /// Whether a deployment may change the rule's severity (`[rules]`).
            pub const fn relaxable(self) -> bool {
                match self {
                    $(Rule::$rule => catalogue!(@relax $relax),)*
                }
            }

            /// What the rule means, in one line.
            pub const fn summary(self) -> &'static str {
                match self {
                    $(Rule::$rule => $summary,)*
                }
            }
        }
    };
    (@relax relaxable) => { true };
    (@relax locked) => { false };
}

/// A rule with the severity a violation of it has: its catalogued one (`From<Rule>`),
/// or the case's (`Rule::with_severity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Graded {
    pub rule: Rule,
    pub severity: Severity,
}

impl From<Rule> for Graded {
    #[inline]
    fn from(rule: Rule) -> Graded {
        Graded {
            rule,
            severity: rule.severity(),
        }
    }
}

impl Rule {
    /// The rule with this id, if the catalogue has one.
    pub fn parse(id: &str) -> Option<Rule> {
        Rule::ALL.iter().copied().find(|r| r.id() == id)
    }

    /// This rule, reported with `severity` instead of its catalogued one (the few
    /// rules whose severity depends on the case).
    #[inline]
    pub const fn with_severity(self, severity: Severity) -> Graded {
        Graded {
            rule: self,
            severity,
        }
    }

    /// Rules about a key rather than its value: a violation is placed at the key.
    pub fn locates_key(self) -> bool {
        matches!(
            self,
            Rule::JsonDuplicateKey
                | Rule::SchemaAdditionalProperties
                | Rule::SchemaPropertyNames
                | Rule::TaoDottedKey
        )
    }
}

catalogue! {
    JsonSyntax = "json.syntax", Error, locked,
        "not valid JSON/YAML, not UTF-8, or the top level is not an object";
    JsonDuplicateKey = "json.duplicate_key", Error, locked,
        "an object repeats a key";
    LimitsSize = "limits.size", Error, locked,
        "the document is larger than the configured limit";
    LimitsDepth = "limits.depth", Error, locked,
        "the document nests deeper than the configured limit";
    ForgeProjectForbidden = "forge.project.forbidden", Error, locked,
        "(service) the authenticated account may not submit to metadata.project";
    LimitsViolations = "limits.violations", Error, locked,
        "more violations than limits.max_violations (or than the report's byte budget): the rest are counted, not listed";
    KindUnknown = "kind.unknown", Error, locked,
        "the kind cannot be detected and was not given";
    SchemaType = "schema.type", Error, relaxable,
        "a value has the wrong JSON type";
    SchemaRequired = "schema.required", Error, relaxable,
        "a required field is missing";
    SchemaAdditionalProperties = "schema.additionalProperties", Error, relaxable,
        "a field the schema does not know (a warning in JobSpecs)";
    SchemaEnum = "schema.enum", Error, relaxable,
        "a value is not one of the allowed values";
    SchemaConst = "schema.const", Error, relaxable,
        "a value differs from the only allowed value";
    SchemaPattern = "schema.pattern", Error, relaxable,
        "a string does not match the required pattern";
    SchemaMinLength = "schema.minLength", Error, relaxable,
        "a string is empty or blank where text is required";
    SchemaMinItems = "schema.minItems", Error, relaxable,
        "an array has too few items";
    SchemaMinimum = "schema.minimum", Error, relaxable,
        "a number is below the minimum";
    SchemaMaximum = "schema.maximum", Error, relaxable,
        "a number is above the maximum";
    SchemaUniqueItems = "schema.uniqueItems", Error, relaxable,
        "an array repeats an item";
    SchemaPropertyNames = "schema.propertyNames", Error, relaxable,
        "an object key does not match the required pattern";
    SchemaDependentRequired = "schema.dependentRequired", Error, relaxable,
        "a field needs another field that is missing";
    ForgeApiVersion = "forge.api_version", Error, relaxable,
        "apiVersion is not exactly forge/v2";
    ForgeKind = "forge.kind", Error, relaxable,
        "kind is not TrainingJob";
    ForgeName = "forge.name", Error, relaxable,
        "metadata.name is not one safe path segment";
    ForgeProject = "forge.project", Error, relaxable,
        "metadata.project has unsafe characters or is . or ..";
    ForgeOwnerOverridden = "forge.owner_overridden", Warning, relaxable,
        "the client sent an owner; it is replaced by the authenticated account";
    ForgeRecipeName = "forge.recipe.name", Error, relaxable,
        "spec.recipe.name is not <framework>/<method>";
    ForgeSourceExp = "forge.source.exp", Error, relaxable,
        "spec.source.exp is absolute, empty, or has an unsafe segment";
    ForgeSourceEntrypoint = "forge.source.entrypoint", Error, relaxable,
        "spec.source.entrypoint is set";
    ForgeFrameworkImageRequired = "forge.framework.image_required", Error, relaxable,
        "a custom job has no spec.framework.image";
    ForgeFrameworkImageRegistry = "forge.framework.image_registry", Error, relaxable,
        "the image's registry is not on the allowlist";
    ForgeFrameworkObservabilityUrlRequired = "forge.framework.observability_url_required", Error, relaxable,
        "the recipe's observability is external and no observability_url is given";
    ForgeFrameworkObservabilityUrlForbidden = "forge.framework.observability_url_forbidden", Error, relaxable,
        "the recipe's observability is platform and an observability_url is given";
    ForgeResourcesPoolsEmpty = "forge.resources.pools_empty", Error, relaxable,
        "spec.resources.pools is missing or empty";
    ForgeResourcesPoolDuplicate = "forge.resources.pool_duplicate", Error, relaxable,
        "two pools share a name";
    ForgeResourcesRolePool = "forge.resources.role_pool", Error, relaxable,
        "a role names a pool that does not exist";
    ForgeResourcesSeries = "forge.resources.series", Error, relaxable,
        "a pool's series is not offered by the deployment";
    ForgeModelInitFrom = "forge.model.init_from", Error, relaxable,
        "spec.model.init_from is not run/<run_id>/<kind>[@step=<N>]";
    ForgeDataRef = "forge.data.ref", Error, relaxable,
        "a dataset, corpus or volume reference is malformed";
    ForgeDataHostPath = "forge.data.host_path", Error, relaxable,
        "a dataset or corpus is a host path or URL";
    ForgePluginsId = "forge.plugins.id", Error, relaxable,
        "a plugin id is not <owner>/<name>";
    ForgePluginsDigest = "forge.plugins.digest", Error, relaxable,
        "a plugin digest does not start with sha256:";
    ForgePluginsDuplicate = "forge.plugins.duplicate", Error, relaxable,
        "the same plugin id twice";
    ForgePluginsLeafCollision = "forge.plugins.leaf_collision", Error, relaxable,
        "two plugins would unpack to the same directory";
    ForgeEvaluationGate = "forge.evaluation.gate", Error, relaxable,
        "an evaluation gate decides nothing or names a benchmark that is not run";
    ForgeProvenanceCoreVersion = "forge.provenance.core_version", Error, relaxable,
        "provenance.core_version is missing or empty";
    ForgeHandshakeRecipeUnknown = "forge.handshake.recipe_unknown", Error, relaxable,
        "the catalog has no recipe of that name";
    ForgeHandshakeVersion = "forge.handshake.version", Error, relaxable,
        "the recipe version differs from the catalog";
    ForgeHandshakeDigest = "forge.handshake.digest", Error, relaxable,
        "the recipe digest differs from the catalog";
    ForgeHandshakeRuntimeId = "forge.handshake.runtime_id", Error, relaxable,
        "framework.runtime_id differs from the catalog";
    ForgeCoreVersionUnsupported = "forge.core_version.unsupported", Error, relaxable,
        "provenance.core_version is outside the recipe's requires.core range";
    ForgeQuotaJob = "forge.quota.job", Error, locked,
        "the job's GPU count exceeds the per-job limit";
    ForgeQuotaProject = "forge.quota.project", Error, locked,
        "the project's GPUs in unfinished jobs plus this job's exceed its quota";
    TaoDottedKey = "tao.dotted_key", Error, relaxable,
        "a key inside spec (or best.specs) contains '.' or is empty";
    TaoModeConfigRequiresSpec = "tao.mode.config_requires_spec", Error, relaxable,
        "mode config without spec";
    TaoModeConfigRequiresConfigFormat = "tao.mode.config_requires_config_format", Error, relaxable,
        "mode config without config_format";
    TaoModeConfigPathPlaceholder = "tao.mode.config_path_placeholder", Error, relaxable,
        "mode config with a command lacking {config_path}";
    TaoModeConfigForbidsArgs = "tao.mode.config_forbids_args", Error, relaxable,
        "mode config with args";
    TaoModeArgsRequiresArgs = "tao.mode.args_requires_args", Error, relaxable,
        "mode args without args";
    TaoModeArgsForbidsSpec = "tao.mode.args_forbids_spec", Error, relaxable,
        "mode args with spec";
    TaoModeArgsForbidsConfigFormat = "tao.mode.args_forbids_config_format", Error, relaxable,
        "mode args with config_format";
    TaoPlaceholderUnknown = "tao.placeholder.unknown", Warning, relaxable,
        "a {name} placeholder other than {config_path}, {job_id}, {results_dir}";
    TaoSpecKeySyntax = "tao.spec_key.syntax", Error, relaxable,
        "a spec_key or gpu_spec_key is not a dotted/indexed pointer";
    TaoSpecKeyUnresolved = "tao.spec_key.unresolved", Error, relaxable,
        "a declared spec_key cannot be bound inside spec (a warning when it indexes below a missing key, or the input is optional)";
    TaoGpuSpecKeyMismatch = "tao.gpu_spec_key.mismatch", Warning, relaxable,
        "the value at gpu_spec_key differs from compute_shape.gpus";
    TaoExecutionSecret = "tao.execution.secret", Error, locked,
        "a credential literal in the environment, commands or args";
    TaoExecutionProcessesPerNode = "tao.execution.processes_per_node", Warning, relaxable,
        "torchrun processes_per_node differs from compute_shape.gpus";
    TaoSupportingFilePath = "tao.supporting_file.path", Error, locked,
        "a supporting file path is absolute, has '..', a backslash, whitespace or NUL, or names a directory";
    TaoSupportingFileDuplicateDestination = "tao.supporting_file.duplicate_destination", Error, locked,
        "two supporting files stage to the same destination, or one inside another staged as a file";
    TaoSupportingFileMissing = "tao.supporting_file.missing", Error, locked,
        "a supporting file's source does not exist under the producer root";
    TaoSupportingFileNotRegular = "tao.supporting_file.not_regular", Error, locked,
        "a supporting file's source is not a regular file";
    TaoSupportingFileEscape = "tao.supporting_file.escape", Error, locked,
        "a supporting file's source resolves outside the producer root";
    TaoSupportingFileSha256Mismatch = "tao.supporting_file.sha256_mismatch", Error, locked,
        "a supporting file's SHA-256 differs from the declared one";
    TaoSupportingFileUndeclared = "tao.supporting_file.undeclared", Error, locked,
        "a package holds a file that is neither the bundle nor a declared source";
    TaoSupportingFileUndeclaredImport = "tao.supporting_file.undeclared_import", Error, locked,
        "a Python helper imports an undeclared sibling module";
    TaoStagingConflict = "tao.staging.conflict", Error, locked,
        "the staging directory holds a different bundle or extra files";
    TaoRecordFirstState = "tao.record.first_state", Error, relaxable,
        "the first transition is not PENDING";
    TaoRecordAfterTerminal = "tao.record.after_terminal", Error, relaxable,
        "a transition follows a terminal one";
    TaoRecordTerminalMismatch = "tao.record.terminal_mismatch", Error, relaxable,
        "terminal_state disagrees with the last terminal transition";
    TaoRecordTsOrder = "tao.record.ts_order", Warning, relaxable,
        "transition timestamps go backwards";
    TaoRecordSecret = "tao.record.secret", Error, locked,
        "an unredacted credential in a job record";
    TaoBestRecNotBest = "tao.best_rec.not_best", Error, relaxable,
        "best is not the best of all_recs in the declared direction";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_parse_back() {
        let mut ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        for rule in Rule::ALL {
            assert_eq!(Rule::parse(rule.id()), Some(*rule));
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Rule::ALL.len());
        assert_eq!(Rule::parse("no.such_rule"), None);
    }

    /// The rules a deployment cannot relax, column by column of the catalogue.
    #[test]
    fn the_locked_rules_are_the_gates_own() {
        let locked: Vec<&str> = Rule::ALL
            .iter()
            .filter(|r| !r.relaxable())
            .map(|r| r.id())
            .collect();
        assert_eq!(
            locked,
            [
                "json.syntax",
                "json.duplicate_key",
                "limits.size",
                "limits.depth",
                "forge.project.forbidden",
                "limits.violations",
                "kind.unknown",
                "forge.quota.job",
                "forge.quota.project",
                "tao.execution.secret",
                "tao.supporting_file.path",
                "tao.supporting_file.duplicate_destination",
                "tao.supporting_file.missing",
                "tao.supporting_file.not_regular",
                "tao.supporting_file.escape",
                "tao.supporting_file.sha256_mismatch",
                "tao.supporting_file.undeclared",
                "tao.supporting_file.undeclared_import",
                "tao.staging.conflict",
                "tao.record.secret",
            ]
        );
    }
}
