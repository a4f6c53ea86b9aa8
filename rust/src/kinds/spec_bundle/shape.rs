//! The shape of a spec-bundle, keyword for keyword as the published schema
//! (`spec_bundle.schema.json`) has it, with the named rules that replace a keyword
//! where one applies (`tao.spec_key.syntax`, `tao.supporting_file.path`,
//! `tao.dotted_key`).

use crate::collect::Ctx;
use crate::kinds::nested::{scan_nested, Placeholders};
use crate::node::Value;
use crate::pointer::Here;
use crate::rules::Rule;
use crate::schema::{
    self, array_of, opt, req, str_matching, Additional, ObjectShape, Shape, COUNT_MAX, NONEMPTY,
    STRING,
};

use super::patterns::{ENV_NAME, IMAGE, SHA256, SPEC_KEY, SUPPORTING_PATH};

/// Walks `root` against the bundle's shape.
pub fn walk<'t, 'i>(root: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    schema::walk(root, &Shape::Object(&BUNDLE), ctx);
}

const SPEC_KEY_STR: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: Rule::TaoSpecKeySyntax,
    pattern: Some(&SPEC_KEY),
};
const SUPPORTING_PATH_STR: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: Rule::SchemaMinLength,
    pattern: Some(&SUPPORTING_PATH),
};
const FILE_TYPE: Shape = Shape::Enum {
    values: &["file", "folder"],
    nullable: false,
};

static DECLARED_INPUT: ObjectShape = ObjectShape::new(
    &[
        req("spec_key", SPEC_KEY_STR),
        req("type", FILE_TYPE),
        opt("optional", schema::BOOL),
        req("uri", NONEMPTY),
    ],
    Additional::Forbid,
    None,
);
static DECLARED_OUTPUT: ObjectShape = ObjectShape::new(
    &[req("spec_key", SPEC_KEY_STR), req("type", FILE_TYPE)],
    Additional::Forbid,
    None,
);
static COMPUTE_SHAPE: ObjectShape = ObjectShape::new(
    &[
        req(
            "gpus",
            Shape::Int {
                min: Some(0),
                max: Some(COUNT_MAX),
                lexical: false,
            },
        ),
        req(
            "nodes",
            Shape::Int {
                min: Some(1),
                max: Some(COUNT_MAX),
                lexical: false,
            },
        ),
    ],
    Additional::Forbid,
    None,
);
static SUPPORTING_FILE: ObjectShape = ObjectShape::new(
    &[
        req("source", SUPPORTING_PATH_STR),
        req("destination", SUPPORTING_PATH_STR),
        req("sha256", str_matching(&SHA256)),
    ],
    Additional::Forbid,
    None,
);
static DISTRIBUTED: ObjectShape = ObjectShape::new(
    &[
        req(
            "launcher",
            Shape::Enum {
                values: &["direct", "torchrun"],
                nullable: false,
            },
        ),
        req(
            "processes_per_node",
            Shape::Int {
                min: Some(1),
                max: None,
                lexical: false,
            },
        ),
        opt("tasks_per_node", Shape::ConstInt(1)),
    ],
    Additional::Forbid,
    None,
);
static COMPLETION: ObjectShape = ObjectShape::new(
    &[
        req("child_exit_code_path", NONEMPTY),
        opt("structured_status_path", NONEMPTY),
        opt(
            "success_states",
            Shape::Array {
                items: &NONEMPTY,
                min_items: 1,
                min_items_rule: Rule::SchemaMinItems,
                unique: true,
            },
        ),
    ],
    Additional::Forbid,
    None,
);
static ENVIRONMENT: ObjectShape =
    ObjectShape::new(&[], Additional::Values(&STRING), Some(&ENV_NAME));
static EXECUTION: ObjectShape = ObjectShape::new(
    &[
        opt("environment", Shape::Object(&ENVIRONMENT)),
        opt("pre_commands", array_of(&NONEMPTY)),
        opt("post_commands", array_of(&NONEMPTY)),
        opt(
            "post_scope",
            Shape::Enum {
                values: &["all", "leader"],
                nullable: false,
            },
        ),
        opt("distributed", Shape::Object(&DISTRIBUTED)),
        opt(
            "supporting_files",
            array_of(&Shape::Object(&SUPPORTING_FILE)),
        ),
        opt("completion", Shape::Object(&COMPLETION)),
    ],
    Additional::Forbid,
    None,
);
static BUNDLE: ObjectShape = ObjectShape::new(
    &[
        req("network_arch", NONEMPTY),
        req("action", NONEMPTY),
        req("image", str_matching(&IMAGE)),
        req(
            "mode",
            Shape::Enum {
                values: &["config", "args"],
                nullable: false,
            },
        ),
        req("command", NONEMPTY),
        opt(
            "config_format",
            Shape::Enum {
                values: &["yaml", "toml", "json"],
                nullable: false,
            },
        ),
        opt("spec", Shape::Custom(nested_spec)),
        opt("args", array_of(&STRING)),
        req("declared_inputs", array_of(&Shape::Object(&DECLARED_INPUT))),
        req(
            "declared_outputs",
            Shape::Array {
                items: &Shape::Object(&DECLARED_OUTPUT),
                min_items: 1,
                min_items_rule: Rule::SchemaMinItems,
                unique: false,
            },
        ),
        opt("upload_excludes", array_of(&STRING)),
        req("compute_shape", Shape::Object(&COMPUTE_SHAPE)),
        opt("gpu_spec_key", str_matching(&SPEC_KEY)),
        opt("execution", Shape::Object(&EXECUTION)),
    ],
    Additional::Forbid,
    None,
);

/// `spec` is a nested dict: no key anywhere may contain `.` or be empty (also inside
/// arrays). String values are scanned for placeholders on the same walk.
fn nested_spec<'t, 'i>(v: Value<'t, 'i>, ctx: &mut Ctx<'i>) {
    if !v.is_object() {
        ctx.report(Rule::SchemaType, Here, || {
            format!(
                "expected an object (the nested config dict), got {}",
                v.describe()
            )
        });
        return;
    }
    scan_nested(v, ctx, Placeholders::Checked);
}
