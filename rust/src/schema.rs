//! The generic schema layer: declarative shapes for each kind, walked once per
//! document, reporting `schema.<keyword>` violations with exact JSON Pointers.
//!
//! The shapes mirror the published JSON Schemas keyword for keyword (and the forge/v2
//! field table for JobSpecs). Where a named rule covers what a keyword catches (a
//! dotted key, a `..` source), the shape carries that rule id instead, so the document
//! gets one violation, not two. Semantic rules live in the per-kind modules.

use crate::collect::Ctx;
use crate::node::{Type, Value};
use crate::pointer::{Child, Here, Path, Place, Segment};
use crate::rules::{Rule, Severity};
use crate::text::{const_same, safe_segment};

/// The largest node or GPU count a document may ask for: beyond it a count is a
/// violation, never a number the store or the scheduler cannot hold.
pub const COUNT_MAX: i64 = i32::MAX as i64;

/// A string test: `Err` carries the sentence that says what would be accepted.
pub type Test = fn(&str) -> Result<(), String>;

/// A `pattern` (or `propertyNames`) keyword, reported under `rule`.
pub struct Pattern {
    pub rule: Rule,
    pub test: Test,
}

impl Pattern {
    pub const fn new(rule: Rule, test: Test) -> Pattern {
        Pattern { rule, test }
    }
}

pub type Custom = for<'t, 'i> fn(Value<'t, 'i>, &mut Ctx<'i>);

pub enum Shape {
    Any,
    Str {
        min_len: usize,
        min_len_rule: Rule,
        pattern: Option<&'static Pattern>,
    },
    /// `lexical`: only `8`, never `8.0` (forge/v2, as Python's `int`); otherwise JSON Schema's integer.
    Int {
        min: Option<i64>,
        max: Option<i64>,
        lexical: bool,
    },
    Number {
        min: Option<f64>,
        max: Option<f64>,
    },
    Bool,
    Enum {
        values: &'static [&'static str],
        nullable: bool,
    },
    ConstInt(i64),
    ConstTrue,
    Nullable(&'static Shape),
    Array {
        items: &'static Shape,
        min_items: usize,
        min_items_rule: Rule,
        unique: bool,
    },
    Object(&'static ObjectShape),
    Custom(Custom),
}

pub enum Additional {
    /// `additionalProperties: false`: an unknown field is an error.
    Forbid,
    /// An unknown field is a warning and is otherwise ignored: a newer client may send
    /// fields this gate does not know yet (JobSpecs).
    Warn,
    Allow,
    Values(&'static Shape),
}

pub struct ObjectShape {
    pub fields: &'static [Field],
    pub additional: Additional,
    /// `propertyNames`.
    pub keys: Option<&'static Pattern>,
    /// Bit `i` set when `fields[i]` is required: derived from `fields` by `new`, so
    /// that a walked object is checked for missing fields with one compare.
    required: u64,
}

impl ObjectShape {
    pub const fn new(
        fields: &'static [Field],
        additional: Additional,
        keys: Option<&'static Pattern>,
    ) -> ObjectShape {
        // A field is tracked by its bit in a `u64`.
        assert!(
            fields.len() <= 64,
            "an object shape names at most 64 fields"
        );
        let mut required = 0;
        let mut i = 0;
        while i < fields.len() {
            if fields[i].required {
                required |= 1 << i;
            }
            // `field` finds a key by trying the field after the last one found first
            // and wrapping around, which is the first match only while no table names
            // a field twice: a table that does fails the build.
            let mut j = 0;
            while j < i {
                assert!(
                    !const_same(fields[i].name, fields[j].name),
                    "an object shape names a field twice"
                );
                j += 1;
            }
            i += 1;
        }
        ObjectShape {
            fields,
            additional,
            keys,
            required,
        }
    }
}

pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    pub required: bool,
    /// The rule a missing required field is reported under.
    pub missing_rule: Rule,
}

pub const ANY: Shape = Shape::Any;
pub const STRING: Shape = Shape::Str {
    min_len: 0,
    min_len_rule: Rule::SchemaMinLength,
    pattern: None,
};
pub const NONEMPTY: Shape = Shape::Str {
    min_len: 1,
    min_len_rule: Rule::SchemaMinLength,
    pattern: None,
};
pub const BOOL: Shape = Shape::Bool;

pub const fn req(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        required: true,
        missing_rule: Rule::SchemaRequired,
    }
}

pub const fn opt(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        required: false,
        missing_rule: Rule::SchemaRequired,
    }
}

pub const fn str_matching(pattern: &'static Pattern) -> Shape {
    Shape::Str {
        min_len: 0,
        min_len_rule: Rule::SchemaMinLength,
        pattern: Some(pattern),
    }
}

pub const fn array_of(items: &'static Shape) -> Shape {
    Shape::Array {
        items,
        min_items: 0,
        min_items_rule: Rule::SchemaMinItems,
        unique: false,
    }
}

/// Walks `v` against `shape`, with `ctx.path` pointing at `v`.
pub fn walk<'t, 'i>(v: Value<'t, 'i>, shape: &Shape, ctx: &mut Ctx<'i>) {
    walk_at(v, shape, At::Here, ctx);
}

/// Where the value being walked sits: at `ctx.path`, or at a child of it that goes on
/// the path only when it must (a container is walked, a violation is kept). Scalars,
/// most of a document, are then checked without touching the path.
#[derive(Clone, Copy)]
enum At<'i> {
    Here,
    Key(&'i str),
    Index(usize),
}

impl<'i> At<'i> {
    #[inline]
    fn enter(self, ctx: &mut Ctx<'i>) {
        match self {
            At::Here => {}
            At::Key(key) => ctx.path.push(Segment::Key(key)),
            At::Index(i) => ctx.path.push(Segment::Index(i)),
        }
    }

    #[inline]
    fn leave(self, ctx: &mut Ctx<'i>) {
        if !matches!(self, At::Here) {
            ctx.path.pop();
        }
    }
}

impl Place for At<'_> {
    fn render(self, here: &Path<'_>) -> String {
        match self {
            At::Here => here.render(),
            At::Key(key) => crate::pointer::child(here, Segment::Key(key)),
            At::Index(i) => crate::pointer::child(here, Segment::Index(i)),
        }
    }
}

/// Inlined into the loops over entries and items, so that a scalar, the common case,
/// is checked without a call: only containers pay for one.
#[inline(always)]
fn walk_at<'t, 'i>(v: Value<'t, 'i>, mut shape: &Shape, at: At<'i>, ctx: &mut Ctx<'i>) {
    while let Shape::Nullable(inner) = shape {
        if v.is_null() {
            return;
        }
        shape = inner;
    }
    match shape {
        Shape::Object(_) | Shape::Array { .. } | Shape::Custom(_) => walk_nested(v, shape, at, ctx),
        _ => scalar(v, shape, at, ctx),
    }
}

/// The shapes that hold other values (or may: `Custom`), walked with `at` on the path.
#[inline(never)]
fn walk_nested<'t, 'i>(v: Value<'t, 'i>, shape: &Shape, at: At<'i>, ctx: &mut Ctx<'i>) {
    at.enter(ctx);
    match shape {
        Shape::Object(obj) => walk_object(v, obj, ctx),
        Shape::Array {
            items,
            min_items,
            min_items_rule,
            unique,
        } => walk_array(v, items, *min_items, *min_items_rule, *unique, ctx),
        Shape::Custom(f) => f(v, ctx),
        // Not reached (`walk_at` checks scalars itself), and right if it were.
        _ => scalar(v, shape, At::Here, ctx),
    }
    at.leave(ctx);
}

/// The shapes that hold no other value. The messages of their violations are built
/// out of line, so the passing path stays a few compares.
#[inline(always)]
fn scalar<'t, 'i>(v: Value<'t, 'i>, shape: &Shape, at: At<'i>, ctx: &mut Ctx<'i>) {
    match shape {
        Shape::Str {
            min_len,
            min_len_rule,
            pattern,
        } => {
            let Some(s) = v.as_str() else {
                return type_error(v, "a string", at, ctx);
            };
            // A string of at least 4 bytes per required character is long enough
            // without counting its characters.
            if *min_len > 0 && s.len() < 4 * *min_len && s.chars().count() < *min_len {
                too_short(v, *min_len, *min_len_rule, at, ctx);
            } else if let Some(p) = pattern {
                if let Err(why) = (p.test)(s) {
                    mismatch(v, p.rule, why, at, ctx);
                }
            }
        }
        Shape::Int { min, max, lexical } => {
            let n = if *lexical {
                v.as_lexical_int()
            } else {
                v.as_schema_int()
            };
            let Some(n) = n else {
                return type_error(v, "an integer", at, ctx);
            };
            if min.is_some_and(|min| n < min as i128) || max.is_some_and(|max| n > max as i128) {
                int_out_of_range(n, *min, *max, at, ctx);
            }
        }
        Shape::Number { min, max } => {
            let Some(n) = v.as_f64() else {
                return type_error(v, "a number", at, ctx);
            };
            if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                number_out_of_range(v, n, *min, *max, at, ctx);
            }
        }
        Shape::Bool => {
            if v.as_bool().is_none() {
                type_error(v, "a boolean", at, ctx);
            }
        }
        Shape::Enum { values, nullable } => {
            let ok = match v.ty() {
                Type::Str(s) => values.iter().any(|value| crate::text::same(value, s)),
                Type::Null => *nullable,
                _ => false,
            };
            if !ok {
                not_one_of(v, values, *nullable, at, ctx);
            }
        }
        Shape::ConstInt(c) => {
            if v.as_schema_int() != Some(*c as i128) {
                not_const(v, &c.to_string(), at, ctx);
            }
        }
        Shape::ConstTrue => {
            if v.as_bool() != Some(true) {
                not_const(v, "true", at, ctx);
            }
        }
        Shape::Any
        | Shape::Nullable(_)
        | Shape::Array { .. }
        | Shape::Object(_)
        | Shape::Custom(_) => {}
    }
}

#[cold]
fn too_short<'i>(v: Value<'_, 'i>, min_len: usize, rule: Rule, at: At<'i>, ctx: &mut Ctx<'i>) {
    let msg = if min_len == 1 {
        "must not be empty".to_string()
    } else {
        format!("{} is shorter than {min_len} characters", v.describe())
    };
    ctx.report(rule, at, || msg);
}

#[cold]
fn mismatch<'i>(v: Value<'_, 'i>, rule: Rule, why: String, at: At<'i>, ctx: &mut Ctx<'i>) {
    ctx.report(rule, at, || format!("{} {why}", v.describe()));
}

/// `minimum` and `maximum` of an integer, each reported when it fails.
#[cold]
fn int_out_of_range<'i>(
    n: i128,
    min: Option<i64>,
    max: Option<i64>,
    at: At<'i>,
    ctx: &mut Ctx<'i>,
) {
    if let Some(min) = min {
        if n < min as i128 {
            ctx.report(Rule::SchemaMinimum, at, || {
                format!("{n} is below the minimum of {min}")
            });
        }
    }
    if let Some(max) = max {
        if n > max as i128 {
            ctx.report(Rule::SchemaMaximum, at, || {
                format!("{n} is above the maximum of {max}")
            });
        }
    }
}

/// `minimum` and `maximum` of a number, each reported when it fails.
#[cold]
fn number_out_of_range<'i>(
    v: Value<'_, 'i>,
    n: f64,
    min: Option<f64>,
    max: Option<f64>,
    at: At<'i>,
    ctx: &mut Ctx<'i>,
) {
    if min.is_some_and(|m| n < m) {
        ctx.report(Rule::SchemaMinimum, at, || {
            format!(
                "{} is below the minimum of {}",
                v.describe(),
                min.unwrap_or_default()
            )
        });
    }
    if max.is_some_and(|m| n > m) {
        ctx.report(Rule::SchemaMaximum, at, || {
            format!(
                "{} is above the maximum of {}",
                v.describe(),
                max.unwrap_or_default()
            )
        });
    }
}

#[cold]
fn not_one_of<'i>(
    v: Value<'_, 'i>,
    values: &[&str],
    nullable: bool,
    at: At<'i>,
    ctx: &mut Ctx<'i>,
) {
    let mut accepted: Vec<String> = values.iter().map(|s| crate::node::quote(s)).collect();
    if nullable {
        accepted.insert(0, "null".into());
    }
    ctx.report(Rule::SchemaEnum, at, || {
        format!("{} is not one of {}", v.describe(), accepted.join(", "))
    });
}

#[cold]
fn not_const<'i>(v: Value<'_, 'i>, expected: &str, at: At<'i>, ctx: &mut Ctx<'i>) {
    ctx.report(Rule::SchemaConst, at, || {
        format!("must be {expected}, got {}", v.describe())
    });
}

fn walk_array<'t, 'i>(
    v: Value<'t, 'i>,
    items: &Shape,
    min_items: usize,
    min_items_rule: Rule,
    unique: bool,
    ctx: &mut Ctx<'i>,
) {
    let Type::Array(len) = v.ty() else {
        return type_error(v, "an array", At::Here, ctx);
    };
    if len < min_items {
        ctx.report(min_items_rule, Here, || {
            format!(
                "needs at least {min_items} item{}, got {len}",
                if min_items == 1 { "" } else { "s" }
            )
        });
    }
    for (i, item) in v.items().enumerate() {
        walk_at(item, items, At::Index(i), ctx);
    }
    if unique {
        // Each item against those before it, the first repeat reported.
        'outer: for (i, a) in v.items().enumerate() {
            for b in v.items().take(i) {
                if a.deep_eq(&b) {
                    ctx.report(Rule::SchemaUniqueItems, Here, || {
                        format!(
                            "{} appears more than once; items must be unique",
                            a.describe()
                        )
                    });
                    break 'outer;
                }
            }
        }
    }
}

impl ObjectShape {
    /// The index of the field named `key`. Documents mostly list fields in the table's
    /// order, leaving optional ones out: the search starts at `from`, the field after
    /// the last one found, and wraps around. (A table names each field once.)
    #[inline]
    fn field(&self, key: &str, from: usize) -> Option<usize> {
        let fields = self.fields;
        // The expected field first: a hit costs one compare, no search set up.
        if fields
            .get(from)
            .is_some_and(|f| crate::text::same(f.name, key))
        {
            return Some(from);
        }
        let named = |f: &Field| crate::text::same(f.name, key);
        // `from` is never past the end; `min` spares `split_at` its panic path.
        let (before, after) = fields.split_at(from.min(fields.len()));
        match after.iter().position(named) {
            Some(i) => Some(from + i),
            None => before.iter().position(named),
        }
    }

    /// Whether any entry could be reported or walked: not for a free map
    /// (`hyperparams`), whose entries are then not even visited.
    #[inline]
    fn checks_entries(&self) -> bool {
        !(self.fields.is_empty()
            && self.keys.is_none()
            && matches!(self.additional, Additional::Allow))
    }
}

fn walk_object<'t, 'i>(v: Value<'t, 'i>, obj: &ObjectShape, ctx: &mut Ctx<'i>) {
    if !v.is_object() {
        return type_error(v, "an object", At::Here, ctx);
    }
    if !obj.checks_entries() {
        return;
    }
    let mut seen: u64 = 0;
    let mut next = 0;
    for (key, value) in v.entries() {
        if let Some(p) = obj.keys {
            if let Err(why) = (p.test)(key) {
                ctx.report(p.rule, Child(key), || {
                    format!("the key {} {why}", crate::node::quote(key))
                });
            }
        }
        match obj.field(key, next) {
            Some(i) => {
                next = i + 1;
                seen |= 1 << i;
                walk_at(value, &obj.fields[i].shape, At::Key(key), ctx);
            }
            None => match obj.additional {
                Additional::Forbid | Additional::Warn => unknown_field(key, obj, ctx),
                Additional::Allow => {}
                Additional::Values(shape) => walk_at(value, shape, At::Key(key), ctx),
            },
        }
    }
    if seen & obj.required != obj.required {
        missing_fields(obj, seen, ctx);
    }
}

/// Each required field not `seen`, in the table's order.
#[cold]
fn missing_fields<'i>(obj: &ObjectShape, seen: u64, ctx: &mut Ctx<'i>) {
    for (i, f) in obj.fields.iter().enumerate() {
        if obj.required & !seen & (1 << i) != 0 {
            ctx.report(f.missing_rule, Child(f.name), || {
                format!(
                    "the required field {} is missing",
                    crate::node::quote(f.name)
                )
            });
        }
    }
}

#[cold]
fn unknown_field<'i>(key: &str, obj: &ObjectShape, ctx: &mut Ctx<'i>) {
    let rule = Rule::SchemaAdditionalProperties;
    let severity = match obj.additional {
        Additional::Warn => Severity::Warning,
        _ => rule.severity(),
    };
    let what = if severity == Severity::Warning {
        "is not a known field and is ignored"
    } else {
        "is not allowed here"
    };
    ctx.report(rule.with_severity(severity), Child(key), || {
        let known: Vec<&str> = obj.fields.iter().map(|f| f.name).collect();
        format!(
            "the field {} {what}; known fields: {}",
            crate::node::quote(key),
            known.join(", ")
        )
    });
}

#[cold]
fn type_error<'i>(v: Value<'_, 'i>, expected: &str, at: At<'i>, ctx: &mut Ctx<'i>) {
    ctx.report(Rule::SchemaType, at, || {
        format!(
            "expected {expected}, got {} ({})",
            v.type_name(),
            v.describe()
        )
    });
}

pub static SAFE_SEGMENT: Pattern = Pattern::new(Rule::SchemaPattern, safe_segment);
