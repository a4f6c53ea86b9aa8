//! TAO AutoML best_rec: the published schema (`best_rec.schema.json`), dotted keys at
//! every depth of `best.specs` (the schema checks only the top level), and that `best`
//! really is the best of `all_recs` in the declared direction.

use crate::kinds::spec_bundle::scan_nested;
use crate::node::{quote, Value};
use crate::pointer::pointer;
use crate::report::Severity;
use crate::schema::{self, opt, req, Additional, Ctx, ObjectShape, Shape, ANY, NONEMPTY, STRING};

static EMPTY: ObjectShape = ObjectShape {
    fields: &[],
    additional: Additional::Allow,
    keys: None,
};

static BEST: ObjectShape = ObjectShape {
    fields: &[
        req("rec_id", NONEMPTY),
        req(
            "score",
            Shape::Number {
                min: None,
                max: None,
            },
        ),
        req("specs", Shape::Custom(specs)),
        req("observed_budget", Shape::Object(&EMPTY)),
        req("checkpoint_uri", NONEMPTY),
        opt(
            "checkpoint_epoch",
            Shape::Int {
                min: Some(0),
                max: None,
                lexical: false,
            },
        ),
        opt(
            "checkpoint_step",
            Shape::Int {
                min: Some(0),
                max: None,
                lexical: false,
            },
        ),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};

static REC: ObjectShape = ObjectShape {
    fields: &[
        req("rec_id", NONEMPTY),
        req(
            "score",
            Shape::Nullable(&Shape::Number {
                min: None,
                max: None,
            }),
        ),
        opt("job_id", STRING),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};

static BEST_REC: ObjectShape = ObjectShape {
    fields: &[
        req("schema_version", Shape::ConstInt(1)),
        req("experiment_id", NONEMPTY),
        req("metric_name", NONEMPTY),
        req(
            "direction",
            Shape::Enum {
                values: &["maximize", "minimize"],
                nullable: false,
            },
        ),
        req("best", Shape::Object(&BEST)),
        req("all_recs", schema::array_of(&Shape::Object(&REC))),
    ],
    additional: Additional::Forbid(Severity::Error),
    keys: None,
};

fn specs<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if !v.is_object() {
        ctx.here(
            "schema.type",
            Severity::Error,
            format!(
                "expected an object (the nested winning hyperparameters), got {}",
                v.describe()
            ),
        );
        return;
    }
    scan_nested(v, ctx, "tao.dotted_key");
}

pub fn check<'t, 'i>(root: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    schema::walk(root, &Shape::Object(&BEST_REC), ctx);
    let _ = ANY;
    not_best(root, ctx);
}

fn not_best(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let (Some(best), Some(recs)) = (root.get("best"), root.get("all_recs")) else {
        return;
    };
    let maximize = match root.get_str("direction") {
        Some("maximize") => true,
        Some("minimize") => false,
        _ => return,
    };
    if let Some(rec_id) = best.get_str("rec_id") {
        if !recs.items().any(|r| r.get_str("rec_id") == Some(rec_id)) {
            ctx.error(
                pointer(&["best", "rec_id"]),
                "tao.best_rec.not_best",
                format!("best.rec_id {} is not among all_recs", quote(rec_id)),
            );
        }
    }
    let Some(score) = best.get("score").and_then(|s| s.as_f64()) else {
        return;
    };
    let scores = recs
        .items()
        .filter_map(|r| r.get("score").and_then(|s| s.as_f64()));
    let top = if maximize {
        scores.fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))))
    } else {
        scores.fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.min(s))))
    };
    let direction = if maximize { "maximize" } else { "minimize" };
    match top {
        None => ctx.error(pointer(&["best", "score"]), "tao.best_rec.not_best", format!("best.score is {score} but all_recs holds no scored recommendation to back it")),
        Some(top) if top != score => ctx.error(
            pointer(&["best", "score"]),
            "tao.best_rec.not_best",
            format!("best.score is {score} but the best non-null score in all_recs ({direction}) is {top}"),
        ),
        _ => {}
    }
}
