//! Verification against a producer root directory.
//!
//! Each source is opened with `openat2(RESOLVE_BENEATH)`, so the kernel refuses to
//! cross the root while resolving it (a symlink out of it, absolute or relative, is
//! `tao.supporting_file.escape`), and the file hashed is the one actually opened: a
//! link swapped in between check and read cannot redirect the read.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::SystemTime;

use rayon::prelude::*;
use rustix::fs::{openat2, FileType, Mode, OFlags, ResolveFlags, Stat};

use super::cache::{Digest, DigestCache, Key};
use super::declared::{compare, undeclared_imports, Declared, Found};
use super::hashing::sha256_file;
use super::imports::ImportScanner;
use crate::paths::normalize;
use crate::report::Violation;
use crate::rules::Rule;

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
            // A socket cannot be opened at all (ENXIO), nor a device without a driver:
            // what the path is says more than why the open failed.
            e => match self.kind_of(rel) {
                Some(what) => OpenError::NotRegular(what),
                None => OpenError::Io(e.into()),
            },
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| OpenError::Io(e.into()))?;
        if let Some(what) = not_regular(&stat) {
            return Err(OpenError::NotRegular(what));
        }
        // Reading blocks normally from here on; NONBLOCK only kept a FIFO from hanging the open.
        let _ = rustix::fs::fcntl_setfl(&fd, OFlags::empty());
        // Read once from start to end: a file not in the page cache gets twice the
        // readahead. Only a hint; a file system that ignores it is read all the same.
        let _ = rustix::fs::fadvise(&fd, 0, None, rustix::fs::Advice::Sequential);
        Ok((File::from(fd), stat))
    }

    /// What `rel` is when it is not a regular file, looked at through an `O_PATH`
    /// descriptor (which opens sockets and devices without touching them).
    fn kind_of(&self, rel: &str) -> Option<&'static str> {
        let fd = openat2(
            &self.fd,
            rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        not_regular(&rustix::fs::fstat(&fd).ok()?)
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

/// What a file is, in a message's words, when it is not a regular file.
pub fn not_regular(stat: &Stat) -> Option<&'static str> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => None,
        FileType::Directory => Some("a directory"),
        FileType::Fifo => Some("a FIFO"),
        FileType::Socket => Some("a socket"),
        FileType::CharacterDevice | FileType::BlockDevice => Some("a device"),
        FileType::Symlink => Some("a symbolic link"),
        FileType::Unknown => Some("of an unknown type"),
    }
}

/// Why a source cannot be used, as the violation that says so.
pub fn open_violation(d: &Declared, e: OpenError) -> Violation {
    match e {
        OpenError::Missing(why) => Violation::new(Rule::TaoSupportingFileMissing, d.field("source"), format!("{} is declared but {why} under the producer root", d.source)),
        OpenError::Escape => Violation::new(Rule::TaoSupportingFileEscape, d.field("source"), format!("{} resolves, through a symlink, outside the producer root; supporting files must live inside it", d.source)),
        OpenError::NotRegular(what) => Violation::new(Rule::TaoSupportingFileNotRegular, d.field("source"), format!("{} is {what}, not a regular file", d.source)),
        OpenError::Io(e) => Violation::new(Rule::TaoSupportingFileMissing, d.field("source"), format!("{} cannot be read under the producer root: {e}", d.source)),
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
    let sources: HashSet<String> = declared.iter().map(|d| normalize(&d.source)).collect();
    let results: Vec<(Vec<Violation>, Option<Found>)> = declared
        .par_iter()
        .map(|d| verify_one(root, d, &sources, max_file_bytes, cache))
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
    declared: &HashSet<String>,
    max_file_bytes: u64,
    cache: Option<&DigestCache>,
) -> (Vec<Violation>, Option<Found>) {
    let mut out = Vec::new();
    let (mut file, stat) = match root.open_file(&d.source) {
        Ok(opened) => opened,
        Err(e) => return (vec![open_violation(d, e)], None),
    };
    // The size fstat gives is refused before a byte is read: a sparse file of many
    // gigabytes costs a stat, not the time to read it up to the limit.
    if stat.st_size as u64 > max_file_bytes {
        return (
            vec![too_large(d, max_file_bytes, stat.st_size as u64)],
            None,
        );
    }
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
                        vec![Violation::new(
                            Rule::TaoSupportingFileMissing,
                            d.field("source"),
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
    let present = |rel: &str| root.exists(rel);
    undeclared_imports(
        d,
        &digest.imports,
        declared,
        present,
        "exists next to it",
        &mut out,
    );
    (out, Some(found))
}

/// A source over the per-file limit (`limits.max_package_bytes`), refused from its
/// size; the message reads as the one for a file found too large while reading
/// (`sha256_file`'s "more than N bytes").
fn too_large(d: &Declared, limit: u64, size: u64) -> Violation {
    Violation::new(
        Rule::TaoSupportingFileMissing,
        d.field("source"),
        format!(
            "{} cannot be read: more than {limit} bytes (it is {size} bytes)",
            d.source
        ),
    )
}

/// The digest of a helper and, for a Python one small enough to scan, its sibling imports.
fn hash_helper(file: &mut File, source: &str, max_file_bytes: u64) -> io::Result<Digest> {
    let python = source.ends_with(".py");
    let (sha256, size, scanner) =
        sha256_file(file, max_file_bytes, || python.then(ImportScanner::default))?;
    let imports = scanner.map(ImportScanner::finish).unwrap_or_default();
    Ok(Digest {
        sha256,
        size,
        imports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn declared(source: &str) -> Declared {
        Declared {
            index: 0,
            source: source.into(),
            destination: source.into(),
            sha256: "0".repeat(64),
        }
    }

    #[test]
    fn sockets_fifos_and_devices_are_not_regular() {
        let tmp = tempfile::tempdir().unwrap();
        let _listener = UnixListener::bind(tmp.path().join("s.sock")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            tmp.path().join("pipe"),
            FileType::Fifo,
            Mode::from_bits_truncate(0o644),
            0,
        )
        .unwrap();
        std::fs::create_dir(tmp.path().join("dir")).unwrap();
        let root = RootDir::open(tmp.path()).unwrap();
        for (name, what) in [
            ("s.sock", "a socket"),
            ("pipe", "a FIFO"),
            ("dir", "a directory"),
        ] {
            match root.open_file(name) {
                Err(OpenError::NotRegular(found)) => assert_eq!(found, what, "{name}"),
                _ => panic!("{name} opened as a regular file"),
            }
        }
        let (violations, _) = verify(&root, &[declared("s.sock")], 1 << 20, None);
        assert_eq!(violations[0].rule, Rule::TaoSupportingFileNotRegular);
        assert_eq!(
            violations[0].message,
            "s.sock is a socket, not a regular file"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_from_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        let sparse = File::create(tmp.path().join("sparse.bin")).unwrap();
        sparse.set_len(10 << 30).unwrap();
        let root = RootDir::open(tmp.path()).unwrap();
        let (violations, found) = verify(&root, &[declared("sparse.bin")], 1 << 20, None);
        assert_eq!(found, vec![None]);
        assert_eq!(violations[0].rule, Rule::TaoSupportingFileMissing);
        assert_eq!(
            violations[0].message,
            format!(
                "sparse.bin cannot be read: more than {} bytes (it is {} bytes)",
                1 << 20,
                10u64 << 30
            )
        );
    }
}
