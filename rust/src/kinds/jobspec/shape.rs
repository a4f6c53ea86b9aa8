//! The shape of a forge/v2 JobSpec: the seed's field table, keyword for keyword, with
//! the named rules that replace a keyword where one applies (`forge.name`,
//! `forge.provenance.core_version`, ...). Unknown fields are warnings: a newer client
//! may send them.

use crate::collect::Ctx;
use crate::node::Value;
use crate::pointer::Here;
use crate::rules::Rule;
use crate::schema::{
    self, array_of, opt, req, str_matching, Additional, Field, ObjectShape, Shape, ANY, COUNT_MAX,
    SAFE_SEGMENT, STRING,
};

use super::patterns::{
    CORE_VERSION, ENTRYPOINT, EXP, GATE_METRIC, INIT_FROM, NAME, NOT_BLANK, OPTIONAL_SEGMENT,
    PLUGIN_DIGEST, PROJECT, RECIPE_NAME,
};

pub const API_VERSION: &str = "forge/v2";
pub const KIND: &str = "TrainingJob";

/// Walks `root` against the JobSpec's shape.
pub fn walk<'t, 'i>(root: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    schema::walk(root, &Shape::Object(&JOBSPEC), ctx);
}

const OPT_STRING: Shape = Shape::Nullable(&STRING);
const NONBLANK: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: Rule::SchemaMinLength,
    pattern: Some(&NOT_BLANK),
};
const COUNT: Shape = Shape::Int {
    min: Some(1),
    max: Some(COUNT_MAX),
    lexical: true,
};
const RATIO: Shape = Shape::Nullable(&Shape::Number {
    min: Some(0.0),
    max: Some(1.0),
});
const BOUND: Shape = Shape::Nullable(&Shape::Number {
    min: None,
    max: None,
});

static STRING_MAP: ObjectShape = ObjectShape::new(&[], Additional::Values(&STRING), None);
static FREE_MAP: ObjectShape = ObjectShape::new(&[], Additional::Allow, None);

/// An optional object that starforge-core also accepts as `null`.
macro_rules! object {
    ($shape:expr) => {
        Shape::Nullable(&Shape::Object($shape))
    };
}

/// An optional string, `null` accepted, checked by a pattern.
macro_rules! opt_str {
    ($p:expr) => {
        Shape::Nullable(&Shape::Str {
            min_len: 0,
            min_len_rule: Rule::SchemaMinLength,
            pattern: Some($p),
        })
    };
}

static METADATA: ObjectShape = ObjectShape::new(
    &[
        req("name", str_matching(&NAME)),
        opt("project", opt_str!(&PROJECT)),
        opt("owner", OPT_STRING),
        opt("display_name", OPT_STRING),
        opt("labels", object!(&STRING_MAP)),
    ],
    Additional::Warn,
    None,
);
static RECIPE: ObjectShape = ObjectShape::new(
    &[
        req("name", str_matching(&RECIPE_NAME)),
        req("version", NONBLANK),
        req("digest", NONBLANK),
        opt(
            "plugins",
            Shape::Nullable(&array_of(&str_matching(&SAFE_SEGMENT))),
        ),
    ],
    Additional::Warn,
    None,
);
static SOURCE: ObjectShape = ObjectShape::new(
    &[
        req("exp", str_matching(&EXP)),
        opt("entrypoint", opt_str!(&ENTRYPOINT)),
    ],
    Additional::Warn,
    None,
);
static FRAMEWORK: ObjectShape = ObjectShape::new(
    &[
        req("kind", str_matching(&SAFE_SEGMENT)),
        req("version", NONBLANK),
        opt("runtime_id", opt_str!(&OPTIONAL_SEGMENT)),
        opt("image", OPT_STRING),
        opt("observability_url", OPT_STRING),
    ],
    Additional::Warn,
    None,
);
static POOL: ObjectShape = ObjectShape::new(
    &[
        req("name", str_matching(&SAFE_SEGMENT)),
        opt("series", OPT_STRING),
        opt("nodes", COUNT),
        opt("gpus_per_node", COUNT),
    ],
    Additional::Warn,
    None,
);
static RESOURCES: ObjectShape = ObjectShape::new(
    &[
        opt("pools", Shape::Nullable(&array_of(&Shape::Object(&POOL)))),
        opt("roles", object!(&STRING_MAP)),
    ],
    Additional::Warn,
    None,
);
static PEFT: ObjectShape = ObjectShape::new(
    &[opt("kind", OPT_STRING), opt("dim", ANY), opt("alpha", ANY)],
    Additional::Warn,
    None,
);
static MODEL: ObjectShape = ObjectShape::new(
    &[
        opt("base", OPT_STRING),
        opt("peft", object!(&PEFT)),
        opt("init_from", opt_str!(&INIT_FROM)),
    ],
    Additional::Warn,
    None,
);
static DATA_REF: ObjectShape = ObjectShape::new(
    &[
        opt("dataset", OPT_STRING),
        opt("split", OPT_STRING),
        opt("path", OPT_STRING),
    ],
    Additional::Warn,
    None,
);
static QUALITY: ObjectShape = ObjectShape::new(
    &[
        opt("max_duplicate_ratio", RATIO),
        opt("overlap_with", OPT_STRING),
        opt("max_overlap_ratio", RATIO),
    ],
    Additional::Warn,
    None,
);
static DATA: ObjectShape = ObjectShape::new(
    &[
        opt("train", object!(&DATA_REF)),
        opt("validation", object!(&DATA_REF)),
        opt("corpus", OPT_STRING),
        opt("volumes", Shape::Nullable(&array_of(&STRING))),
        opt("output_dataset", OPT_STRING),
        opt("environment", OPT_STRING),
        opt("quality", object!(&QUALITY)),
    ],
    Additional::Warn,
    None,
);
static LIFECYCLE: ObjectShape = ObjectShape::new(
    &[opt(
        "on_success",
        Shape::Nullable(&array_of(&str_matching(&SAFE_SEGMENT))),
    )],
    Additional::Warn,
    None,
);
static GATE: ObjectShape = ObjectShape::new(
    &[
        req("metric", str_matching(&GATE_METRIC)),
        opt("min", BOUND),
        opt("max", BOUND),
        opt(
            "max_regression",
            Shape::Nullable(&Shape::Number {
                min: Some(0.0),
                max: None,
            }),
        ),
    ],
    Additional::Warn,
    None,
);
static EVALUATION: ObjectShape = ObjectShape::new(
    &[
        opt(
            "suites",
            Shape::Nullable(&array_of(&str_matching(&SAFE_SEGMENT))),
        ),
        opt("runner", OPT_STRING),
        opt("baseline", OPT_STRING),
        opt("limit", Shape::Nullable(&COUNT)),
        opt("gates", Shape::Nullable(&array_of(&Shape::Object(&GATE)))),
    ],
    Additional::Warn,
    None,
);
static PLUGIN: ObjectShape = ObjectShape::new(
    &[
        req("id", STRING),
        req("version", NONBLANK),
        req("digest", str_matching(&PLUGIN_DIGEST)),
    ],
    Additional::Warn,
    None,
);
static SPEC: ObjectShape = ObjectShape::new(
    &[
        req("recipe", Shape::Object(&RECIPE)),
        req("source", Shape::Object(&SOURCE)),
        req("framework", Shape::Object(&FRAMEWORK)),
        req("resources", Shape::Object(&RESOURCES)),
        opt("model", object!(&MODEL)),
        opt("data", object!(&DATA)),
        opt("hyperparams", object!(&FREE_MAP)),
        opt("lifecycle", object!(&LIFECYCLE)),
        opt("evaluation", object!(&EVALUATION)),
        opt(
            "plugins",
            Shape::Nullable(&array_of(&Shape::Object(&PLUGIN))),
        ),
    ],
    Additional::Warn,
    None,
);
static PROVENANCE: ObjectShape = ObjectShape::new(
    &[
        Field {
            name: "core_version",
            shape: Shape::Str {
                min_len: 1,
                min_len_rule: Rule::ForgeProvenanceCoreVersion,
                pattern: Some(&CORE_VERSION),
            },
            required: true,
            missing_rule: Rule::ForgeProvenanceCoreVersion,
        },
        opt("git_commit", OPT_STRING),
        opt("git_dirty", Shape::Nullable(&schema::BOOL)),
        opt("config_sha", OPT_STRING),
        opt("model_name", OPT_STRING),
    ],
    Additional::Warn,
    None,
);
static JOBSPEC: ObjectShape = ObjectShape::new(
    &[
        Field {
            name: "apiVersion",
            shape: Shape::Custom(api_version),
            required: true,
            missing_rule: Rule::ForgeApiVersion,
        },
        Field {
            name: "kind",
            shape: Shape::Custom(kind),
            required: true,
            missing_rule: Rule::ForgeKind,
        },
        req("metadata", Shape::Object(&METADATA)),
        req("spec", Shape::Object(&SPEC)),
        req("provenance", Shape::Object(&PROVENANCE)),
    ],
    Additional::Warn,
    None,
);

fn api_version<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if v.as_str() != Some(API_VERSION) {
        ctx.report(Rule::ForgeApiVersion, Here, || {
            format!(
                "apiVersion is {}; this gate speaks exactly \"{API_VERSION}\"",
                v.describe()
            )
        });
    }
}

fn kind<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if v.as_str() != Some(KIND) {
        ctx.report(Rule::ForgeKind, Here, || {
            format!(
                "kind is {}; the only kind admitted is \"{KIND}\"",
                v.describe()
            )
        });
    }
}
