//! Verification against a producer root directory.
//!
//! Each source is opened with `openat2(RESOLVE_BENEATH)`, so the kernel refuses to
//! cross the root while resolving it (a symlink out of it, absolute or relative, is
//! `tao.supporting_file.escape`), and the file hashed is the one actually opened: a
//! link swapped in between check and read cannot redirect the read.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::SystemTime;

use rayon::prelude::*;
use rustix::fs::{openat2, FileType, Mode, OFlags, ResolveFlags, Stat};

use super::cache::{Digest, DigestCache, Key};
use super::hashing::sha256_reader;
use super::imports::sibling_imports;
use super::{compare, violation, Declared, Found};
use crate::report::Violation;

/// Python helpers larger than this are hashed but not scanned for imports.
const MAX_SCANNED_HELPER: u64 = 4 << 20;

pub struct RootDir {
    fd: OwnedFd,
}

pub enum OpenError {
    Missing(String),
    Escape,
    NotRegular(&'static str),
    Io(io::Error),
}

impl RootDir {
    pub fn open(path: &Path) -> io::Result<RootDir> {
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(RootDir { fd })
    }

    /// Opens `rel` for reading without leaving the root; refuses anything not a regular
    /// file. Returns the file with what the kernel reported of it when it was opened.
    pub fn open_file(&self, rel: &str) -> Result<(File, Stat), OpenError> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = openat2(
            &self.fd,
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => OpenError::Missing("it does not exist".into()),
            rustix::io::Errno::NOTDIR => {
                OpenError::Missing("a parent of it is not a directory".into())
            }
            rustix::io::Errno::XDEV => OpenError::Escape,
            rustix::io::Errno::LOOP => OpenError::Missing("its symlinks loop".into()),
            e => OpenError::Io(e.into()),
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| OpenError::Io(e.into()))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(OpenError::NotRegular("a directory")),
            FileType::Fifo => return Err(OpenError::NotRegular("a FIFO")),
            FileType::Socket => return Err(OpenError::NotRegular("a socket")),
            FileType::CharacterDevice | FileType::BlockDevice => {
                return Err(OpenError::NotRegular("a device"))
            }
            _ => return Err(OpenError::NotRegular("not a regular file")),
        }
        // Reading blocks normally from here on; NONBLOCK only kept a FIFO from hanging the open.
        let _ = rustix::fs::fcntl_setfl(&fd, OFlags::empty());
        Ok((File::from(fd), stat))
    }

    /// Whether `rel` exists (as anything) beneath the root.
    pub fn exists(&self, rel: &str) -> bool {
        openat2(
            &self.fd,
            rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .is_ok()
    }
}

/// Why a source cannot be used, as the violation that says so.
pub fn open_violation(d: &Declared, e: OpenError) -> Violation {
    match e {
        OpenError::Missing(why) => violation(d.field("source"), "tao.supporting_file.missing", format!("{} is declared but {why} under the producer root", d.source)),
        OpenError::Escape => violation(d.field("source"), "tao.supporting_file.escape", format!("{} resolves, through a symlink, outside the producer root; supporting files must live inside it", d.source)),
        OpenError::NotRegular(what) => violation(d.field("source"), "tao.supporting_file.not_regular", format!("{} is {what}, not a regular file", d.source)),
        OpenError::Io(e) => violation(d.field("source"), "tao.supporting_file.missing", format!("{} cannot be read under the producer root: {e}", d.source)),
    }
}

/// Verifies every declared file in parallel; returns the violations and, per declared
/// entry, what was found (`None` where it could not be hashed). With `cache`, a file
/// unchanged since it was last verified is not read again (see `cache`).
pub fn verify(
    root: &RootDir,
    declared: &[Declared],
    max_file_bytes: u64,
    cache: Option<&DigestCache>,
) -> (Vec<Violation>, Vec<Option<Found>>) {
    let results: Vec<(Vec<Violation>, Option<Found>)> = declared
        .par_iter()
        .map(|d| verify_one(root, d, declared, max_file_bytes, cache))
        .collect();
    let mut violations = Vec::new();
    let mut found = Vec::with_capacity(results.len());
    for (v, f) in results {
        violations.extend(v);
        found.push(f);
    }
    (violations, found)
}

fn verify_one(
    root: &RootDir,
    d: &Declared,
    all: &[Declared],
    max_file_bytes: u64,
    cache: Option<&DigestCache>,
) -> (Vec<Violation>, Option<Found>) {
    let mut out = Vec::new();
    let (mut file, stat) = match root.open_file(&d.source) {
        Ok(opened) => opened,
        Err(e) => return (vec![open_violation(d, e)], None),
    };
    // The key describes the file opened, the one that would be read.
    let key = cache.map(|_| Key::of(&stat));
    let cached = cache.zip(key.as_ref()).and_then(|(c, k)| c.get(k));
    let digest = match cached {
        Some(digest) => digest,
        None => {
            let started = SystemTime::now();
            let digest = match hash_helper(&mut file, &d.source, max_file_bytes) {
                Ok(digest) => digest,
                Err(e) => {
                    let message = format!("{} cannot be read: {e}", d.source);
                    return (
                        vec![violation(
                            d.field("source"),
                            "tao.supporting_file.missing",
                            message,
                        )],
                        None,
                    );
                }
            };
            if let (Some(cache), Some(before)) = (cache, key) {
                if let Ok(after) = rustix::fs::fstat(&file) {
                    cache.put(before, Key::of(&after), started, digest.clone());
                }
            }
            digest
        }
    };
    let found = Found {
        sha256: digest.sha256,
        size: digest.size,
    };
    compare(d, &found, &mut out);
    undeclared_imports(root, d, all, &digest.imports, &mut out);
    (out, Some(found))
}

/// The digest of a helper and, for a Python one small enough to scan, its sibling imports.
fn hash_helper(file: &mut File, source: &str, max_file_bytes: u64) -> io::Result<Digest> {
    let is_python = source.ends_with(".py");
    let mut text = Vec::new();
    let sink: Option<&mut dyn io::Write> = if is_python { Some(&mut text) } else { None };
    let (sha256, size) = sha256_reader(file, max_file_bytes, sink)?;
    let imports = if is_python && size <= MAX_SCANNED_HELPER {
        sibling_imports(&String::from_utf8_lossy(&text))
    } else {
        Vec::new()
    };
    Ok(Digest {
        sha256,
        size,
        imports,
    })
}

fn undeclared_imports(
    root: &RootDir,
    d: &Declared,
    all: &[Declared],
    modules: &[String],
    out: &mut Vec<Violation>,
) {
    let dir = match d.source.rfind('/') {
        Some(p) => &d.source[..=p],
        None => "",
    };
    let declared = |rel: &str| all.iter().any(|x| normalize(&x.source) == normalize(rel));
    for module in modules {
        let file = format!("{dir}{module}.py");
        let package = format!("{dir}{module}/__init__.py");
        let present = [&file, &package].into_iter().find(|rel| root.exists(rel));
        if let Some(rel) = present {
            if !declared(rel) {
                out.push(violation(
                    d.field("source"),
                    "tao.supporting_file.undeclared_import",
                    format!("{} imports {module}, and {rel} exists next to it but is not declared; declare it so the staged set is import-closed", d.source),
                ));
            }
        }
    }
}

/// `a//b/./c` and `a/b/c` name the same file.
pub fn normalize(path: &str) -> String {
    path.split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}
