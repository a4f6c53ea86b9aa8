//! Staging: the verified closed set copied to `<job_dir>/inputs/action-helpers/`.
//!
//! Files are written into a temporary directory beside the target, hashed again as
//! they are copied (a file changed since verification is refused), fsynced, and the
//! directory is renamed into place: a crash at any instant leaves either no staging
//! directory or the complete one. An existing staging directory is reused only when
//! its manifest is identical and it holds nothing else; otherwise it is left untouched
//! and the report says `tao.staging.conflict`.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::hashing::sha256_reader;
use super::package::{self, MemberKind, PackageLimits};
use super::root::{normalize, open_violation, RootDir};
use super::{violation, Declared, Found};
use crate::report::Violation;

pub const STAGING_DIR: &str = "action-helpers";
pub const MANIFEST: &str = ".jobgate-manifest.json";
const TEMP_PREFIX: &str = ".action-helpers.staging-";

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
        "tao.staging.conflict",
        message,
    )
}

fn io_violation(what: &str, e: io::Error) -> Violation {
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

fn read_manifest(dir: &Path) -> Option<Vec<ManifestEntry>> {
    let data = fs::read(dir.join(MANIFEST)).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&data).ok()?;
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

/// Every file under `dir`, as relative paths.
fn listing(dir: &Path) -> io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = stack.pop() {
        for entry in fs::read_dir(&path)? {
            let entry = entry?;
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type()?.is_dir() {
                stack.push((entry.path(), format!("{name}/")));
            } else {
                out.insert(name);
            }
        }
    }
    Ok(out)
}

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
    let inputs = job_dir.join("inputs");
    let target = inputs.join(STAGING_DIR);
    if target.exists() {
        return reuse(&target, entries);
    }
    fs::create_dir_all(&inputs).map_err(|e| io_violation("creating the inputs directory", e))?;
    clean_stale_temporaries(&inputs);
    let temp = inputs.join(format!("{TEMP_PREFIX}{}-{}", std::process::id(), nanos()));
    let result = write_all(&temp, &entries, declared, source, limits).and_then(|()| {
        fs::rename(&temp, &target)
            .map_err(|e| io_violation("moving the staged files into place", e))?;
        File::open(&inputs)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_violation("syncing the inputs directory", e))
    });
    match result {
        Ok(()) => Ok(Staged {
            directory: target,
            reused: false,
            entries,
        }),
        Err(v) => {
            let _ = fs::remove_dir_all(&temp);
            // Someone else staged first: judge what is there now.
            if target.exists() {
                return reuse(&target, entries);
            }
            Err(v)
        }
    }
}

fn reuse(target: &Path, entries: Vec<ManifestEntry>) -> Result<Staged, Violation> {
    let Some(existing) = read_manifest(target) else {
        return Err(conflict(format!(
            "{} already exists without a readable staging manifest; it was left untouched",
            target.display()
        )));
    };
    if existing != entries {
        return Err(conflict(format!(
            "{} already holds a different bundle's supporting files; it was left untouched",
            target.display()
        )));
    }
    let expected: BTreeSet<String> = entries
        .iter()
        .map(|e| e.destination.clone())
        .chain([MANIFEST.to_string()])
        .collect();
    let actual = listing(target)
        .map_err(|e| conflict(format!("{} cannot be listed: {e}", target.display())))?;
    if let Some(extra) = actual.difference(&expected).next() {
        return Err(conflict(format!(
            "{} holds {extra}, which is not in its manifest; it was left untouched",
            target.display()
        )));
    }
    if let Some(missing) = expected.difference(&actual).next() {
        return Err(conflict(format!(
            "{} lacks {missing}, which its manifest lists; it was left untouched",
            target.display()
        )));
    }
    Ok(Staged {
        directory: target.to_path_buf(),
        reused: true,
        entries,
    })
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Temporary directories left by a staging process that no longer runs.
fn clean_stale_temporaries(inputs: &Path) {
    let Ok(dir) = fs::read_dir(inputs) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(TEMP_PREFIX) else {
            continue;
        };
        let pid: Option<i32> = rest.split('-').next().and_then(|p| p.parse().ok());
        let alive = pid.is_some_and(|p| {
            Path::new(&format!("/proc/{p}")).exists() && p != std::process::id() as i32
                || p == std::process::id() as i32
        });
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn create(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
}

fn write_all(
    temp: &Path,
    entries: &[ManifestEntry],
    declared: &[Declared],
    source: FileSource<'_>,
    limits: &PackageLimits,
) -> Result<(), Violation> {
    fs::create_dir(temp).map_err(|e| io_violation("creating a temporary directory", e))?;
    let by_source: HashMap<String, &ManifestEntry> =
        entries.iter().map(|e| (normalize(&e.source), e)).collect();
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::from([temp.to_path_buf()]);
    let mut copy = |entry: &ManifestEntry, reader: &mut dyn io::Read| -> Result<(), Violation> {
        let dest = temp.join(&entry.destination);
        let mut out = create(&dest)
            .map_err(|e| io_violation(&format!("creating {}", entry.destination), e))?;
        let (sha256, size) = sha256_reader(reader, entry.size, Some(&mut out))
            .map_err(|e| io_violation(&format!("copying {}", entry.source), e))?;
        if sha256 != entry.sha256 || size != entry.size {
            let index = declared
                .iter()
                .find(|d| d.source == entry.source)
                .map_or(0, |d| d.index);
            return Err(violation(
                format!("/execution/supporting_files/{index}/sha256"),
                "tao.supporting_file.sha256_mismatch",
                format!(
                    "{} changed while it was staged: it now hashes to {sha256}; nothing was staged",
                    entry.source
                ),
            ));
        }
        out.sync_all()
            .map_err(|e| io_violation(&format!("syncing {}", entry.destination), e))?;
        if let Some(parent) = dest.parent() {
            dirs.insert(parent.to_path_buf());
        }
        Ok(())
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
                let (mut file, _) = root
                    .open_file(&entry.source)
                    .map_err(|e| open_violation(&d, e))?;
                copy(entry, &mut file)?;
            }
        }
        FileSource::Package(path) => {
            let mut result = Ok(());
            let mut staged = 0usize;
            package::visit(path, limits, &mut |raw, kind, _size, reader| {
                let name = normalize(raw.strip_prefix("./").unwrap_or(raw));
                if let (MemberKind::Regular, Some(entry)) = (kind, by_source.get(&name)) {
                    if result.is_ok() {
                        result = copy(entry, reader);
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
    fs::write(temp.join(MANIFEST), manifest_json(entries))
        .map_err(|e| io_violation("writing the manifest", e))?;
    File::open(temp.join(MANIFEST))
        .and_then(|f| f.sync_all())
        .map_err(|e| io_violation("syncing the manifest", e))?;
    for dir in dirs.iter().rev() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_violation("syncing a directory", e))?;
    }
    Ok(())
}
