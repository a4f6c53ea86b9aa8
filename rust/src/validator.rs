//! The compiled validator: one configuration, many documents, any number of threads.

use std::collections::HashMap;
use std::io::Seek;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use rayon::prelude::*;

use crate::admission::Admission;
use crate::config::CoreConfig;
use crate::document;
use crate::files::cache::DigestCache;
use crate::files::package_cache::{self, PackageCache};
use crate::files::staging::{self, FileSource, Staged};
use crate::files::{self, archive, package, root, Declared, Found};
use crate::kind::Kind;
use crate::kinds;
use crate::refusal;
use crate::report::{Collected, Report, Violation};
use crate::rules::Rule;
use crate::schema::Ctx;

/// Immutable once built, so one validator is shared freely across threads.
#[derive(Clone, Debug, Default)]
pub struct Validator {
    pub config: CoreConfig,
    /// Digests of files verified under producer roots (see `files::cache`).
    pub digests: Arc<DigestCache>,
    /// Packages already read, by the BLAKE3 of their bytes (see `files::package_cache`).
    pub packages: Arc<PackageCache>,
}

impl Validator {
    pub fn new(config: CoreConfig) -> Self {
        Validator {
            packages: Arc::new(PackageCache::new(config.package.cache_bytes)),
            config,
            digests: Arc::default(),
        }
    }

    /// Checks one document (JSON or YAML bytes); `kind` overrides detection.
    pub fn check(&self, input: &[u8], kind: Option<Kind>, admission: &Admission) -> Report {
        let enforcement = &self.config.enforcement;
        let result = document::with_document(input, &self.config.limits, |doc| {
            let mut ctx = Ctx::with_limits(self.config.report);
            let kind = self.apply_rules(doc, kind, admission, &mut ctx);
            // The project only when a project sets its own severities.
            let project = (!enforcement.projects.is_empty())
                .then(|| crate::facts::facts(doc.root, kind).project);
            (kind, ctx.out, project)
        });
        match result {
            Ok((kind, collected, project)) => {
                let mut report = collected.into_report(kind);
                if !enforcement.is_empty() {
                    report.enforce(enforcement, project.as_deref());
                }
                report.locate(input);
                report
            }
            Err(violation) => {
                let mut report = Report::new(kind, vec![violation]);
                report.locate_refusal(input);
                report
            }
        }
    }

    /// What admission needs besides the verdict, and (with `owner`) the document
    /// rewritten with that owner; `None` when the document cannot be read.
    pub fn facts(
        &self,
        input: &[u8],
        kind: Option<Kind>,
        owner: Option<&str>,
    ) -> Option<(crate::facts::Facts, Option<Vec<u8>>)> {
        document::with_document(input, &self.config.limits, |doc| {
            (
                crate::facts::facts(doc.root, kind),
                owner.map(|o| crate::facts::stamp_owner(doc.root, o)),
            )
        })
        .ok()
    }

    /// Checks a spec-bundle together with its supporting files, from a producer root or
    /// a package (whose own bundle is checked when `input` is `None`), reading the
    /// package until `deadline` at most. `Err` when no verdict can be given: the root
    /// cannot be opened (a usage error) or the deadline passed.
    pub fn check_files(
        &self,
        input: Option<&[u8]>,
        kind: Option<Kind>,
        admission: &Admission,
        source: FileSource<'_>,
        deadline: Option<Instant>,
    ) -> Result<Verified, Unjudged> {
        match source {
            FileSource::Root(dir) => {
                let input = input.ok_or_else(|| {
                    Unjudged::Usage("a document is needed to verify against a producer root".into())
                })?;
                let dir_handle = root::RootDir::open(dir).map_err(|e| {
                    Unjudged::Usage(format!(
                        "the producer root {} cannot be opened: {e}",
                        dir.display()
                    ))
                })?;
                Ok(self.verify_with(input, kind, admission, |declared| {
                    root::verify(
                        &dir_handle,
                        declared,
                        self.config.package.max_bytes,
                        Some(&self.digests),
                    )
                }))
            }
            FileSource::Package(path) => {
                let contents = match self.read_package(path, deadline) {
                    Ok(c) => c,
                    Err(archive::PackageError::Deadline(why)) => {
                        return Err(Unjudged::DeadlinePassed(why))
                    }
                    Err(e) => return Ok(Verified::refused(kind, e.into_violation())),
                };
                let document = match (input, &contents.bundle) {
                    (Some(doc), _) => doc,
                    (None, Some((_, doc))) => doc.as_slice(),
                    (None, None) => {
                        let message = format!(
                            "the package {} holds no bundle.json or bundle.yaml at its root",
                            path.display()
                        );
                        return Ok(Verified::refused(kind, refusal::unreadable(message)));
                    }
                };
                let shipped = match (input, &contents.bundle) {
                    (Some(doc), Some((name, own))) => self.other_bundle(doc, name, own),
                    _ => None,
                };
                Ok(self.verify_with(document, kind, admission, |declared| {
                    let (mut violations, found) = package::compare_members(&contents, declared);
                    violations.extend(shipped);
                    (violations, found)
                }))
            }
        }
    }

    /// What the package at `path` holds: from the cache when a package with the same
    /// bytes was read whole before, else read and remembered.
    fn read_package(
        &self,
        path: &std::path::Path,
        deadline: Option<Instant>,
    ) -> Result<Arc<package::Contents>, archive::PackageError> {
        // One open: the bytes hashed for the key are the bytes read, from one inode; a
        // file written to meanwhile (its stat moves) is read but not remembered.
        let mut file = archive::open_regular(path)?;
        let identity = |f: &std::fs::File| {
            rustix::fs::fstat(f).ok().map(|s| {
                (
                    s.st_size,
                    s.st_mtime,
                    s.st_mtime_nsec,
                    s.st_ctime,
                    s.st_ctime_nsec,
                )
            })
        };
        let before = identity(&file);
        // With the cache off, the bytes are not hashed for a key no one keeps.
        let key = if self.packages.enabled() {
            package_cache::key_of(&mut file).ok()
        } else {
            None
        };
        if let Some(hit) = key.as_ref().and_then(|k| self.packages.get(k)) {
            return Ok(hit);
        }
        let unread = |e: std::io::Error| archive::read_error(path, e);
        file.rewind().map_err(unread)?;
        let probe = file.try_clone().map_err(unread)?;
        let contents = Arc::new(package::read_file(
            path,
            file,
            &self.config.package,
            deadline,
        )?);
        if let (Some(key), true) = (key, before.is_some() && before == identity(&probe)) {
            self.packages.put(key, Arc::clone(&contents));
        }
        Ok(contents)
    }

    /// A package's own bundle document, when it is not the bundle being checked with
    /// it: whoever extracts the package gets that one, so it rides along undeclared.
    /// Compared as read (key order and formatting aside).
    fn other_bundle(&self, checked: &[u8], name: &str, own: &[u8]) -> Option<Violation> {
        let read = |bytes: &[u8]| {
            document::reading(bytes, &self.config.limits)
                .ok()
                .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
        };
        let same = matches!((read(checked), read(own)), (Some(a), Some(b)) if a == b);
        (!same).then(|| Violation::new(
            Rule::TaoSupportingFileUndeclared,
            "/execution/supporting_files".into(),
            format!("the package holds its own {name}, which is not the bundle checked with it; whoever extracts the package gets that one, so ship the package with the bundle it holds"),
        ))
    }

    /// The document's report plus what `verify` finds of its declared files (only for
    /// spec-bundles).
    fn verify_with(
        &self,
        input: &[u8],
        kind: Option<Kind>,
        admission: &Admission,
        verify: impl FnOnce(&[Declared]) -> (Vec<Violation>, Vec<Option<Found>>),
    ) -> Verified {
        let (kind, mut collected, declared) = self.check_declared(input, kind, admission);
        let mut found = Vec::new();
        if kind == Some(Kind::SpecBundle) {
            let (v, f) = verify(&declared);
            collected.extend(v);
            found = f;
        }
        let mut report = collected.into_report(kind);
        if !self.config.enforcement.is_empty() {
            report.enforce(&self.config.enforcement, None); // bundles name no project
        }
        report.locate(input);
        Verified {
            report,
            declared,
            found,
        }
    }

    /// Verifies, then stages the closed set under `job_dir` (SPEC §3). Nothing is
    /// written unless verification passes.
    pub fn stage(
        &self,
        input: Option<&[u8]>,
        source: FileSource<'_>,
        job_dir: &std::path::Path,
    ) -> Result<(Report, Option<Staged>), String> {
        let verified = self
            .check_files(
                input,
                Some(Kind::SpecBundle),
                &Admission::default(),
                source,
                None,
            )
            .map_err(Unjudged::into_message)?;
        if !verified.report.ok() {
            return Ok((verified.report, None));
        }
        match staging::stage(
            &verified.declared,
            &verified.found,
            source,
            job_dir,
            &self.config.package,
        ) {
            Ok(staged) => Ok((verified.report, Some(staged))),
            Err(v) => {
                let mut violations = verified.report.violations;
                violations.push(v);
                Ok((Report::new(verified.report.kind, violations), None))
            }
        }
    }

    /// Every document rule: duplicate keys, then the kind's rules. Returns the kind.
    fn apply_rules<'i>(
        &self,
        doc: document::Parsed<'_, 'i>,
        kind: Option<Kind>,
        admission: &Admission,
        ctx: &mut Ctx<'i>,
    ) -> Option<Kind> {
        document::duplicate_keys(doc, &mut ctx.out);
        let root = doc.root;
        let kind = kind.or_else(|| Kind::detect(root));
        match kind {
            Some(k) => kinds::check(k, root, &self.config, admission, ctx),
            None => ctx.out.push(unknown_kind()),
        }
        kind
    }

    /// The document's own report, its kind, and its well-formed supporting-file entries.
    fn check_declared(
        &self,
        input: &[u8],
        kind: Option<Kind>,
        admission: &Admission,
    ) -> (Option<Kind>, Collected, Vec<Declared>) {
        let result = document::with_document(input, &self.config.limits, |doc| {
            let mut ctx = Ctx::with_limits(self.config.report);
            let kind = self.apply_rules(doc, kind, admission, &mut ctx);
            let declared = if kind == Some(Kind::SpecBundle) {
                files::declared(doc.root)
            } else {
                Vec::new()
            };
            (kind, ctx.out, declared)
        });
        match result {
            Ok(r) => r,
            Err(v) => {
                let mut collected = Collected::new(self.config.report);
                collected.push(v);
                (kind, collected, Vec::new())
            }
        }
    }

    /// Checks many documents in parallel; `threads` of `None` uses every core.
    pub fn check_many<D: AsRef<[u8]> + Sync>(
        &self,
        inputs: &[D],
        kind: Option<Kind>,
        threads: Option<usize>,
        admission: &Admission,
    ) -> Vec<Report> {
        self.check_each(inputs, threads, admission, |d| (d.as_ref(), kind))
    }

    /// Checks many items in parallel, each with its own kind: `document` says which
    /// bytes and kind an item is. Reports come back in the items' order.
    pub fn check_each<T: Sync>(
        &self,
        items: &[T],
        threads: Option<usize>,
        admission: &Admission,
        document: impl Fn(&T) -> (&[u8], Option<Kind>) + Sync,
    ) -> Vec<Report> {
        let check = |item: &T| {
            let (bytes, kind) = document(item);
            self.check(bytes, kind, admission)
        };
        // Documents go to threads in runs of a few: one document takes microseconds,
        // about what handing a single item to another thread costs.
        const RUN: usize = 32;
        match threads {
            Some(1) => items.iter().map(check).collect(),
            Some(n) => pool(n).install(|| items.par_iter().with_min_len(RUN).map(check).collect()),
            None => items.par_iter().with_min_len(RUN).map(check).collect(),
        }
    }
}

/// Why supporting files got no verdict.
#[derive(Debug)]
pub enum Unjudged {
    /// Asked wrongly: no document for a root, a root that cannot be opened.
    Usage(String),
    /// The caller's deadline passed while the package was read; reading stopped.
    DeadlinePassed(String),
}

impl Unjudged {
    pub fn into_message(self) -> String {
        match self {
            Unjudged::Usage(m) | Unjudged::DeadlinePassed(m) => m,
        }
    }
}

/// A document's report with what its supporting files were found to be.
pub struct Verified {
    pub report: Report,
    pub declared: Vec<Declared>,
    /// Per declared entry: the digest and size found, where it could be read.
    pub found: Vec<Option<Found>>,
}

impl Verified {
    /// A document refused before its files could be looked at.
    fn refused(kind: Option<Kind>, violation: Violation) -> Verified {
        Verified {
            report: Report::new(kind, vec![violation]),
            declared: Vec::new(),
            found: Vec::new(),
        }
    }
}

fn unknown_kind() -> Violation {
    Violation::new(
        Rule::KindUnknown,
        String::new(),
        "cannot tell which kind of document this is: no apiVersion (jobspec), transitions (job_record), experiment_id or best (best_rec), or mode, command or network_arch (spec_bundle); pass the kind explicitly".into(),
    )
}

/// Thread pools of a given size, built once and kept.
fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pools
        .entry(threads)
        .or_insert_with(|| {
            Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("jobgate-check-{i}"))
                    .build()
                    .unwrap_or_else(|_| {
                        rayon::ThreadPoolBuilder::new()
                            .build()
                            .expect("a rayon thread pool")
                    }),
            )
        })
        .clone()
}
