//! What the fuzz targets share: the Python consumers run in-process (`python`), the
//! archives built member by member (`archive`), structure-aware documents (`shapes`),
//! and jobgate's readings put in a form the references can be compared with.
//!
//! A target asserts what must hold with `assert!`/`panic!`: libFuzzer reports any panic
//! as a crash and keeps the input that caused it, so a differential mismatch is a
//! finding like any other.

pub mod archive;
pub mod python;
pub mod shapes;

use std::fs::File;
use std::io::{Seek, Write};

use jobgate_core::limits::Limits;
use jobgate_core::node::{Type, Value};
use jobgate_core::report::Report;

/// A JSON value as its consumer (Python's `json`) reads it: numbers keep the kind they
/// are written as (`1` an integer, `1.0` and `1e2` floats), floats compare by value
/// (Python's `-0.0 == 0.0`), objects keep every key in order, duplicates included.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// What jobgate's rules read: the tape under `value`.
    pub fn of_tape(value: Value<'_, '_>) -> Json {
        match value.ty() {
            Type::Null => Json::Null,
            Type::Bool(b) => Json::Bool(b),
            Type::Int(i) => Json::Int(i.into()),
            Type::UInt(u) => Json::Int(u.into()),
            Type::Float(f) => Json::Float(f),
            Type::Str(s) => Json::Str(s.to_string()),
            Type::Array(_) => Json::Array(value.items().map(Json::of_tape).collect()),
            Type::Object(_) => Json::Object(
                value
                    .entries()
                    .map(|(k, v)| (k.to_string(), Json::of_tape(v)))
                    .collect(),
            ),
        }
    }

    /// serde_json's reading (its objects keep the last of repeated keys, sorted).
    pub fn of_serde(value: &serde_json::Value) -> Json {
        match value {
            serde_json::Value::Null => Json::Null,
            serde_json::Value::Bool(b) => Json::Bool(*b),
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Json::Int(i.into()),
                (_, Some(u), _) => Json::Int(u.into()),
                (_, _, Some(f)) => Json::Float(f),
                _ => unreachable!("a serde_json number is i64, u64 or f64"),
            },
            serde_json::Value::String(s) => Json::Str(s.clone()),
            serde_json::Value::Array(a) => Json::Array(a.iter().map(Json::of_serde).collect()),
            serde_json::Value::Object(o) => Json::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), Json::of_serde(v)))
                    .collect(),
            ),
        }
    }

    /// The same value with every object's keys sorted and, of repeated keys, the last
    /// kept: what a reader that builds maps (serde_json, Python's `dict`) sees.
    pub fn as_maps(&self) -> Json {
        match self {
            Json::Array(a) => Json::Array(a.iter().map(Json::as_maps).collect()),
            Json::Object(o) => {
                let mut map = std::collections::BTreeMap::new();
                for (k, v) in o {
                    map.insert(k.clone(), v.as_maps());
                }
                Json::Object(map.into_iter().collect())
            }
            other => other.clone(),
        }
    }

    /// Whether `self` (jobgate's reading) is `serde`'s (serde_json's reading of the same
    /// text): equal, except that serde_json reads the integer `-0` as the float -0.0,
    /// where Python's `json` (the consumer) and jobgate read the integer 0.
    pub fn same_as_serde(&self, serde: &Json) -> bool {
        match (self, serde) {
            (Json::Int(0), Json::Float(f)) => *f == 0.0 && f.is_sign_negative(),
            (Json::Array(a), Json::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as_serde(y))
            }
            (Json::Object(a), Json::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((k, x), (l, y))| k == l && x.same_as_serde(y))
            }
            (a, b) => a == b,
        }
    }

    /// Whether some object repeats a key.
    pub fn repeats_a_key(&self) -> bool {
        match self {
            Json::Array(a) => a.iter().any(Json::repeats_a_key),
            Json::Object(o) => {
                let mut seen = std::collections::HashSet::new();
                o.iter().any(|(k, _)| !seen.insert(k.as_str()))
                    || o.iter().any(|(_, v)| v.repeats_a_key())
            }
            _ => false,
        }
    }

    /// Nesting depth: a scalar is 0, `{}` and `[]` are 1.
    pub fn depth(&self) -> usize {
        match self {
            Json::Array(a) => 1 + a.iter().map(Json::depth).max().unwrap_or(0),
            Json::Object(o) => 1 + o.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }
}

/// The limits the targets read documents with: the defaults a deployment runs with.
pub fn limits() -> Limits {
    Limits::default()
}

/// An anonymous in-memory regular file holding `data`, for the readers that take a
/// file (packages): no disk, nothing left behind.
pub fn memfile(data: &[u8]) -> File {
    let fd =
        rustix::fs::memfd_create("package", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd_create");
    let mut file = File::from(fd);
    file.write_all(data).expect("write to memfd");
    file.rewind().expect("rewind memfd");
    file
}

/// Hex SHA-256, as jobgate reports a member's digest.
pub fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// jobgate's package reader against the consumers on the same bytes: when jobgate would
/// pass the package (it reads, no member is refused, every member is a regular file or
/// a directory), `tarfile` or `zipfile` reads it too and holds exactly the same regular
/// files with the same bytes, nothing else (no link, no device, no second copy), and no
/// reader of the other format opens it. Also runs the whole check of the package's own
/// bundle, for the rules that read packages (`compare_members`, imports).
pub fn package_differential(data: &[u8]) {
    use jobgate_core::files::archive::MemberKind;
    use jobgate_core::files::package;
    use jobgate_core::limits::PackageLimits;
    use std::collections::BTreeMap;
    use std::os::fd::AsRawFd;

    let file = memfile(data);
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let limits = PackageLimits::default();
    let read = package::read_file(&path, file.try_clone().expect("dup"), &limits, None);

    // The whole check, as `jobgate check --package` runs it (its own bundle document).
    let validator = jobgate_core::Validator::default();
    let checked = validator.check_files(
        None,
        None,
        &jobgate_core::AdmissionContext::default(),
        jobgate_core::files::staging::FileSource::Package(&path),
        None,
    );

    let Ok(contents) = read else {
        if let Ok(v) = &checked {
            assert!(
                !v.judgement.report.ok(),
                "the package reader refuses the package; its check passes"
            );
        }
        return;
    };
    let clean = contents.violations.is_empty()
        && contents
            .members
            .iter()
            .all(|m| m.kind == MemberKind::Regular);
    if !clean {
        return;
    }
    let mut mine: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some((name, bytes)) = &contents.bundle {
        mine.insert(name.clone(), vec![sha256(bytes)]);
    }
    for m in &contents.members {
        let found = m.found.as_ref().expect("a regular member is hashed");
        mine.insert(m.name.clone(), vec![found.sha256.clone()]);
    }
    let theirs = match python::ask("archive", data, &[]) {
        Ok(t) => t,
        Err(e) => panic!("jobgate reads the package as {mine:?}; the consumer refuses it: {e}"),
    };
    let theirs: serde_json::Value = serde_json::from_str(&theirs).expect("JSON");
    let files: BTreeMap<String, Vec<String>> =
        serde_json::from_value(theirs["files"].clone()).expect("files");
    assert_eq!(
        mine, files,
        "jobgate and the consumer read other files (consumer: {theirs})"
    );
    assert!(
        theirs["other"].as_object().is_some_and(|o| o.is_empty()),
        "the consumer finds members jobgate does not: {}",
        theirs["other"]
    );
    assert_eq!(
        theirs["opens_as_other"], false,
        "a reader of the other format opens the package too"
    );
}

/// What two reports of the same document must share: kind, and each violation's rule,
/// field, severity and message (not its source location).
#[allow(clippy::type_complexity)]
pub fn summary(r: &Report) -> (Option<&'static str>, Vec<(String, String, String, String)>) {
    (
        r.kind.map(|k| k.as_str()),
        r.violations
            .iter()
            .map(|v| {
                (
                    v.rule.id().to_string(),
                    v.field.clone(),
                    format!("{:?}", v.severity),
                    v.message.clone(),
                )
            })
            .collect(),
    )
}
