//! Document files read by path, for checking many of them in one call (`jobgate
//! revalidate`): a regular file only (opened without blocking, so a FIFO cannot hang
//! the reader and a device is never read), refused by its size before it is read whole,
//! and read into a buffer the caller reuses. An archive of small documents is all
//! opening and reading; done here, it costs no Python object per file.
//!
//! Owns reading document files by name; must not judge them (the validator does), and
//! must not read packages (`package`).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

use crate::refusal;
use crate::report::Violation;

/// What a file that is not a regular one is, in the words the Python layer uses for
/// names given on the command line (`jobgate.sources`), so a refusal reads the same
/// whichever side met it.
fn what(file_type: FileType) -> Option<&'static str> {
    match file_type {
        FileType::RegularFile => None,
        FileType::Directory => Some("a directory"),
        FileType::Fifo => Some("a FIFO"),
        FileType::Socket => Some("a socket"),
        FileType::CharacterDevice => Some("a character device"),
        FileType::BlockDevice => Some("a block device"),
        FileType::Symlink | FileType::Unknown => Some("of an unknown type"),
    }
}

fn not_regular(path: &Path, what: &str) -> Violation {
    refusal::unreadable(format!("{}: is {what}, not a regular file", path.display()))
}

/// The system's words for an error (`Permission denied`), as Python's `strerror`
/// gives them, without Rust's ` (os error N)`.
fn strerror(e: &io::Error) -> String {
    let shown = e.to_string();
    match (e.raw_os_error(), shown.rfind(" (os error ")) {
        (Some(_), Some(cut)) => shown[..cut].to_owned(),
        _ => shown,
    }
}

fn cannot_read(path: &Path, e: &io::Error) -> Violation {
    refusal::unreadable(format!("cannot read {}: {}", path.display(), strerror(e)))
}

/// Reads the document at `path` into `buffer` (cleared first). A file that is not a
/// regular file is refused by what it is (`json.syntax`), one over `max_bytes` by its
/// size (`limits.size`) with at most `max_bytes + 1` bytes read, one that cannot be
/// opened or read with the system's reason (`json.syntax`).
pub fn read(path: &Path, max_bytes: usize, buffer: &mut Vec<u8>) -> Result<(), Violation> {
    buffer.clear();
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            // A socket cannot be opened at all (ENXIO): say what it is.
            if let Ok(stat) = rustix::fs::stat(path) {
                if let Some(what) = what(FileType::from_raw_mode(stat.st_mode)) {
                    return Err(not_regular(path, what));
                }
            }
            return Err(cannot_read(path, &e.into()));
        }
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| cannot_read(path, &e.into()))?;
    if let Some(what) = what(FileType::from_raw_mode(stat.st_mode)) {
        return Err(not_regular(path, what));
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > max_bytes as u64 {
        return Err(refusal::too_large(Some(size), max_bytes as u64));
    }
    // A regular file: reads block as usual from here on.
    rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| cannot_read(path, &e.into()))?;
    buffer.reserve(size as usize + 1);
    let cap = max_bytes as u64 + 1; // one byte past the limit says the file grew past it
    File::from(fd)
        .take(cap)
        .read_to_end(buffer)
        .map_err(|e| cannot_read(path, &e))?;
    if buffer.len() > max_bytes {
        buffer.clear();
        return Err(refusal::too_large(None, max_bytes as u64));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Rule;

    fn read_all(path: &Path, max: usize) -> Result<Vec<u8>, Violation> {
        let mut buffer = b"left over".to_vec();
        read(path, max, &mut buffer).map(|()| buffer)
    }

    #[test]
    fn a_document_is_read_whole_into_a_cleared_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        std::fs::write(&path, b"{\"a\": 1}").unwrap();
        assert_eq!(read_all(&path, 8).unwrap(), b"{\"a\": 1}");
    }

    #[test]
    fn a_document_over_the_limit_is_refused_by_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        std::fs::write(&path, b"{\"a\": 12}").unwrap();
        let v = read_all(&path, 8).unwrap_err();
        assert_eq!(v.rule, Rule::LimitsSize);
        assert_eq!(
            v.message,
            "the document is 9 bytes, over the limit of 8 bytes"
        );
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone.json");
        let v = read_all(&missing, 8).unwrap_err();
        assert_eq!(v.rule, Rule::JsonSyntax);
        assert_eq!(
            v.message,
            format!(
                "cannot read {}: No such file or directory",
                missing.display()
            )
        );
        let v = read_all(dir.path(), 8).unwrap_err();
        assert_eq!(
            v.message,
            format!(
                "{}: is a directory, not a regular file",
                dir.path().display()
            )
        );
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.json");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).unwrap();
        let v = read_all(&fifo, 8).unwrap_err();
        assert_eq!(
            v.message,
            format!("{}: is a FIFO, not a regular file", fifo.display())
        );
    }
}
