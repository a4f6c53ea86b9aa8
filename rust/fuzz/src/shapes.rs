//! Documents generated from the shapes of each kind, so that the fuzzer reaches the
//! rules and not only the parser: a valid JobSpec, spec-bundle, job-record or best_rec
//! (`shapes/`), then edits that set, remove, add or rename fields with values drawn
//! from what the rules look at (counts at their caps, spec keys, paths, images,
//! credentials, statuses). Each document is written both as JSON and as YAML that means
//! the same value, so a target can hold the two readings to the same report.

use arbitrary::Arbitrary;
use serde_json::{Map, Value};

pub const BASES: [(&str, &str); 5] = [
    ("jobspec", include_str!("../shapes/jobspec.valid.json")),
    (
        "spec_bundle",
        include_str!("../shapes/spec_bundle.config_mode.with_execution_lifecycle.valid.json"),
    ),
    (
        "spec_bundle",
        include_str!("../shapes/spec_bundle.args_mode.data_services_gap_analysis.valid.json"),
    ),
    (
        "job_record",
        include_str!("../shapes/job_record.terminal_error_retry_chain.valid.json"),
    ),
    ("best_rec", include_str!("../shapes/best_rec.valid.json")),
];

/// Field names the rules of some kind read, and words their values are matched against.
const WORDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "name",
    "project",
    "labels",
    "resources",
    "pools",
    "nodes",
    "gpus_per_node",
    "gpu",
    "recipe",
    "version",
    "digest",
    "framework",
    "image",
    "model",
    "init_from",
    "data",
    "train",
    "validation",
    "dataset",
    "corpus",
    "evaluation",
    "limit",
    "suites",
    "lifecycle",
    "on_success",
    "observability_url",
    "git_dirty",
    "base",
    "mode",
    "command",
    "args",
    "config_format",
    "network_arch",
    "action",
    "declared_inputs",
    "declared_outputs",
    "spec_key",
    "gpu_spec_key",
    "optional",
    "uri",
    "type",
    "compute_shape",
    "gpus",
    "execution",
    "environment",
    "supporting_files",
    "source",
    "destination",
    "sha256",
    "pre_commands",
    "post_commands",
    "distributed",
    "processes_per_node",
    "tasks_per_node",
    "upload_excludes",
    "results_dir",
    "transitions",
    "state",
    "terminal_state",
    "at",
    "id",
    "platform",
    "storage_tier",
    "experiment_id",
    "best",
    "specs",
    "checkpoint_epoch",
    "checkpoint_step",
    "schema_version",
    "config",
    "yaml",
    "json",
    "folder",
    "file",
    "PENDING",
    "RUNNING",
    "COMPLETE",
    "ERROR",
    "CANCELED",
    "PAUSED",
    "forge/v2",
    "TrainingJob",
    "{config_path}",
    "{job_id}",
    "--password",
    "hunter2",
    "--token",
    "$TOKEN",
    "hf_ABCDEFGHIJKLMNOPQRSTUV12",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "AKIAABCDEFGHIJKLMNOP",
    "https://user:pass@host/x",
    "Authorization: Bearer abc.def",
    "API_KEY=sk-live12345",
    "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
    "nvcr.io/x",
    "a/b",
    "scripts/helper.py",
    "../x",
    "/abs/x",
    "a/",
    "a/.",
    ".",
    "a\\b",
    "run/abc/checkpoint@step=5",
    "run//x",
    "owner/name",
    "owner/",
    "dataset.train_data_sources[0].image_dir",
    "dataset.val_data_sources[0].json_file",
    "train.num_gpus",
    "a.b[5]",
    "a..b",
    "a[x]",
    "[0]",
    "a.b",
    "x.y",
    "",
    " ",
    "\u{2028}",
    "\u{85}",
    "é",
    "Ｓ",
    "<<",
    "yes",
    "010",
    "1:20",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
];

const INTS: &[i128] = &[
    0,
    1,
    -1,
    2,
    8,
    64,
    2_147_483_647,
    2_147_483_648,
    -2_147_483_648,
    4_294_967_296,
    9_007_199_254_740_993,
    9_223_372_036_854_775_807,
    18_446_744_073_709_551_615,
    18_446_744_073_709_551_621,
];

#[derive(Arbitrary, Debug)]
pub struct Shaped {
    pub base: u8,
    pub edits: Vec<Edit>,
}

#[derive(Arbitrary, Debug)]
pub enum Edit {
    /// The value at one of the document's places (by index) replaced.
    Set(u16, Gen),
    Remove(u16),
    /// A member added to one of the document's objects.
    Insert(u16, Word, Gen),
    /// An item added to one of the document's arrays.
    Push(u16, Gen),
    /// A copy of one place's value put at another.
    Copy(u16, u16),
}

#[derive(Arbitrary, Debug)]
pub enum Word {
    Known(u8),
    Text(String),
    /// A key with a dot in it (`tao.dotted_key`).
    Dotted(u8, u8),
}

#[derive(Arbitrary, Debug)]
pub enum Gen {
    Null,
    Bool(bool),
    Int(u8),
    AnyInt(i64),
    Float(f64),
    Word(Word),
    Array(Vec<Gen>),
    Object(Vec<(Word, Gen)>),
}

impl Word {
    fn text(&self) -> String {
        match self {
            Word::Known(i) => WORDS[usize::from(*i) % WORDS.len()].to_string(),
            // Short enough to be a YAML simple key (at most 1024 characters) even with
            // every character escaped (`\U0001f600`, ten).
            Word::Text(t) => t.chars().take(100).collect(),
            Word::Dotted(a, b) => format!(
                "{}.{}",
                WORDS[usize::from(*a) % WORDS.len()],
                WORDS[usize::from(*b) % WORDS.len()]
            ),
        }
    }
}

impl Gen {
    fn value(&self, depth: usize) -> Value {
        match self {
            Gen::Null => Value::Null,
            Gen::Bool(b) => Value::Bool(*b),
            Gen::Int(i) => number(INTS[usize::from(*i) % INTS.len()]),
            Gen::AnyInt(i) => Value::from(*i),
            Gen::Float(f) if f.is_finite() => Value::from(*f),
            Gen::Float(_) => Value::from(0.5),
            Gen::Word(w) => Value::String(w.text()),
            Gen::Array(items) if depth < 6 => {
                Value::Array(items.iter().take(8).map(|g| g.value(depth + 1)).collect())
            }
            Gen::Object(members) if depth < 6 => Value::Object(
                members
                    .iter()
                    .take(8)
                    .map(|(k, g)| (k.text(), g.value(depth + 1)))
                    .collect(),
            ),
            _ => Value::Null,
        }
    }
}

fn number(i: i128) -> Value {
    if let Ok(i) = i64::try_from(i) {
        Value::from(i)
    } else if let Ok(u) = u64::try_from(i) {
        Value::from(u)
    } else {
        Value::from(i as f64)
    }
}

/// Every place of `v` as a JSON Pointer, the root first.
fn places(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                places(
                    child,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                places(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn split(pointer: &str) -> Option<(&str, String)> {
    let (parent, last) = pointer.rsplit_once('/')?;
    Some((parent, last.replace("~1", "/").replace("~0", "~")))
}

impl Shaped {
    /// The kind of the base document and the edited document.
    pub fn document(&self) -> (&'static str, Value) {
        let (kind, text) = BASES[usize::from(self.base) % BASES.len()];
        let mut doc: Value = serde_json::from_str(text).expect("a base document is JSON");
        for edit in self.edits.iter().take(16) {
            let mut all = Vec::new();
            places(&doc, String::new(), &mut all);
            let pick = |i: &u16| all[usize::from(*i) % all.len()].clone();
            match edit {
                Edit::Set(i, g) => {
                    if let Some(v) = doc.pointer_mut(&pick(i)) {
                        *v = g.value(0);
                    }
                }
                Edit::Remove(i) => {
                    if let Some((parent, key)) = split(&pick(i)) {
                        match doc.pointer_mut(parent) {
                            Some(Value::Object(m)) => {
                                m.remove(&key);
                            }
                            Some(Value::Array(a)) => {
                                if let Ok(i) = key.parse::<usize>() {
                                    if i < a.len() {
                                        a.remove(i);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Edit::Insert(i, w, g) => {
                    if let Some(Value::Object(m)) = doc.pointer_mut(&pick(i)) {
                        m.insert(w.text(), g.value(0));
                    }
                }
                Edit::Push(i, g) => {
                    if let Some(Value::Array(a)) = doc.pointer_mut(&pick(i)) {
                        a.push(g.value(0));
                    }
                }
                Edit::Copy(from, to) => {
                    let v = doc.pointer(&pick(from)).cloned();
                    if let (Some(v), Some(slot)) = (v, doc.pointer_mut(&pick(to))) {
                        if v.to_string().len() < 4096 {
                            *slot = v;
                        }
                    }
                }
            }
        }
        if !doc.is_object() {
            doc = Value::Object(Map::new());
        }
        (kind, doc)
    }
}

/// A number as both JSON and YAML (and PyYAML) read it alike: integers as they are,
/// floats with a `.` and a signed exponent (`1.5e+300`, not `1.5e300`, which YAML 1.1
/// reads as a string).
fn number_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().expect("a finite float");
    let s = format!("{f:?}");
    match s.split_once('e') {
        None => s,
        Some((mantissa, exp)) => {
            let mantissa = if mantissa.contains('.') {
                mantissa.to_string()
            } else {
                format!("{mantissa}.0")
            };
            let exp = if exp.starts_with('-') {
                exp.to_string()
            } else {
                format!("+{exp}")
            };
            format!("{mantissa}e{exp}")
        }
    }
}

/// A string as a YAML double-quoted scalar: every character YAML readers would refuse
/// or read as a line break raw is escaped.
fn quoted(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..
                if !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') =>
            {
                out.push(c)
            }
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
}

/// JSON text of `v`, with numbers written as `number_text` writes them.
pub fn to_json(v: &Value) -> String {
    let mut out = String::new();
    json_into(v, &mut out);
    out
}

fn json_into(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_into(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("a string"));
                out.push(':');
                json_into(item, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// YAML text of `v` in block style (flow only for empty collections), meaning the
/// same value to a YAML 1.2 reader and to PyYAML.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    yaml_into(v, 0, &mut out);
    out.push('\n');
    out
}

fn yaml_scalar(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::String(s) => quoted(s, out),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

fn yaml_into(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 || indent > 0 {
                    out.push('\n');
                    out.push_str(&pad);
                }
                quoted(k, out);
                out.push(':');
                nested(item, indent + 2, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, item) in a.iter().enumerate() {
                if i > 0 || indent > 0 {
                    out.push('\n');
                    out.push_str(&pad);
                }
                out.push('-');
                nested(item, indent + 2, out);
            }
        }
        other => yaml_scalar(other, out),
    }
}

fn nested(item: &Value, indent: usize, out: &mut String) {
    match item {
        Value::Object(m) if !m.is_empty() => yaml_into(item, indent, out),
        Value::Array(a) if !a.is_empty() => yaml_into(item, indent, out),
        other => {
            out.push(' ');
            yaml_scalar(other, out);
        }
    }
}
