//! The verified files copied into the staging's temporary directory, hashed again as
//! they are copied (a file changed since verification is refused) and fsynced, with
//! the manifest written last.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{fsync, mkdirat};
use rustix::io::Errno;

use super::beneath::{create_file, open_dir, DIR_MODE};
use super::manifest::{manifest_json, ManifestEntry, MANIFEST};
use super::violations::{conflict, io_violation};
use crate::files::archive::MemberKind;
use crate::files::declared::Declared;
use crate::files::hashing::sha256_reader;
use crate::files::package;
use crate::files::root::{open_violation, RootDir};
use crate::limits::PackageLimits;
use crate::paths::normalize;
use crate::report::Violation;
use crate::rules::Rule;

/// Where the verified files come from.
#[derive(Clone, Copy, Debug)]
pub enum FileSource<'a> {
    Root(&'a Path),
    Package(&'a Path),
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

pub(super) fn write_all(
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
        Violation::new(
            Rule::TaoSupportingFileSha256Mismatch,
            format!("/execution/supporting_files/{}/sha256", index_of(entry)),
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
