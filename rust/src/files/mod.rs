//! Supporting files: the closed set a spec-bundle declares in
//! `execution.supporting_files`, verified against a producer root directory or a
//! package archive, and staged atomically next to a job.
//!
//! Owns file access and hashing; must not judge the bundle document itself (the
//! `kinds::spec_bundle` rules do). Every path is resolved without leaving its root.

pub mod cache;
pub mod hashing;
pub mod imports;
pub mod package;
pub mod package_cache;
pub mod root;
pub mod staging;
pub mod streams;
pub mod tar_format;
pub mod zip_format;

use crate::kinds::spec_bundle::supporting_path;
use crate::node::Value;
use crate::report::{Severity, Violation};

/// One well-formed entry of `execution.supporting_files`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    pub index: usize,
    pub source: String,
    pub destination: String,
    pub sha256: String,
}

impl Declared {
    pub fn field(&self, key: &str) -> String {
        format!("/execution/supporting_files/{}/{key}", self.index)
    }
}

/// The entries whose source, destination and digest are well-formed; the others are
/// already reported by the document rules (`schema.pattern`, `tao.supporting_file.path`)
/// and are not touched on disk.
pub fn declared(bundle: Value<'_, '_>) -> Vec<Declared> {
    let Some(files) = bundle.at(&["execution", "supporting_files"]) else {
        return Vec::new();
    };
    files
        .items()
        .enumerate()
        .filter_map(|(index, f)| {
            let source = f.get_str("source")?;
            let destination = f.get_str("destination")?;
            let sha256 = f.get_str("sha256")?;
            let lowercase_hex = sha256.len() == 64
                && sha256
                    .bytes()
                    .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
            let ok = lowercase_hex
                && !source.is_empty()
                && !destination.is_empty()
                && supporting_path(source).is_ok()
                && supporting_path(destination).is_ok();
            ok.then(|| Declared {
                index,
                source: source.into(),
                destination: destination.into(),
                sha256: sha256.into(),
            })
        })
        .collect()
}

/// What was found for one declared file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub sha256: String,
    pub size: u64,
}

pub(crate) fn violation(field: String, rule: &'static str, message: String) -> Violation {
    Violation {
        rule,
        field,
        message,
        severity: Severity::Error,
    }
}

/// The comparison every source makes once its bytes are hashed.
pub(crate) fn compare(d: &Declared, found: &Found, out: &mut Vec<Violation>) {
    if found.sha256 != d.sha256 {
        out.push(violation(
            d.field("sha256"),
            "tao.supporting_file.sha256_mismatch",
            format!(
                "{} hashes to {} but the bundle declares {}; re-declare it or restore the file",
                d.source, found.sha256, d.sha256
            ),
        ));
    }
}

/// The import-closure check shared by roots and packages: every module a declared
/// Python helper imports that is `present` beside it (as `<m>.py` or
/// `<m>/__init__.py`) must itself be declared; `where_` says where it was found.
pub(crate) fn undeclared_imports(
    d: &Declared,
    imports: &imports::Imports,
    declared: &std::collections::HashSet<String>,
    present: impl Fn(&str) -> bool,
    where_: &str,
    out: &mut Vec<Violation>,
) {
    if let Some(encoding) = &imports.encoding {
        out.push(violation(
            d.field("source"),
            "tao.supporting_file.undeclared_import",
            format!("{} declares the source encoding {encoding}, which Python decodes differently from the bytes read here, so its imports cannot be proven declared; save it as UTF-8", d.source),
        ));
    }
    let dir = d.source.rfind('/').map_or("", |p| &d.source[..=p]);
    for module in &imports.modules {
        for rel in [
            format!("{dir}{module}.py"),
            format!("{dir}{module}/__init__.py"),
        ] {
            let rel = root::normalize(&rel);
            if !declared.contains(&rel) && present(&rel) {
                out.push(violation(
                    d.field("source"),
                    "tao.supporting_file.undeclared_import",
                    format!("{} imports {}, and {rel} {where_} but is not declared; declare it so the staged set is import-closed", d.source, module.replace('/', ".")),
                ));
            }
        }
    }
}
