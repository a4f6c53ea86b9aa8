//! TAO AutoML best_rec: the published schema (`best_rec.schema.json`), dotted keys at
//! every depth of `best.specs` (the schema checks only the top level), and that `best`
//! really is the best of `all_recs` in the declared direction.

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::node::{quote, Value};
use crate::pointer::ptr;
use crate::pointer::Here;
use crate::rules::Rule;
use crate::schema::{self, opt, req, Additional, ObjectShape, Shape, NONEMPTY, STRING};

use super::nested::{scan_nested, Placeholders};

static EMPTY: ObjectShape = ObjectShape::new(&[], Additional::Allow, None);

static BEST: ObjectShape = ObjectShape::new(
    &[
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
    Additional::Forbid,
    None,
);

static REC: ObjectShape = ObjectShape::new(
    &[
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
    Additional::Forbid,
    None,
);

static BEST_REC: ObjectShape = ObjectShape::new(
    &[
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
    Additional::Forbid,
    None,
);

fn specs<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if !v.is_object() {
        ctx.report(Rule::SchemaType, Here, || {
            format!(
                "expected an object (the nested winning hyperparameters), got {}",
                v.describe()
            )
        });
        return;
    }
    scan_nested(v, ctx, Placeholders::Ignored);
}

pub fn check<'t, 'i>(root: Value<'t, 'i>, _: &CoreConfig, _: &AdmissionContext, ctx: &mut Ctx<'i>) {
    schema::walk(root, &Shape::Object(&BEST_REC), ctx);
    not_best(root, ctx);
}

/// SPEC §2: a recommendation in `all_recs` with a non-null score strictly better than
/// `best.score`, or `all_recs` listing `best.rec_id` with another score. An empty
/// `all_recs`, or one without the winner, is how TAO's adapter writes it: no violation.
fn not_best(root: Value<'_, '_>, ctx: &mut Ctx<'_>) {
    let (Some(best), Some(recs)) = (root.get("best"), root.get("all_recs")) else {
        return;
    };
    let maximize = match root.get_str("direction") {
        Some("maximize") => true,
        Some("minimize") => false,
        _ => return,
    };
    let Some(score) = best.get("score").and_then(|s| s.as_f64()) else {
        return;
    };
    let rec_id = best.get_str("rec_id");
    let better = |s: f64| if maximize { s > score } else { s < score };
    let mut top: Option<(f64, Option<&str>)> = None;
    // The winner's score as all_recs lists it, when that differs (null is another
    // score too: the recommendation would then have no result at all).
    let mut winner_listed_otherwise: Option<String> = None;
    for rec in recs.items() {
        let listed = rec.get("score");
        let winner = rec_id.is_some() && rec.get_str("rec_id") == rec_id;
        if winner && listed.is_some_and(|v| v.is_null()) {
            winner_listed_otherwise.get_or_insert_with(|| "null".into());
        }
        let Some(s) = listed.and_then(|s| s.as_f64()) else {
            continue;
        };
        if winner && s != score {
            winner_listed_otherwise.get_or_insert_with(|| s.to_string());
        }
        if better(s) && top.is_none_or(|(t, _)| if maximize { s > t } else { s < t }) {
            top = Some((s, rec.get_str("rec_id")));
        }
    }
    let direction = if maximize { "maximize" } else { "minimize" };
    let message = match (top, winner_listed_otherwise) {
        (Some((t, id)), _) => format!(
            "best.score is {score} but all_recs holds {} with {t}, better when the direction is {direction}; the best recommendation is the best one",
            id.map_or("a recommendation".to_string(), |id| format!("recommendation {}", quote(id)))
        ),
        (None, Some(listed)) => format!(
            "best.score is {score} but all_recs lists best.rec_id {} with score {listed}; the two must agree",
            quote(rec_id.unwrap_or_default())
        ),
        (None, None) => return,
    };
    ctx.report(Rule::TaoBestRecNotBest, ptr!["best", "score"], || message);
}
