//! What every archive reader shares: the kinds of member, the visitor each member is
//! streamed through, and the errors that refuse a package (with the phrases that say
//! why). The format readers (`tar_format`, `zip_format`, `streams`) and the package
//! reading (`package`) all build on it; it imports none of them.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::budget::Stop;
use super::root::not_regular;
use crate::refusal;
use crate::report::Violation;

/// What a member of an archive is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberKind {
    Regular,
    Directory,
    Link,
    Device,
    Other,
}

/// Why a package could not be read at all.
#[derive(Debug)]
pub enum PackageError {
    /// Too large or too many members: refused before being inflated further.
    Size(String),
    /// Not an archive, torn, or laid out so that its readers could disagree.
    Unreadable(String),
    /// The caller's deadline passed while it was read: no verdict on it.
    Deadline(String),
}

impl PackageError {
    pub fn into_violation(self) -> Violation {
        match self {
            PackageError::Size(m) => refusal::oversized(m),
            // Only a caller that set a deadline meets this, and it asks for no report.
            PackageError::Unreadable(m) | PackageError::Deadline(m) => refusal::unreadable(m),
        }
    }
}

/// Why a format reader refuses a package, as a phrase that follows "the package <path>".
/// It travels inside `io::Error` through the decompressors and member readers.
#[derive(Debug)]
pub(crate) struct Refusal(pub(crate) String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

pub(crate) fn refusal(why: impl Into<String>) -> io::Error {
    io::Error::other(Refusal(why.into()))
}

pub(crate) fn refused(path: &Path, why: impl fmt::Display) -> PackageError {
    PackageError::Unreadable(format!("the package {} {why}", path.display()))
}

/// Whether `e` says why the package is refused or no longer read (rather than being an
/// error of the reader that met it).
pub(crate) fn is_verdict(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|i| i.is::<Refusal>() || i.is::<Stop>())
}

/// An error met while reading the package: a refusal says what is wrong with it, a
/// stop that it was read too far or too long.
pub(crate) fn read_error(path: &Path, e: io::Error) -> PackageError {
    if let Some(Refusal(why)) = e.get_ref().and_then(|i| i.downcast_ref::<Refusal>()) {
        return refused(path, why);
    }
    match e.get_ref().and_then(|i| i.downcast_ref::<Stop>()) {
        Some(Stop::Budget(why)) => {
            return PackageError::Size(format!("the package {} {why}", path.display()))
        }
        Some(Stop::Deadline(why)) => {
            return PackageError::Deadline(format!("the package {} {why}", path.display()))
        }
        None => {}
    }
    if e.kind() == io::ErrorKind::UnexpectedEof {
        return refused(path, format_args!("is truncated: {e}"));
    }
    refused(path, format_args!("cannot be read: {e}"))
}

/// Called for every member, directories included: its raw name, kind, declared size
/// and content.
pub type Visitor<'v> =
    dyn FnMut(&str, MemberKind, u64, &mut dyn Read) -> Result<(), PackageError> + 'v;

/// The archive opened for reading if it is a regular file: the open does not block,
/// so a FIFO named as a package cannot hang the gate, and a device is never read.
pub(crate) fn open_regular(path: &Path) -> Result<File, PackageError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd =
        rustix::fs::open(path, flags, Mode::empty()).map_err(|e| read_error(path, e.into()))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| read_error(path, e.into()))?;
    if let Some(what) = not_regular(&stat) {
        return Err(refused(
            path,
            format_args!("cannot be read: it is {what}, not a regular file"),
        ));
    }
    rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| read_error(path, e.into()))?;
    Ok(File::from(fd))
}

/// The first characters of a long member name, all a message quotes of it.
const SHOWN_CHARS: usize = 200;

pub fn head(name: &str) -> &str {
    name.char_indices()
        .nth(SHOWN_CHARS)
        .map_or(name, |(cut, _)| &name[..cut])
}

/// A member name as a refusal names it: whole when short, else its first characters
/// and its length, so that no message holds a name as long as the archive allows.
pub fn clipped(name: &str) -> std::borrow::Cow<'_, str> {
    let first = head(name);
    if first.len() == name.len() {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(format!("{first}... ({} bytes)", name.len()))
    }
}
