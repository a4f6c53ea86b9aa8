//! Verification against a package: a tar, tar.gz, tar.zst or zip archive holding the
//! bundle document (`bundle.json` or `bundle.yaml`) at its root and the sources under it.
//!
//! Members are hashed while they stream; nothing is extracted to disk. Sizes are
//! bounded before anything is inflated where the format says them up front (zip's
//! central directory, tar headers), and counted as they inflate otherwise. Members
//! with absolute paths, `..`, links, devices or repeated names are never followed.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

use super::hashing::sha256_reader;
use super::imports::sibling_imports;
use super::root::normalize;
use super::{compare, violation, Declared, Found};
use crate::kinds::spec_bundle::supporting_path;
use crate::report::{Severity, Violation};

pub const BUNDLE_NAMES: [&str; 3] = ["bundle.json", "bundle.yaml", "bundle.yml"];
const MAX_SCANNED_HELPER: u64 = 4 << 20;

#[derive(Clone, Copy, Debug)]
pub struct PackageLimits {
    /// The most bytes all members may hold together, inflated.
    pub max_bytes: u64,
    pub max_members: usize,
}

impl Default for PackageLimits {
    fn default() -> Self {
        PackageLimits {
            max_bytes: 1 << 30,
            max_members: 100_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberKind {
    Regular,
    Link,
    Device,
    Other,
}

#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub kind: MemberKind,
    pub found: Option<Found>,
    /// The text of small Python helpers, for the import-closure check.
    pub text: Option<String>,
}

/// What a package holds: its bundle document (if any) and every other member.
#[derive(Debug, Default)]
pub struct Contents {
    pub bundle: Option<(String, Vec<u8>)>,
    pub members: Vec<Member>,
    /// Members refused while reading (bad names, repeats), already as violations.
    pub violations: Vec<Violation>,
}

/// Why a package could not be read at all.
#[derive(Debug)]
pub enum PackageError {
    /// Too large or too many members: refused before being inflated further.
    Size(String),
    Unreadable(String),
}

impl PackageError {
    pub fn into_violation(self) -> Violation {
        match self {
            PackageError::Size(m) => Violation {
                rule: "limits.size",
                field: String::new(),
                message: m,
                severity: Severity::Error,
            },
            PackageError::Unreadable(m) => Violation {
                rule: "json.syntax",
                field: String::new(),
                message: m,
                severity: Severity::Error,
            },
        }
    }
}

fn unreadable(path: &Path, e: impl std::fmt::Display) -> PackageError {
    PackageError::Unreadable(format!(
        "the package {} cannot be read: {e}",
        path.display()
    ))
}

/// Called for every member but directories: its raw name, kind, declared size and content.
pub type Visitor<'v> =
    dyn FnMut(&str, MemberKind, u64, &mut dyn Read) -> Result<(), PackageError> + 'v;

/// Streams every member of the archive at `path` through `visit`, once, in order.
pub fn visit(
    path: &Path,
    limits: &PackageLimits,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let mut file = File::open(path).map_err(|e| unreadable(path, e))?;
    let mut magic = [0u8; 262];
    let n = read_up_to(&mut file, &mut magic).map_err(|e| unreadable(path, e))?;
    file.rewind().map_err(|e| unreadable(path, e))?;
    let magic = &magic[..n];
    if magic.starts_with(b"PK\x03\x04") || magic.starts_with(b"PK\x05\x06") {
        return visit_zip(path, file, limits, visit);
    }
    let reader = BufReader::with_capacity(1 << 20, file);
    if magic.starts_with(&[0x1f, 0x8b]) {
        visit_tar(path, flate2::read::GzDecoder::new(reader), visit)
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let decoder =
            zstd::stream::read::Decoder::with_buffer(reader).map_err(|e| unreadable(path, e))?;
        visit_tar(path, decoder, visit)
    } else if magic.len() >= 262 && &magic[257..262] == b"ustar" {
        visit_tar(path, reader, visit)
    } else {
        Err(PackageError::Unreadable(format!(
            "{} is not a tar, tar.gz, tar.zst or zip archive",
            path.display()
        )))
    }
}

pub fn read(path: &Path, limits: &PackageLimits) -> Result<Contents, PackageError> {
    let mut c = Collector {
        contents: Contents::default(),
        seen: HashMap::new(),
        total: 0,
        limits,
    };
    visit(path, limits, &mut |raw, kind, size, reader| {
        let Some(name) = c.admit(raw, size)? else {
            return Ok(());
        };
        match kind {
            MemberKind::Regular => c.regular(name, reader, size),
            kind => {
                c.contents.members.push(Member {
                    name,
                    kind,
                    found: None,
                    text: None,
                });
                Ok(())
            }
        }
    })?;
    Ok(c.contents)
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Accepts a member name, or says why not: the same rules as a declared path.
fn member_name(raw: &str) -> Result<String, String> {
    let name = raw.strip_prefix("./").unwrap_or(raw);
    supporting_path(name).map_err(|why| format!("the package member {raw:?} {why}"))?;
    Ok(normalize(name))
}

struct Collector<'a> {
    contents: Contents,
    seen: HashMap<String, usize>,
    total: u64,
    limits: &'a PackageLimits,
}

impl Collector<'_> {
    fn admit(&mut self, raw: &str, declared_size: u64) -> Result<Option<String>, PackageError> {
        if self.contents.members.len() + self.contents.violations.len() >= self.limits.max_members {
            return Err(PackageError::Size(format!(
                "the package holds more than {} members",
                self.limits.max_members
            )));
        }
        self.total = self.total.saturating_add(declared_size);
        if self.total > self.limits.max_bytes {
            return Err(PackageError::Size(format!(
                "the package's members hold more than {} bytes; refused before inflating them",
                self.limits.max_bytes
            )));
        }
        let name = match member_name(raw) {
            Ok(n) => n,
            Err(why) => {
                self.contents.violations.push(violation(
                    "/execution/supporting_files".into(),
                    "tao.supporting_file.path",
                    why,
                ));
                return Ok(None);
            }
        };
        if self
            .seen
            .insert(name.clone(), self.contents.members.len())
            .is_some()
        {
            self.contents.violations.push(violation(
                "/execution/supporting_files".into(),
                "tao.supporting_file.undeclared",
                format!("the package holds {name} more than once; a reader could take either copy"),
            ));
            return Ok(None);
        }
        Ok(Some(name))
    }

    fn regular(
        &mut self,
        name: String,
        reader: &mut dyn Read,
        size_limit: u64,
    ) -> Result<(), PackageError> {
        if BUNDLE_NAMES.contains(&name.as_str()) {
            let mut data = Vec::new();
            reader
                .take(size_limit + 1)
                .read_to_end(&mut data)
                .map_err(|e| {
                    PackageError::Unreadable(format!("the package's {name} cannot be read: {e}"))
                })?;
            self.contents.bundle = Some((name, data));
            return Ok(());
        }
        let is_python = name.ends_with(".py");
        let mut text = Vec::new();
        let sink: Option<&mut dyn io::Write> = if is_python { Some(&mut text) } else { None };
        let (sha256, size) =
            sha256_reader(reader, size_limit, sink).map_err(|e| match e.kind() {
                io::ErrorKind::InvalidData => PackageError::Size(format!(
                    "the package member {name} holds more than it declares"
                )),
                _ => PackageError::Unreadable(format!(
                    "the package member {name} cannot be read: {e}"
                )),
            })?;
        let text = (is_python && size <= MAX_SCANNED_HELPER)
            .then(|| String::from_utf8_lossy(&text).into_owned());
        self.contents.members.push(Member {
            name,
            kind: MemberKind::Regular,
            found: Some(Found { sha256, size }),
            text,
        });
        Ok(())
    }
}

fn visit_tar(path: &Path, reader: impl Read, visit: &mut Visitor<'_>) -> Result<(), PackageError> {
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(|e| unreadable(path, e))? {
        let mut entry = entry.map_err(|e| unreadable(path, e))?;
        let t = entry.header().entry_type();
        if t.is_dir()
            || t.is_pax_global_extensions()
            || t.is_pax_local_extensions()
            || t.is_gnu_longname()
            || t.is_gnu_longlink()
        {
            continue;
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let size = entry.header().size().map_err(|e| unreadable(path, e))?;
        let kind = if t.is_file() || t == tar::EntryType::Continuous {
            MemberKind::Regular
        } else if t.is_symlink() || t.is_hard_link() {
            MemberKind::Link
        } else if t.is_character_special() || t.is_block_special() || t.is_fifo() {
            MemberKind::Device
        } else {
            MemberKind::Other
        };
        visit(&raw, kind, size, &mut entry)?;
    }
    Ok(())
}

fn visit_zip(
    path: &Path,
    file: File,
    limits: &PackageLimits,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let mut archive =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| unreadable(path, e))?;
    // The central directory states every size: a bomb is refused before one byte inflates.
    let mut declared_total = 0u64;
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(|e| unreadable(path, e))?;
        declared_total = declared_total.saturating_add(entry.size());
    }
    if declared_total > limits.max_bytes {
        return Err(PackageError::Size(format!("the package declares {declared_total} bytes of members, over the limit of {}; refused before inflating it", limits.max_bytes)));
    }
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| unreadable(path, e))?;
        if entry.is_dir() {
            continue;
        }
        let raw = entry.name().map_err(|e| unreadable(path, e))?.into_owned();
        let size = entry.size();
        let kind = match entry.unix_mode().unwrap_or(0o100644) & 0o170000 {
            0o120000 => MemberKind::Link,
            0o020000 | 0o060000 | 0o010000 => MemberKind::Device,
            _ => MemberKind::Regular,
        };
        visit(&raw, kind, size, &mut entry)?;
    }
    Ok(())
}

/// Compares the package's members with the declared set: every source present, a
/// regular file with its declared digest, nothing undeclared, imports closed.
pub fn compare_members(
    contents: &Contents,
    declared: &[Declared],
) -> (Vec<Violation>, Vec<Option<Found>>) {
    let all_sources: Vec<String> = declared.iter().map(|d| d.source.clone()).collect();
    let mut out = contents.violations.clone();
    let by_name: HashMap<&str, &Member> = contents
        .members
        .iter()
        .map(|m| (m.name.as_str(), m))
        .collect();
    let mut found = Vec::with_capacity(declared.len());
    for d in declared {
        let Some(m) = by_name.get(normalize(&d.source).as_str()) else {
            out.push(violation(
                d.field("source"),
                "tao.supporting_file.missing",
                format!("{} is declared but the package does not hold it", d.source),
            ));
            found.push(None);
            continue;
        };
        match (&m.kind, &m.found) {
            (MemberKind::Regular, Some(f)) => {
                compare(d, f, &mut out);
                found.push(Some(f.clone()));
            }
            (kind, _) => {
                let what = match kind {
                    MemberKind::Link => "a link",
                    MemberKind::Device => "a device or FIFO",
                    _ => "not a regular file",
                };
                out.push(violation(
                    d.field("source"),
                    "tao.supporting_file.not_regular",
                    format!(
                        "{} is {what} in the package, not a regular file; links are never followed",
                        d.source
                    ),
                ));
                found.push(None);
                continue;
            }
        }
        if let Some(text) = &m.text {
            let dir = d.source.rfind('/').map_or("", |p| &d.source[..=p]);
            for module in sibling_imports(text) {
                for rel in [
                    format!("{dir}{module}.py"),
                    format!("{dir}{module}/__init__.py"),
                ] {
                    let rel = normalize(&rel);
                    if by_name.contains_key(rel.as_str())
                        && !all_sources.iter().any(|s| normalize(s) == rel)
                    {
                        out.push(violation(
                            d.field("source"),
                            "tao.supporting_file.undeclared_import",
                            format!(
                                "{} imports {module}, and {rel} is in the package but not declared",
                                d.source
                            ),
                        ));
                    }
                }
            }
        }
    }
    let declared_names: Vec<String> = all_sources.iter().map(|s| normalize(s)).collect();
    for m in &contents.members {
        if !declared_names.contains(&m.name) {
            out.push(violation(
                "/execution/supporting_files".into(),
                "tao.supporting_file.undeclared",
                format!(
                    "the package holds {}, which is neither the bundle nor a declared source",
                    m.name
                ),
            ));
        }
    }
    (out, found)
}
