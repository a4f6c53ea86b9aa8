//! Whether a staging already in place is the one asked for: kept only when it is
//! exactly what its manifest says, byte for byte; judged, never changed.

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rayon::prelude::*;
use rustix::fs::{statat, AtFlags, FileType};

use super::beneath::{names, open_dir, open_regular, Unreadable};
use super::manifest::{manifest_json, parse_manifest, ManifestEntry, Staged, MANIFEST};
use super::violations::conflict;
use crate::files::hashing::sha256_file;
use crate::report::Violation;

/// Judges an existing staging (`target`, shown as `shown`): kept only when its manifest
/// lists exactly `entries`, it holds nothing else and no symlink, and every file in it
/// is a regular file of the manifest's size and SHA-256. Never changes anything.
pub(super) fn keep(
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
