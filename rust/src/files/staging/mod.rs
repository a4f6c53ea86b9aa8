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
//!
//! By concern: `manifest` (what a staging holds and how it is written down),
//! `beneath` (every descriptor opened, created or removed beneath the job directory),
//! `write` (the files copied into a temporary directory), `temporary` (its name, and
//! those left behind by a process that died), `keep` (whether an existing staging is
//! the same one) and `violations` (how staging says it failed).

mod beneath;
mod keep;
mod manifest;
mod temporary;
mod violations;
mod write;

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{fsync, mkdirat, renameat_with, unlinkat, AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::declared::{Declared, Found};
use crate::limits::PackageLimits;
use crate::paths::normalize;
use crate::report::Violation;
use beneath::{not_a_directory, open_dir, remove_tree_at, DIR_MODE};
use keep::keep;
pub use manifest::{manifest_json, ManifestEntry, Staged, MANIFEST};
use temporary::{clean_stale_temporaries, temporary_name};
use violations::{conflict, io_violation};
use write::write_all;
pub use write::FileSource;

pub const STAGING_DIR: &str = "action-helpers";
const INPUTS: &str = "inputs";

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
    let temp = temporary_name();
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

#[cfg(test)]
mod tests;
