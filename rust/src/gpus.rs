//! The GPUs a launch asks for, read once for the rules and for admission (`facts`): a
//! JobSpec's `nodes * gpus_per_node` summed over `spec.resources.pools`, a
//! spec-bundle's `compute_shape.nodes * gpus`.
//!
//! Each count is read as the kind's schema reads an integer (a JobSpec's as written,
//! `8` and not `8.0`; a spec-bundle's in the JSON Schema sense). A count the quota can
//! charge is a whole number from 0 to `COUNT_MAX`; anything else (`"abc"`, `1.5`,
//! `-1`, `1e300`, 2^63, a count missing where the schema requires it, a pool that is
//! not an object) is `Unusable`. The schema rules report those too, but a deployment
//! may relax them: `judge` then refuses the document with the locked
//! `forge.quota.job`, so that what is admitted is always what is charged.

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::kind::Kind;
use crate::node::{Type, Value};
use crate::pointer::Segment;
use crate::quota;
use crate::rules::{Rule, Severity};
use crate::schema::COUNT_MAX;

/// A count that cannot be charged: where it is, the schema rule that reports it there,
/// and why, as a message says it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unusable {
    pub field: String,
    pub rule: Rule,
    pub why: String,
}

/// How the schema of a kind reads an integer.
#[derive(Clone, Copy)]
enum Reading {
    /// As written: `8`, not `8.0` (a JobSpec, as Python's `int` sees it).
    Lexical,
    /// In the JSON Schema sense: `8.0` is `8` (a spec-bundle).
    Schema,
}

/// Why a value cannot be charged: the schema rule that reports it, and a sentence.
type Why = (Rule, String);

impl Unusable {
    fn at(keys: &[&str], (rule, why): Why) -> Unusable {
        Unusable {
            field: crate::pointer::render(&[Segment::Keys(keys)]),
            rule,
            why,
        }
    }
}

/// One count, named `name` in a message: `absent` when the field is missing (`None`
/// where the schema requires it).
fn count(
    v: Option<Value<'_, '_>>,
    name: &str,
    reading: Reading,
    absent: Option<u64>,
) -> Result<u64, Why> {
    let Some(v) = v else {
        return absent.ok_or_else(|| (Rule::SchemaRequired, format!("{name} is missing")));
    };
    let n = match reading {
        Reading::Lexical => v.as_lexical_int(),
        Reading::Schema => v.as_schema_int(),
    };
    let shown = || v.describe();
    match n {
        None => Err((
            Rule::SchemaType,
            format!("{name} is {}, not a whole number", shown()),
        )),
        Some(n) if n < 0 => Err((
            Rule::SchemaMinimum,
            format!("{name} is {}, below 0", shown()),
        )),
        Some(n) if n > COUNT_MAX as i128 => Err((
            Rule::SchemaMaximum,
            format!(
                "{name} is {}, more than the {COUNT_MAX} the platform holds",
                shown()
            ),
        )),
        // In range: 0..=COUNT_MAX fits u64.
        Some(n) => Ok(n as u64),
    }
}

/// The object a count is read from, named `name` in a message (the schema requires it).
fn object<'t, 'i>(v: Option<Value<'t, 'i>>, name: &str) -> Result<Value<'t, 'i>, Why> {
    match v {
        Some(v) if v.is_object() => Ok(v),
        Some(v) => Err((
            Rule::SchemaType,
            format!("{name} is {}, not an object", v.describe()),
        )),
        None => Err((Rule::SchemaRequired, format!("{name} is missing"))),
    }
}

/// The GPUs a JobSpec asks for (`spec` is its `spec`): `None` once a count is unusable,
/// each handed to `unusable`. A pool's missing `nodes` or `gpus_per_node` is 1; no
/// pools (missing, `null` or empty) is 0. The sum saturates; above `COUNT_MAX` it is
/// `forge.quota.job` (`kinds::jobspec`).
pub fn of_jobspec(spec: Option<Value<'_, '_>>, unusable: &mut impl FnMut(Unusable)) -> Option<u64> {
    let spec = object(spec, "spec").map_err(|why| Unusable::at(&["spec"], why));
    let resources = spec.and_then(|spec| {
        object(spec.get("resources"), "resources")
            .map_err(|why| Unusable::at(&["spec", "resources"], why))
    });
    let pools = match resources {
        Ok(resources) => resources.get("pools"),
        Err(u) => {
            unusable(u);
            return None;
        }
    };
    if let Some(p) = pools.filter(|p| !matches!(p.ty(), Type::Null | Type::Array(_))) {
        let why = (
            Rule::SchemaType,
            format!("pools is {}, not an array", p.describe()),
        );
        unusable(Unusable::at(&["spec", "resources", "pools"], why));
        return None;
    }
    let mut total = Some(0u64);
    for (i, pool) in pools.map(|p| p.items()).into_iter().flatten().enumerate() {
        // The pointers are built only for a count that cannot be charged.
        let at = |key: Option<&str>, why: Why| {
            let i = i.to_string();
            let keys = ["spec", "resources", "pools", &i];
            match key {
                Some(key) => Unusable::at(&[&keys[..], &[key]].concat(), why),
                None => Unusable::at(&keys, why),
            }
        };
        let pool = match object(Some(pool), "the pool") {
            Ok(pool) => pool,
            Err(why) => {
                unusable(at(None, why));
                total = None;
                continue;
            }
        };
        let [nodes, per_node] = pool.get_each(["nodes", "gpus_per_node"]);
        let nodes = count(nodes, "nodes", Reading::Lexical, Some(1));
        let per_node = count(per_node, "gpus_per_node", Reading::Lexical, Some(1));
        match (nodes, per_node) {
            // Each at most COUNT_MAX: the product cannot overflow.
            (Ok(n), Ok(g)) => total = total.map(|t| t.saturating_add(n * g)),
            (nodes, per_node) => {
                for (key, counted) in [("nodes", nodes), ("gpus_per_node", per_node)] {
                    if let Err(why) = counted {
                        unusable(at(Some(key), why));
                    }
                }
                total = None;
            }
        }
    }
    total
}

/// The GPUs a spec-bundle asks for (`compute_shape` is its `compute_shape`):
/// `gpus * nodes`, `None` once a count is unusable, each handed to `unusable`.
/// Above `COUNT_MAX` it is `forge.quota.job` (`kinds::spec_bundle`).
pub fn of_bundle(
    compute_shape: Option<Value<'_, '_>>,
    unusable: &mut impl FnMut(Unusable),
) -> Option<u64> {
    let shape = match object(compute_shape, "compute_shape") {
        Ok(shape) => shape,
        Err(why) => {
            unusable(Unusable::at(&["compute_shape"], why));
            return None;
        }
    };
    let [gpus, nodes] = shape.get_each(["gpus", "nodes"]);
    let gpus = count(gpus, "compute_shape.gpus", Reading::Schema, None);
    let nodes = count(nodes, "compute_shape.nodes", Reading::Schema, None);
    match (gpus, nodes) {
        // Each at most COUNT_MAX: the product cannot overflow.
        (Ok(g), Ok(n)) => Some(g * n),
        (gpus, nodes) => {
            for (key, counted) in [("gpus", gpus), ("nodes", nodes)] {
                if let Err(why) = counted {
                    unusable(Unusable::at(&["compute_shape", key], why));
                }
            }
            None
        }
    }
}

/// Refuses an unusable count with the locked `forge.quota.job` when the deployment
/// relaxed the schema rule that reports it (`[rules]`, the project's first): under
/// the default severities that rule's error already refuses the document, and one
/// violation of the field is enough.
pub fn judge(u: Unusable, config: &CoreConfig, project: Option<&str>, ctx: &mut Ctx<'_>) {
    let level = config
        .enforcement
        .level(u.rule, project)
        .unwrap_or(u.rule.severity());
    if level != Severity::Error {
        ctx.report(Rule::ForgeQuotaJob, u.field, || format!(
                "{}, so the job's GPUs cannot be counted against its quota; a node or GPU count is a whole number from 0 to {COUNT_MAX} ({} is relaxed here, this rule is not)",
                u.why,
                u.rule.id()
            ));
    }
}

/// Charges `gpus` of a `kind` launch to `project`: judged now when the admission
/// gives the project's quota and usage, else kept in `ctx` for the caller that reads
/// the usage later (`AdmissionContext::defer_quota`). A project outside the grant is never
/// charged: `forge.project.forbidden` answers it, and its usage is not the caller's
/// to learn.
pub fn charge(
    kind: Kind,
    project: Option<&str>,
    gpus: u64,
    admission: &AdmissionContext,
    ctx: &mut Ctx<'_>,
) {
    let name = project.unwrap_or_default();
    if !admission.may_submit_to(name) {
        return;
    }
    let claim = || quota::Claim {
        kind,
        project: project.map(str::to_string),
        gpus,
    };
    if let Some((quota, in_use)) = admission.quota_for(name) {
        if let Some((field, message)) = claim().excess(in_use, quota) {
            ctx.report(Rule::ForgeQuotaProject, field, || message);
        }
    } else if admission.defer_quota {
        ctx.claim = Some(claim());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::with_document;
    use crate::limits::Limits;
    use crate::report::Violation;

    /// What `of` reads from `doc`, and the unusable counts' (field, rule).
    fn read(
        doc: &str,
        of: fn(Value<'_, '_>, &mut dyn FnMut(Unusable)) -> Option<u64>,
    ) -> (Option<u64>, Vec<(String, Rule)>) {
        with_document(doc.as_bytes(), &Limits::default(), |d| {
            let mut found = Vec::new();
            let total = of(d.root, &mut |u| found.push((u.field, u.rule)));
            (total, found)
        })
        .unwrap()
    }

    fn jobspec(root: Value<'_, '_>, u: &mut dyn FnMut(Unusable)) -> Option<u64> {
        of_jobspec(root.get("spec"), &mut |x| u(x))
    }

    fn bundle(root: Value<'_, '_>, u: &mut dyn FnMut(Unusable)) -> Option<u64> {
        of_bundle(root.get("compute_shape"), &mut |x| u(x))
    }

    fn pools(pools: &str) -> String {
        format!(r#"{{"spec":{{"resources":{{"pools":{pools}}}}}}}"#)
    }

    /// The schema rules the kind's own walk reports for `doc`, as (field, rule).
    /// The schema's (field, rule) pairs for `doc` whose field starts with `prefix`.
    fn schema_rules_under(doc: &str, kind: crate::kind::Kind, prefix: &str) -> Vec<(String, Rule)> {
        schema_rules(doc, kind)
            .into_iter()
            .filter(|(f, _)| f.starts_with(prefix))
            .collect()
    }

    fn schema_rules(doc: &str, kind: crate::kind::Kind) -> Vec<(String, Rule)> {
        with_document(doc.as_bytes(), &Limits::default(), |d| {
            let mut ctx = Ctx::new();
            crate::kinds::check(
                kind,
                d.root,
                &CoreConfig::default(),
                &crate::admission::AdmissionContext::default(),
                &mut ctx,
            );
            ctx.out
                .into_report(Some(kind))
                .violations
                .into_iter()
                .map(|v: Violation| (v.field, v.rule))
                .collect()
        })
        .unwrap()
    }

    #[test]
    fn a_jobspec_counts_each_pool_once() {
        let two = pools(r#"[{"nodes":2,"gpus_per_node":8},{"name":"b"},{"gpus_per_node":0}]"#);
        assert_eq!(read(&two, jobspec), (Some(17), vec![]));
        assert_eq!(read(&pools("null"), jobspec), (Some(0), vec![]));
        assert_eq!(
            read(r#"{"spec":{"resources":{}}}"#, jobspec),
            (Some(0), vec![])
        );
        let max = pools(
            r#"[{"nodes":2147483647,"gpus_per_node":2147483647},{"nodes":2147483647,"gpus_per_node":2147483647}]"#,
        );
        assert_eq!(
            read(&max, jobspec).0,
            Some(2 * (COUNT_MAX as u64) * (COUNT_MAX as u64))
        );
    }

    #[test]
    fn a_count_that_cannot_be_charged_is_unusable_where_the_schema_says_so() {
        let at = |key: &str| format!("/spec/resources/pools/0/{key}");
        for (value, rule) in [
            ("1e300", Rule::SchemaType),
            ("18446744073709551621", Rule::SchemaType),
            (r#""abc""#, Rule::SchemaType),
            ("1.5", Rule::SchemaType),
            ("8.0", Rule::SchemaType),
            ("null", Rule::SchemaType),
            ("-1", Rule::SchemaMinimum),
            ("9223372036854775808", Rule::SchemaMaximum),
            ("2147483648", Rule::SchemaMaximum),
        ] {
            let doc = pools(&format!(
                r#"[{{"name":"a","nodes":1,"gpus_per_node":{value}}}]"#
            ));
            let found = vec![(at("gpus_per_node"), rule)];
            assert_eq!(read(&doc, jobspec), (None, found.clone()), "{value}");
            // The schema reports the same rule at the same field.
            assert_eq!(
                schema_rules_under(&doc, crate::kind::Kind::JobSpec, "/spec/resources/pools"),
                found,
                "{value}"
            );
        }
        let both = pools(r#"[{"nodes":"x","gpus_per_node":-2}]"#);
        assert_eq!(
            read(&both, jobspec),
            (
                None,
                vec![
                    (at("nodes"), Rule::SchemaType),
                    (at("gpus_per_node"), Rule::SchemaMinimum)
                ]
            )
        );
        for (doc, field, rule) in [
            (pools(r#""abc""#), "/spec/resources/pools", Rule::SchemaType),
            (pools("[5]"), "/spec/resources/pools/0", Rule::SchemaType),
            (
                r#"{"spec":{"resources":[]}}"#.into(),
                "/spec/resources",
                Rule::SchemaType,
            ),
            (
                r#"{"spec":{}}"#.into(),
                "/spec/resources",
                Rule::SchemaRequired,
            ),
            ("{}".into(), "/spec", Rule::SchemaRequired),
        ] {
            assert_eq!(
                read(&doc, jobspec),
                (None, vec![(field.into(), rule)]),
                "{doc}"
            );
            let schema = schema_rules(&doc, crate::kind::Kind::JobSpec);
            assert!(schema.contains(&(field.into(), rule)), "{doc}: {schema:?}");
        }
    }

    #[test]
    fn a_bundle_counts_its_compute_shape_as_its_schema_reads_integers() {
        let shape = |gpus: &str, nodes: &str| {
            format!(r#"{{"compute_shape":{{"gpus":{gpus},"nodes":{nodes}}}}}"#)
        };
        assert_eq!(read(&shape("8", "2"), bundle), (Some(16), vec![]));
        assert_eq!(read(&shape("8.0", "2"), bundle), (Some(16), vec![]));
        assert_eq!(read(&shape("0", "3"), bundle), (Some(0), vec![]));
        for (gpus, rule) in [
            ("1e300", Rule::SchemaMaximum),
            ("18446744073709551621", Rule::SchemaMaximum),
            ("-1e300", Rule::SchemaMinimum),
            (r#""abc""#, Rule::SchemaType),
            ("1.5", Rule::SchemaType),
            ("-1", Rule::SchemaMinimum),
            ("9223372036854775808", Rule::SchemaMaximum),
        ] {
            let doc = shape(gpus, "1");
            let found = vec![("/compute_shape/gpus".to_string(), rule)];
            assert_eq!(read(&doc, bundle), (None, found.clone()), "{gpus}");
            assert_eq!(
                schema_rules_under(&doc, crate::kind::Kind::SpecBundle, "/compute_shape"),
                found,
                "{gpus}"
            );
        }
        for (doc, field, rule) in [
            (
                r#"{"compute_shape":{"nodes":1}}"#,
                "/compute_shape/gpus",
                Rule::SchemaRequired,
            ),
            ("{}", "/compute_shape", Rule::SchemaRequired),
            (
                r#"{"compute_shape":null}"#,
                "/compute_shape",
                Rule::SchemaType,
            ),
        ] {
            assert_eq!(
                read(doc, bundle),
                (None, vec![(field.into(), rule)]),
                "{doc}"
            );
            let schema = schema_rules(doc, crate::kind::Kind::SpecBundle);
            assert!(schema.contains(&(field.into(), rule)), "{doc}: {schema:?}");
        }
    }
}
