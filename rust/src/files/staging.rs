//! Staging: the verified closed set copied to `<job_dir>/inputs/action-helpers/`.
//!
//! Files are written into a temporary directory beside the target, hashed again as
//! they are copied (a file changed since verification is refused), fsynced, and the
//! directory is renamed into place: a crash at any instant leaves either no staging
//! directory or the complete one. An existing staging directory is kept only when its
//! manifest is identical, it holds nothing else, and every file in it still has the
//! size and SHA-256 its manifest gives; otherwise it is left untouched and the report
//! says `tao.staging.conflict`.
//!
//! The job directory is the one place a path is resolved as given. Everything beneath
//! it is reached through directory descriptors and never through a symlink: opened
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, created with `mkdirat` or
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, moved into place with `RENAME_NOREPLACE` (an
//! empty directory created meanwhile is never replaced), removed with `unlinkat`.
//! A symlink at `inputs`, at `inputs/action-helpers` or inside a staging is a
//! conflict, so nothing is ever written or read outside the job directory.
//! Must not touch anything under `inputs` but the staging and its own temporaries.

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use rustix::fs::{
    fstat, fsync, mkdirat, openat2, renameat_with, statat, unlinkat, AtFlags, Dir, FileType, Mode,
    OFlags, RenameFlags, ResolveFlags,
};
use rustix::io::Errno;

use super::archive::MemberKind;
use super::declared::{violation, Declared, Found};
use super::hashing::{sha256_file, sha256_reader};
use super::package;
use super::root::{not_regular, open_violation, RootDir};
use crate::limits::PackageLimits;
use crate::paths::normalize;
use crate::report::Violation;
use crate::rules::Rule;

pub const STAGING_DIR: &str = "action-helpers";
pub const MANIFEST: &str = ".jobgate-manifest.json";
const INPUTS: &str = "inputs";
const TEMP_PREFIX: &str = ".action-helpers.staging-";
/// Directories as `mkdir` makes them (the umask decides); files 0644.
const DIR_MODE: Mode = Mode::from_bits_truncate(0o777);
const FILE_MODE: Mode = Mode::from_bits_truncate(0o644);

/// Every lookup beneath the job directory: no symlink, no way out.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// Where the verified files come from.
#[derive(Clone, Copy, Debug)]
pub enum FileSource<'a> {
    Root(&'a Path),
    Package(&'a Path),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManifestEntry {
    pub destination: String,
    pub source: String,
    pub sha256: String,
    pub size: u64,
}

#[derive(Debug)]
pub struct Staged {
    pub directory: PathBuf,
    pub reused: bool,
    pub entries: Vec<ManifestEntry>,
}

fn conflict(message: String) -> Violation {
    violation(
        "/execution/supporting_files".into(),
        Rule::TaoStagingConflict,
        message,
    )
}

fn io_violation(what: &str, e: impl Into<io::Error>) -> Violation {
    let e: io::Error = e.into();
    conflict(format!(
        "staging failed while {what}: {e}; nothing was staged"
    ))
}

pub fn manifest_json(entries: &[ManifestEntry]) -> String {
    let files: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| serde_json::json!({"source": e.source, "destination": e.destination, "sha256": e.sha256, "size": e.size}))
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({"files": files})).unwrap_or_default() + "\n"
}

fn parse_manifest(data: &[u8]) -> Option<Vec<ManifestEntry>> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    let mut entries: Vec<ManifestEntry> = value
        .get("files")?
        .as_array()?
        .iter()
        .map(|f| {
            Some(ManifestEntry {
                destination: f.get("destination")?.as_str()?.into(),
                source: f.get("source")?.as_str()?.into(),
                sha256: f.get("sha256")?.as_str()?.into(),
                size: f.get("size")?.as_u64()?,
            })
        })
        .collect::<Option<_>>()?;
    entries.sort();
    Some(entries)
}

// ------------------------------------------------------------ descriptors

/// `openat2` beneath `dir` without symlinks. The kernel may ask for a retry (EAGAIN)
/// when a rename elsewhere races the lookup.
fn open_beneath<P: rustix::path::Arg + Copy>(
    dir: BorrowedFd<'_>,
    rel: P,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let mut tries = 0;
    loop {
        match openat2(dir, rel, flags | OFlags::CLOEXEC, mode, RESOLVE) {
            Err(Errno::AGAIN) if tries < 16 => tries += 1,
            result => return result,
        }
    }
}

fn open_dir<P: rustix::path::Arg + Copy>(dir: BorrowedFd<'_>, rel: P) -> Result<OwnedFd, Errno> {
    open_beneath(
        dir,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

/// A new file `name` directly in `dir`; never an existing one, never through a link.
fn create_file(dir: BorrowedFd<'_>, name: &str) -> Result<File, Errno> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
    open_beneath(dir, name, flags, FILE_MODE).map(File::from)
}

/// Why a staged file cannot be read, as the end of a sentence naming it.
enum Unreadable {
    Missing,
    Other(String),
}

impl Unreadable {
    fn why(self) -> String {
        match self {
            Unreadable::Missing => "is missing".into(),
            Unreadable::Other(why) => why,
        }
    }
}

/// `rel` opened for reading if it is a regular file: NONBLOCK so a FIFO cannot hang
/// the open, cleared once fstat says what it is. Returns the file and its size.
fn open_regular(dir: BorrowedFd<'_>, rel: &str) -> Result<(File, u64), Unreadable> {
    let other = |what: &str, e: Errno| Unreadable::Other(format!("{what}: {}", io::Error::from(e)));
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY;
    let fd = open_beneath(dir, rel, flags, Mode::empty()).map_err(|e| match e {
        Errno::NOENT => Unreadable::Missing,
        Errno::LOOP => Unreadable::Other("is reached through a symbolic link".into()),
        e => other("cannot be opened", e),
    })?;
    let stat = fstat(&fd).map_err(|e| other("cannot be read", e))?;
    if let Some(what) = not_regular(&stat) {
        return Err(Unreadable::Other(format!("is {what}, not a regular file")));
    }
    rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| other("cannot be read", e))?;
    Ok((File::from(fd), stat.st_size as u64))
}

/// What `name` in `dir` is, for a message; never follows it.
fn what_is(dir: BorrowedFd<'_>, name: &str) -> &'static str {
    match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => not_regular(&stat).unwrap_or("a regular file"),
        Err(_) => "not a directory",
    }
}

/// Why `name` in `dir` could not be opened as a directory, as the conflict that says so.
fn not_a_directory(dir: BorrowedFd<'_>, name: &str, shown: &Path, e: Errno) -> Violation {
    match e {
        Errno::LOOP | Errno::NOTDIR => {
            let what = what_is(dir, name);
            conflict(format!(
                "{} is {what}, not a directory; staging never follows a symbolic link or writes through one, and it was left untouched",
                shown.display()
            ))
        }
        e => io_violation(&format!("opening {}", shown.display()), e),
    }
}

/// The names in a directory, but `.` and `..`.
fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let mut out = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Removes `name` in `parent` and, if it is a directory, everything in it. Nothing is
/// followed: a symlink is unlinked, never entered, and every directory is opened from
/// the one above it without symlinks, one descriptor at a time (any depth, few fds).
fn remove_tree_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    match unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR) => {}
        Err(e) => return Err(e.into()),
    }
    let top = open_dir(parent, name)?;
    // Directories still to empty, relative to `top` ("." is `top` itself), as bytes:
    // a name need not be UTF-8.
    let mut pending: Vec<Vec<u8>> = vec![b".".to_vec()];
    while let Some(rel) = pending.last().cloned() {
        let dir = open_dir(top.as_fd(), rel.as_slice())?;
        let mut subdirs = Vec::new();
        for entry in names(dir.as_fd())? {
            match unlinkat(&dir, &entry, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::ISDIR) => subdirs.push([&rel[..], b"/", entry.to_bytes()].concat()),
                Err(e) => return Err(e.into()),
            }
        }
        if subdirs.is_empty() {
            pending.pop();
            if let Some(slash) = rel.iter().rposition(|&c| c == b'/') {
                let above = open_dir(top.as_fd(), &rel[..slash])?;
                unlinkat(&above, &rel[slash + 1..], AtFlags::REMOVEDIR)?;
            }
        } else {
            pending.extend(subdirs);
        }
    }
    drop(top);
    unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(Into::into)
}

// ------------------------------------------------------------ staging

/// Stages the verified set (`found[i]` for `declared[i]`, all present) under `job_dir`.
pub fn stage(
    declared: &[Declared],
    found: &[Option<Found>],
    source: FileSource<'_>,
    job_dir: &Path,
    limits: &PackageLimits,
) -> Result<Staged, Violation> {
    let mut entries: Vec<ManifestEntry> = declared
        .iter()
        .zip(found)
        .map(|(d, f)| {
            let f = f.as_ref().ok_or_else(|| {
                conflict(format!("{} was not verified; nothing was staged", d.source))
            })?;
            Ok(ManifestEntry {
                destination: normalize(&d.destination),
                source: d.source.clone(),
                sha256: f.sha256.clone(),
                size: f.size,
            })
        })
        .collect::<Result<_, Violation>>()?;
    entries.sort();
    if let Some(e) = entries.iter().find(|e| e.destination == MANIFEST) {
        return Err(conflict(format!(
            "the destination {} is reserved for the staging manifest",
            e.destination
        )));
    }
    if let Some(e) = entries.iter().find(|e| e.destination.is_empty()) {
        return Err(conflict(format!(
            "{} is staged to the staging directory itself; give it a file name",
            e.source
        )));
    }
    let inputs_path = job_dir.join(INPUTS);
    let target_path = inputs_path.join(STAGING_DIR);

    // The job directory is the user's: created if missing, opened as given. Only the
    // directory itself: a parent that is missing is a mistyped path, not a tree to
    // build (up to the root).
    let job_created = match fs::create_dir(job_dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = job_dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            return Err(conflict(format!(
                "the job directory {} cannot be created: {} does not exist (the job directory is created, never its parents); nothing was staged",
                job_dir.display(),
                parent.display()
            )));
        }
        Err(e) => return Err(io_violation("creating the job directory", e)),
    };
    let job = rustix::fs::open(
        job_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_violation("opening the job directory", e))?;
    let forget_job = || {
        if job_created {
            let _ = fs::remove_dir(job_dir); // only if still empty
        }
    };

    let (inputs, inputs_created) = match open_dir(job.as_fd(), INPUTS) {
        Ok(fd) => (fd, false),
        Err(Errno::NOENT) => {
            let created = match mkdirat(&job, INPUTS, DIR_MODE) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => {
                    forget_job();
                    return Err(io_violation("creating the inputs directory", e));
                }
            };
            match open_dir(job.as_fd(), INPUTS) {
                Ok(fd) => (fd, created),
                Err(e) => return Err(not_a_directory(job.as_fd(), INPUTS, &inputs_path, e)),
            }
        }
        Err(e) => return Err(not_a_directory(job.as_fd(), INPUTS, &inputs_path, e)),
    };
    let forget_inputs = || {
        if inputs_created {
            let _ = unlinkat(&job, INPUTS, AtFlags::REMOVEDIR); // only if still empty
        }
        forget_job();
    };

    match open_dir(inputs.as_fd(), STAGING_DIR) {
        Ok(target) => return keep(target.as_fd(), &target_path, entries),
        Err(Errno::NOENT) => {}
        Err(e) => {
            return Err(not_a_directory(
                inputs.as_fd(),
                STAGING_DIR,
                &target_path,
                e,
            ))
        }
    }

    clean_stale_temporaries(inputs.as_fd());
    let temp = format!("{TEMP_PREFIX}{}-{}", std::process::id(), nanos());
    let mut lost_race = false;
    let result = mkdirat(&inputs, temp.as_str(), DIR_MODE)
        .map_err(|e| io_violation("creating a temporary directory", e))
        .and_then(|()| {
            open_dir(inputs.as_fd(), &temp)
                .map_err(|e| io_violation("opening the temporary directory", e))
        })
        .and_then(|dir| write_all(dir.as_fd(), &entries, declared, source, limits))
        .and_then(|()| {
            renameat_with(
                &inputs,
                temp.as_str(),
                &inputs,
                STAGING_DIR,
                RenameFlags::NOREPLACE,
            )
            .map_err(|e| {
                lost_race = e == Errno::EXIST;
                io_violation("moving the staged files into place", e)
            })
        })
        .and_then(|()| fsync(&inputs).map_err(|e| io_violation("syncing the inputs directory", e)));
    match result {
        Ok(()) => Ok(Staged {
            directory: target_path,
            reused: false,
            entries,
        }),
        Err(v) => {
            let _ = remove_tree_at(inputs.as_fd(), &temp);
            if lost_race {
                // Someone else staged first: judge what is there now.
                return match open_dir(inputs.as_fd(), STAGING_DIR) {
                    Ok(target) => keep(target.as_fd(), &target_path, entries),
                    Err(e) => Err(not_a_directory(
                        inputs.as_fd(),
                        STAGING_DIR,
                        &target_path,
                        e,
                    )),
                };
            }
            drop(inputs);
            forget_inputs();
            Err(v)
        }
    }
}

/// Judges an existing staging (`target`, shown as `shown`): kept only when its manifest
/// lists exactly `entries`, it holds nothing else and no symlink, and every file in it
/// is a regular file of the manifest's size and SHA-256. Never changes anything.
fn keep(
    target: BorrowedFd<'_>,
    shown: &Path,
    entries: Vec<ManifestEntry>,
) -> Result<Staged, Violation> {
    let untouched =
        |what: String| conflict(format!("{} {what}; it was left untouched", shown.display()));
    // Ours is a few hundred bytes per file; a much larger one is not ours to read whole.
    let bound = manifest_json(&entries).len() as u64 * 2 + (64 << 10);
    let existing = match open_regular(target, MANIFEST) {
        Ok((file, size)) if size > bound => {
            drop(file);
            return Err(untouched(format!(
                "has a staging manifest of {size} bytes, more than any manifest of this bundle ({bound} bytes)"
            )));
        }
        Ok((file, _)) => {
            let mut data = Vec::new();
            file.take(bound + 1).read_to_end(&mut data).map_err(|e| {
                untouched(format!("has a staging manifest that cannot be read: {e}"))
            })?;
            if data.len() as u64 > bound {
                return Err(untouched(format!(
                    "has a staging manifest of more than {bound} bytes, more than any manifest of this bundle"
                )));
            }
            parse_manifest(&data)
        }
        Err(Unreadable::Missing) => None,
        Err(why) => {
            return Err(untouched(format!(
                "has a staging manifest that {}",
                why.why()
            )))
        }
    };
    let Some(existing) = existing else {
        return Err(untouched(
            "already exists without a readable staging manifest".into(),
        ));
    };
    if existing != entries {
        return Err(untouched(
            "already holds a different bundle's supporting files".into(),
        ));
    }
    let expected: BTreeSet<&str> = entries
        .iter()
        .map(|e| e.destination.as_str())
        .chain([MANIFEST])
        .collect();
    let actual = listing(target).map_err(untouched)?;
    if let Some(extra) = actual.iter().find(|a| !expected.contains(a.as_str())) {
        return Err(untouched(format!(
            "holds {extra}, which is not in its manifest"
        )));
    }
    if let Some(missing) = expected.iter().find(|e| !actual.contains(**e)) {
        return Err(untouched(format!(
            "lacks {missing}, which its manifest lists"
        )));
    }
    // Every staged byte is hashed again: a file edited in place keeps its name and size.
    let verdicts: Vec<Result<(), String>> =
        entries.par_iter().map(|e| recheck(target, e)).collect();
    if let Some((e, why)) = entries
        .iter()
        .zip(verdicts)
        .find_map(|(e, v)| v.err().map(|why| (e, why)))
    {
        return Err(untouched(format!("holds {} which {why}", e.destination)));
    }
    Ok(Staged {
        directory: shown.to_path_buf(),
        reused: true,
        entries,
    })
}

/// Whether the staged `entry` still is what its manifest says: a regular file of its
/// size (from fstat, before a byte is read) and SHA-256.
fn recheck(target: BorrowedFd<'_>, entry: &ManifestEntry) -> Result<(), String> {
    let (mut file, size) = open_regular(target, &entry.destination).map_err(Unreadable::why)?;
    if size != entry.size {
        return Err(format!(
            "is {size} bytes where its manifest says {}",
            entry.size
        ));
    }
    let (sha256, read, _) = sha256_file(&mut file, entry.size, || None::<io::Sink>)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if read != entry.size {
        return Err(format!(
            "is {read} bytes where its manifest says {}",
            entry.size
        ));
    }
    if sha256 != entry.sha256 {
        return Err(format!(
            "hashes to {sha256} where its manifest says {}",
            entry.sha256
        ));
    }
    Ok(())
}

/// Every entry under `dir` but directories, as relative paths; a symlink anywhere is
/// refused, named. Directories are opened from `dir` without symlinks, one at a time.
fn listing(dir: BorrowedFd<'_>) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    let mut pending = vec![String::new()];
    while let Some(rel) = pending.pop() {
        let sub = open_dir(dir, if rel.is_empty() { "." } else { rel.as_str() })
            .map_err(|e| format!("cannot be listed: {}", io::Error::from(e)))?;
        let listed = names(sub.as_fd()).map_err(|e| format!("cannot be listed: {e}"))?;
        for name in listed {
            let shown = name.to_string_lossy();
            let path = if rel.is_empty() {
                shown.clone().into_owned()
            } else {
                format!("{rel}/{shown}")
            };
            let stat = statat(&sub, &name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| format!("cannot be listed at {path}: {}", io::Error::from(e)))?;
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory => pending.push(path),
                FileType::Symlink => {
                    return Err(format!(
                        "holds a symbolic link at {path}; staging never follows one"
                    ))
                }
                _ => {
                    out.insert(path);
                }
            }
        }
    }
    Ok(out)
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Temporary directories left by a staging process that no longer runs, removed
/// through `inputs` without following anything.
fn clean_stale_temporaries(inputs: BorrowedFd<'_>) {
    let Ok(listed) = names(inputs) else {
        return;
    };
    let me = std::process::id();
    for name in listed {
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix(TEMP_PREFIX) else {
            continue;
        };
        let pid: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
        let alive = pid.is_some_and(|p| p == me || Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = remove_tree_at(inputs, &name);
        }
    }
}

/// The directories of a staging being written, created on demand beneath its
/// temporary root. Only the chain to the current directory is held open; a directory
/// is fsynced when it is left, after the last entry written into it.
struct Tree<'a> {
    root: BorrowedFd<'a>,
    open: Vec<(String, OwnedFd)>,
}

impl<'a> Tree<'a> {
    /// Makes `dir` (relative to the root, "" for the root) the current directory.
    fn enter(&mut self, dir: &str) -> Result<BorrowedFd<'_>, Violation> {
        while let Some((path, _)) = self.open.last() {
            let inside = dir == path
                || (dir.len() > path.len()
                    && dir.starts_with(path.as_str())
                    && dir.as_bytes()[path.len()] == b'/');
            if inside {
                break;
            }
            if let Some((path, fd)) = self.open.pop() {
                fsync(&fd).map_err(|e| io_violation(&format!("syncing {path}"), e))?;
            }
        }
        let done = self.open.last().map_or(0, |(p, _)| p.len() + 1);
        let rest = dir.get(done..).unwrap_or("");
        for component in rest.split('/').filter(|c| !c.is_empty()) {
            let parent = self.open.last().map_or(self.root, |(_, fd)| fd.as_fd());
            match mkdirat(parent, component, DIR_MODE) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(io_violation(&format!("creating {dir}"), e)),
            }
            let path = match self.open.last() {
                Some((p, _)) => format!("{p}/{component}"),
                None => component.to_string(),
            };
            let fd = open_dir(parent, component).map_err(|e| match e {
                Errno::NOTDIR | Errno::LOOP => conflict(format!(
                    "{path} would be staged both as a file and as a directory; nothing was staged"
                )),
                e => io_violation(&format!("creating {dir}"), e),
            })?;
            self.open.push((path, fd));
        }
        Ok(self.open.last().map_or(self.root, |(_, fd)| fd.as_fd()))
    }

    /// Syncs every directory still open, deepest first, then the root.
    fn finish(mut self) -> Result<(), Violation> {
        while let Some((path, fd)) = self.open.pop() {
            fsync(&fd).map_err(|e| io_violation(&format!("syncing {path}"), e))?;
        }
        fsync(self.root).map_err(|e| io_violation("syncing the temporary directory", e))
    }
}

fn write_all(
    temp: BorrowedFd<'_>,
    entries: &[ManifestEntry],
    declared: &[Declared],
    source: FileSource<'_>,
    limits: &PackageLimits,
) -> Result<(), Violation> {
    let by_source: HashMap<String, &ManifestEntry> =
        entries.iter().map(|e| (normalize(&e.source), e)).collect();
    let index_of = |entry: &ManifestEntry| {
        declared
            .iter()
            .find(|d| d.source == entry.source)
            .map_or(0, |d| d.index)
    };
    let changed = |entry: &ManifestEntry, now: String| {
        violation(
            format!("/execution/supporting_files/{}/sha256", index_of(entry)),
            Rule::TaoSupportingFileSha256Mismatch,
            format!(
                "{} changed while it was staged: it now {now}; nothing was staged",
                entry.source
            ),
        )
    };
    let mut tree = Tree {
        root: temp,
        open: Vec::new(),
    };
    let copy = |tree: &mut Tree<'_>, entry: &ManifestEntry, reader: &mut dyn Read| {
        let (dir, name) = entry
            .destination
            .rsplit_once('/')
            .unwrap_or(("", entry.destination.as_str()));
        let dir_fd = tree.enter(dir)?;
        let mut out = create_file(dir_fd, name).map_err(|e| match e {
            Errno::EXIST => conflict(format!(
                "{} is staged twice, or inside another destination; nothing was staged",
                entry.destination
            )),
            e => io_violation(&format!("creating {}", entry.destination), e),
        })?;
        let (sha256, size) = sha256_reader(reader, entry.size, Some(&mut out))
            .map_err(|e| io_violation(&format!("copying {}", entry.source), e))?;
        if sha256 != entry.sha256 || size != entry.size {
            return Err(changed(entry, format!("hashes to {sha256}")));
        }
        out.sync_all()
            .map_err(|e| io_violation(&format!("syncing {}", entry.destination), e))
    };
    match source {
        FileSource::Root(root) => {
            let root =
                RootDir::open(root).map_err(|e| io_violation("opening the producer root", e))?;
            for entry in entries {
                let d = declared
                    .iter()
                    .find(|d| d.source == entry.source)
                    .cloned()
                    .unwrap_or(Declared {
                        index: 0,
                        source: entry.source.clone(),
                        destination: entry.destination.clone(),
                        sha256: entry.sha256.clone(),
                    });
                let (mut file, stat) = root
                    .open_file(&entry.source)
                    .map_err(|e| open_violation(&d, e))?;
                // Refused from its size before a byte is read.
                if stat.st_size as u64 != entry.size {
                    return Err(changed(
                        entry,
                        format!(
                            "is {} bytes, {} when it was verified",
                            stat.st_size, entry.size
                        ),
                    ));
                }
                copy(&mut tree, entry, &mut file)?;
            }
        }
        FileSource::Package(path) => {
            let mut result = Ok(());
            let mut staged = 0usize;
            package::visit(path, limits, None, &mut |raw, kind, _size, reader| {
                let name = normalize(raw.strip_prefix("./").unwrap_or(raw));
                if let (MemberKind::Regular, Some(entry)) = (kind, by_source.get(&name)) {
                    if result.is_ok() {
                        result = copy(&mut tree, entry, reader);
                        staged += 1;
                    }
                }
                Ok(())
            })
            .map_err(|e| e.into_violation())?;
            result?;
            if staged != entries.len() {
                return Err(conflict(
                    "the package changed while it was staged; nothing was staged".into(),
                ));
            }
        }
    }
    tree.enter("")?;
    let mut manifest =
        create_file(temp, MANIFEST).map_err(|e| io_violation("writing the manifest", e))?;
    manifest
        .write_all(manifest_json(entries).as_bytes())
        .and_then(|()| manifest.sync_all())
        .map_err(|e| io_violation("writing the manifest", e))?;
    tree.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::hashing::sha256_bytes;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;

    fn entry(destination: &str, data: &[u8]) -> ManifestEntry {
        ManifestEntry {
            destination: destination.into(),
            source: format!("src/{destination}"),
            sha256: sha256_bytes(data),
            size: data.len() as u64,
        }
    }

    fn dir(path: &Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn remove_tree_never_follows_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep.txt"), b"keep").unwrap();
        let tree = tmp.path().join("inputs").join("t");
        fs::create_dir_all(tree.join("a/b/c")).unwrap();
        fs::write(tree.join("a/b/c/f"), b"x").unwrap();
        symlink(&outside, tree.join("a/link")).unwrap();
        symlink(&outside, tree.join("a/b/c/link")).unwrap();
        let odd = tree.join(std::ffi::OsStr::from_bytes(b"a/\xff"));
        fs::create_dir(&odd).unwrap(); // not UTF-8
        fs::write(odd.join("f"), b"x").unwrap();
        let inputs = dir(&tmp.path().join("inputs"));
        remove_tree_at(inputs.as_fd(), "t").unwrap();
        assert!(!tree.exists());
        assert_eq!(fs::read(outside.join("keep.txt")).unwrap(), b"keep");
        // A symlink in the temporary's place is unlinked, not entered.
        symlink(&outside, tmp.path().join("inputs/t")).unwrap();
        remove_tree_at(inputs.as_fd(), "t").unwrap();
        assert!(outside.join("keep.txt").exists());
        assert!(remove_tree_at(inputs.as_fd(), "t").is_ok()); // already gone
    }

    #[test]
    fn remove_tree_of_any_depth() {
        let tmp = tempfile::tempdir().unwrap();
        let top = dir(tmp.path());
        fs::create_dir(tmp.path().join("deep")).unwrap();
        let mut fd = dir(&tmp.path().join("deep"));
        for _ in 0..2000 {
            mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
            fd = open_dir(fd.as_fd(), "d").unwrap();
        }
        drop(fd);
        remove_tree_at(top.as_fd(), "deep").unwrap();
        assert!(!tmp.path().join("deep").exists());
    }

    #[test]
    fn a_kept_staging_is_hashed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("action-helpers");
        fs::create_dir_all(target.join("sub")).unwrap();
        let entries = vec![entry("a.py", b"print(1)\n"), entry("sub/b.txt", b"b\n")];
        fs::write(target.join("a.py"), b"print(1)\n").unwrap();
        fs::write(target.join("sub/b.txt"), b"b\n").unwrap();
        fs::write(target.join(MANIFEST), manifest_json(&entries)).unwrap();
        let fd = dir(&target);
        assert!(keep(fd.as_fd(), &target, entries.clone()).unwrap().reused);

        fs::write(target.join("a.py"), b"print(2)\n").unwrap(); // same size, other bytes
        let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
        assert_eq!(v.rule, Rule::TaoStagingConflict);
        assert!(v.message.contains("a.py which hashes to"), "{}", v.message);

        fs::write(target.join("a.py"), b"print(1)\n# more\n").unwrap();
        let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
        assert!(
            v.message
                .contains("a.py which is 16 bytes where its manifest says 9"),
            "{}",
            v.message
        );

        fs::remove_file(target.join("a.py")).unwrap();
        symlink(tmp.path().join("elsewhere"), target.join("a.py")).unwrap();
        let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
        assert!(v.message.contains("symbolic link at a.py"), "{}", v.message);

        fs::remove_file(target.join("a.py")).unwrap();
        rustix::fs::mknodat(
            &fd,
            "a.py",
            rustix::fs::FileType::Fifo,
            Mode::from_bits_truncate(0o644),
            0,
        )
        .unwrap();
        let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
        assert!(
            v.message
                .contains("a.py which is a FIFO, not a regular file"),
            "{}",
            v.message
        );
    }

    #[test]
    fn a_manifest_is_read_bounded_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("action-helpers");
        fs::create_dir_all(&target).unwrap();
        let entries = vec![entry("a.py", b"x")];
        fs::write(target.join("a.py"), b"x").unwrap();
        let real = tmp.path().join("manifest.json");
        fs::write(&real, manifest_json(&entries)).unwrap();
        symlink(&real, target.join(MANIFEST)).unwrap();
        let fd = dir(&target);
        let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
        assert!(
            v.message
                .contains("manifest that is reached through a symbolic link"),
            "{}",
            v.message
        );

        fs::remove_file(target.join(MANIFEST)).unwrap();
        let big = File::create(target.join(MANIFEST)).unwrap();
        big.set_len(1 << 30).unwrap();
        let v = keep(fd.as_fd(), &target, entries).unwrap_err();
        assert!(
            v.message.contains("staging manifest of 1073741824 bytes"),
            "{}",
            v.message
        );
    }
}
