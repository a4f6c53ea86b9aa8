//! Every descriptor staging holds beneath the job directory: opened with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, created with `mkdirat` or
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, removed with `unlinkat`, never through a symlink.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{fstat, openat2, statat, unlinkat, AtFlags, Dir, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::violations::{conflict, io_violation};
use crate::files::root::not_regular;
use crate::report::Violation;

/// Directories as `mkdir` makes them (the umask decides); files 0644.
pub(super) const DIR_MODE: Mode = Mode::from_bits_truncate(0o777);
const FILE_MODE: Mode = Mode::from_bits_truncate(0o644);

/// Every lookup beneath the job directory: no symlink, no way out.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// `openat2` beneath `dir` without symlinks. The kernel may ask for a retry (EAGAIN)
/// when a rename elsewhere races the lookup.
pub(super) fn open_beneath<P: rustix::path::Arg + Copy>(
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

pub(super) fn open_dir<P: rustix::path::Arg + Copy>(
    dir: BorrowedFd<'_>,
    rel: P,
) -> Result<OwnedFd, Errno> {
    open_beneath(
        dir,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

/// A new file `name` directly in `dir`; never an existing one, never through a link.
pub(super) fn create_file(dir: BorrowedFd<'_>, name: &str) -> Result<File, Errno> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
    open_beneath(dir, name, flags, FILE_MODE).map(File::from)
}

/// Why a staged file cannot be read, as the end of a sentence naming it.
pub(super) enum Unreadable {
    Missing,
    Other(String),
}

impl Unreadable {
    pub(super) fn why(self) -> String {
        match self {
            Unreadable::Missing => "is missing".into(),
            Unreadable::Other(why) => why,
        }
    }
}

/// `rel` opened for reading if it is a regular file: NONBLOCK so a FIFO cannot hang
/// the open, cleared once fstat says what it is. Returns the file and its size.
pub(super) fn open_regular(dir: BorrowedFd<'_>, rel: &str) -> Result<(File, u64), Unreadable> {
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
pub(super) fn what_is(dir: BorrowedFd<'_>, name: &str) -> &'static str {
    match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => not_regular(&stat).unwrap_or("a regular file"),
        Err(_) => "not a directory",
    }
}

/// Why `name` in `dir` could not be opened as a directory, as the conflict that says so.
pub(super) fn not_a_directory(
    dir: BorrowedFd<'_>,
    name: &str,
    shown: &Path,
    e: Errno,
) -> Violation {
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
pub(super) fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
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
pub(super) fn remove_tree_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
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
