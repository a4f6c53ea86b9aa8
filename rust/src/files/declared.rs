//! What a spec-bundle declares of its supporting files, read from the document, and
//! the comparisons every source of files (a producer root, a package) makes against
//! it: digests and the import closure of Python helpers.
//!
//! Of `files` it imports only `imports`, so the root, package and staging readers
//! can all build on it.

use std::collections::HashSet;

use super::imports::Imports;
use crate::node::Value;
use crate::paths::{normalize, supporting_path};
use crate::report::Violation;
use crate::rules::Rule;
use crate::text::is_lowercase_sha256;

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
            let ok = is_lowercase_sha256(sha256)
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

/// The comparison every source makes once its bytes are hashed.
pub(crate) fn compare(d: &Declared, found: &Found, out: &mut Vec<Violation>) {
    if found.sha256 != d.sha256 {
        out.push(Violation::new(
            Rule::TaoSupportingFileSha256Mismatch,
            d.field("sha256"),
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
    imports: &Imports,
    declared: &HashSet<String>,
    present: impl Fn(&str) -> bool,
    where_: &str,
    out: &mut Vec<Violation>,
) {
    if let Some(encoding) = &imports.encoding {
        out.push(Violation::new(
            Rule::TaoSupportingFileUndeclaredImport,
            d.field("source"),
            format!("{} declares the source encoding {encoding}, which Python decodes differently from the bytes read here, so its imports cannot be proven declared; save it as UTF-8", d.source),
        ));
    }
    let dir = d.source.rfind('/').map_or("", |p| &d.source[..=p]);
    for module in &imports.modules {
        for rel in [
            format!("{dir}{module}.py"),
            format!("{dir}{module}/__init__.py"),
        ] {
            let rel = normalize(&rel);
            if !declared.contains(&rel) && present(&rel) {
                out.push(Violation::new(
                    Rule::TaoSupportingFileUndeclaredImport,
                    d.field("source"),
                    format!("{} imports {}, and {rel} {where_} but is not declared; declare it so the staged set is import-closed", d.source, module.replace('/', ".")),
                ));
            }
        }
    }
}
