//! The compiled validator: one configuration, many documents, any number of threads.

use std::io::Seek;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::admission::AdmissionContext;
use crate::collect::Ctx;
use crate::config::CoreConfig;
use crate::document;
use crate::facts::Facts;
use crate::files::cache::{DigestCache, Key as StatKey};
use crate::files::package_cache::{self, PackageCache};
use crate::files::staging::{self, FileSource, Staged};
use crate::files::{self, archive, package, root, Declared, Found};
use crate::kind::{Charge, Kind};
use crate::kinds;
use crate::limits::ReportLimits;
use crate::parallel::{pool, shared};
use crate::pointer::ptr;
use crate::quota::Claim;
use crate::refusal;
use crate::report::{Collected, Report, Violation};
use crate::rules::{Rule, Severity};

/// Its configuration is fixed once built and its caches lock what they share, so one
/// validator is shared freely across threads.
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
    pub fn check(&self, input: &[u8], kind: Option<Kind>, admission: &AdmissionContext) -> Report {
        let read = self.read(input, kind, admission, Wants::default());
        self.finish(read, input).report
    }

    /// Checks one document and reads, from the same parse, what admission needs of it
    /// (`Facts`), with `stamp` the document rewritten with that owner, and with
    /// `AdmissionContext::defer_quota` what the launch charges to its project (`Judgement::with_usage`).
    pub fn judge(
        &self,
        input: &[u8],
        kind: Option<Kind>,
        admission: &AdmissionContext,
        stamp: Option<&str>,
    ) -> Judgement {
        let wants = Wants {
            facts: true,
            stamp,
            declared: false,
        };
        let read = self.read(input, kind, admission, wants);
        self.finish(read, input)
    }

    /// What admission needs besides the verdict, and (with `owner`) the document
    /// rewritten with that owner; `None` when the document cannot be read.
    pub fn facts(
        &self,
        input: &[u8],
        kind: Option<Kind>,
        owner: Option<&str>,
    ) -> Option<(Facts, Option<Vec<u8>>)> {
        document::with_document(input, &self.config.limits, |doc| {
            (
                crate::kinds::facts(doc.root, kind),
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
        admission: &AdmissionContext,
        source: FileSource<'_>,
        deadline: Option<Instant>,
    ) -> Result<Verified, Unjudged> {
        self.judge_files(input, kind, admission, source, deadline, None, false)
    }

    /// `check_files`, and as `judge` does, what admission needs of the document
    /// (`facts`), read from the same parse; with `stamp`, rewritten with that owner.
    #[allow(clippy::too_many_arguments)]
    pub fn judge_files(
        &self,
        input: Option<&[u8]>,
        kind: Option<Kind>,
        admission: &AdmissionContext,
        source: FileSource<'_>,
        deadline: Option<Instant>,
        stamp: Option<&str>,
        facts: bool,
    ) -> Result<Verified, Unjudged> {
        let wants = Wants {
            facts,
            stamp,
            declared: true,
        };
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
                Ok(self.verify_with(input, kind, admission, wants, |declared| {
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
                Ok(
                    self.verify_with(document, kind, admission, wants, |declared| {
                        let (mut violations, found) = package::compare_members(&contents, declared);
                        violations.extend(shipped);
                        (violations, found)
                    }),
                )
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
        let identity = |f: &std::fs::File| rustix::fs::fstat(f).ok().map(|s| StatKey::of(&s));
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
        admission: &AdmissionContext,
        wants: Wants<'_>,
        verify: impl FnOnce(&[Declared]) -> (Vec<Violation>, Vec<Option<Found>>),
    ) -> Verified {
        let mut read = self.read(input, kind, admission, wants);
        let declared = std::mem::take(&mut read.declared);
        let mut found = Vec::new();
        if read.kind == Some(Kind::SpecBundle) {
            let (v, f) = verify(&declared);
            read.collected.extend(v);
            found = f;
        }
        Verified {
            judgement: self.finish(read, input),
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
                &AdmissionContext::default(),
                source,
                None,
            )
            .map_err(Unjudged::into_message)?;
        let report = verified.judgement.report;
        if !report.ok() {
            return Ok((report, None));
        }
        match staging::stage(
            &verified.declared,
            &verified.found,
            source,
            job_dir,
            &self.config.package,
        ) {
            Ok(staged) => Ok((report, Some(staged))),
            Err(v) => {
                let mut violations = report.violations;
                violations.push(v);
                Ok((Report::new(report.kind, violations), None))
            }
        }
    }

    /// Every document rule: duplicate keys, then the kind's rules. Returns the kind.
    fn apply_rules<'i>(
        &self,
        doc: document::Parsed<'_, 'i>,
        kind: Option<Kind>,
        admission: &AdmissionContext,
        ctx: &mut Ctx<'i>,
    ) -> Option<Kind> {
        document::duplicate_keys(doc, ctx);
        let root = doc.root;
        let kind = kind.or_else(|| Kind::detect(root));
        match kind {
            Some(k) => kinds::check(k, root, &self.config, admission, ctx),
            None => ctx.report(Rule::KindUnknown, ptr![], || {
                format!(
                    "cannot tell which kind of document this is: {}; pass the kind explicitly",
                    Kind::detection()
                )
            }),
        }
        kind
    }

    /// One parse of the document: its rules applied, and what `wants` asks besides.
    fn read(
        &self,
        input: &[u8],
        kind: Option<Kind>,
        admission: &AdmissionContext,
        wants: Wants<'_>,
    ) -> Read {
        let enforcement = &self.config.enforcement;
        let result = document::with_document(input, &self.config.limits, |doc| {
            let mut ctx = Ctx::with_limits(self.config.report);
            let kind = self.apply_rules(doc, kind, admission, &mut ctx);
            let declared = if wants.declared && kind == Some(Kind::SpecBundle) {
                files::declared(doc.root)
            } else {
                Vec::new()
            };
            // The project only when asked, or when a project sets its own severities.
            let facts = (wants.facts || !enforcement.projects.is_empty())
                .then(|| crate::kinds::facts(doc.root, kind));
            let stamped = wants.stamp.map(|o| crate::facts::stamp_owner(doc.root, o));
            Read {
                kind,
                collected: ctx.out,
                declared,
                facts,
                stamped,
                claim: ctx.claim,
                refused: false,
            }
        });
        result.unwrap_or_else(|violation| {
            let mut collected = Collected::new(self.config.report);
            collected.push(violation);
            Read {
                kind,
                collected,
                declared: Vec::new(),
                facts: None,
                stamped: None,
                claim: None,
                refused: true,
            }
        })
    }

    /// The report of what `read` found, under the deployment's severities and placed
    /// in `input`.
    fn finish(&self, mut read: Read, input: &[u8]) -> Judgement {
        let enforcement = &self.config.enforcement;
        let quota = read.claim.take().map(|claim| {
            // A JobSpec's project may set its own severities; a bundle names none.
            let project = matches!(claim.kind.charge(), Charge::OwnProject { .. })
                .then_some(claim.project.as_deref())
                .flatten();
            DeferredQuota {
                severity: enforcement
                    .level(Rule::ForgeQuotaProject, project)
                    .unwrap_or(Rule::ForgeQuotaProject.severity()),
                limits: self.config.report,
                claim,
            }
        });
        let mut report = read.collected.into_report(read.kind);
        if read.refused {
            report.locate_refusal(input);
        } else {
            if !enforcement.is_empty() {
                // Bundles name no project: the deployment's severities alone apply.
                let project = read
                    .facts
                    .as_ref()
                    .filter(|f| {
                        f.kind
                            .is_some_and(|k| matches!(k.charge(), Charge::OwnProject { .. }))
                            && !enforcement.projects.is_empty()
                    })
                    .map(|f| f.project.as_str());
                report.enforce(enforcement, project);
            }
            report.locate(input);
        }
        Judgement {
            report,
            facts: read.facts,
            stamped: read.stamped,
            quota,
        }
    }

    /// Checks many documents in parallel; `threads` of `None` uses every core.
    pub fn check_many<D: AsRef<[u8]> + Sync>(
        &self,
        inputs: &[D],
        kind: Option<Kind>,
        threads: Option<usize>,
        admission: &AdmissionContext,
    ) -> Vec<Report> {
        self.check_each(inputs, threads, admission, |d| (d.as_ref(), kind))
    }

    /// Reads and checks many document files in parallel (`threads` as `check_many`),
    /// one buffer per thread: a file that cannot be read, or is over
    /// `limits.max_bytes`, gets the report refusing it (`files::documents::read`).
    /// Reports come back in the paths' order.
    pub fn check_paths<P: AsRef<Path> + Sync>(
        &self,
        paths: &[P],
        kind: Option<Kind>,
        threads: Option<usize>,
        admission: &AdmissionContext,
    ) -> Vec<Report> {
        let limit = self.config.limits.max_bytes;
        let check = |buffer: &mut Vec<u8>, path: &P| match files::documents::read(
            path.as_ref(),
            limit,
            buffer,
        ) {
            Ok(()) => self.check(buffer, kind, admission),
            Err(refusal) => Report::new(kind, vec![refusal]),
        };
        // Files go to threads in runs of a few, as documents do in `check_each`.
        const RUN: usize = 16;
        match threads {
            Some(1) => {
                let mut buffer = Vec::new();
                paths.iter().map(|p| check(&mut buffer, p)).collect()
            }
            Some(n) => pool(n).install(|| {
                paths
                    .par_iter()
                    .with_min_len(RUN)
                    .map_init(Vec::new, check)
                    .collect()
            }),
            None => paths
                .par_iter()
                .with_min_len(RUN)
                .map_init(Vec::new, check)
                .collect(),
        }
    }

    /// Checks many items in parallel, each with its own kind: `document` says which
    /// bytes and kind an item is. Reports come back in the items' order. The calling
    /// thread checks too (`shared`).
    pub fn check_each<T: Sync>(
        &self,
        items: &[T],
        threads: Option<usize>,
        admission: &AdmissionContext,
        document: impl Fn(&T) -> (&[u8], Option<Kind>) + Sync,
    ) -> Vec<Report> {
        // Documents go to threads in runs of a few: one document takes microseconds,
        // about what handing a single item to another thread costs.
        const RUN: usize = 32;
        shared(items, RUN, threads, |item| {
            let (bytes, kind) = document(item);
            self.check(bytes, kind, admission)
        })
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

/// What a reading of one document is asked for besides its report.
#[derive(Clone, Copy, Default)]
struct Wants<'a> {
    /// What admission needs of it (`Facts`).
    facts: bool,
    /// The document rewritten with this owner.
    stamp: Option<&'a str>,
    /// A spec-bundle's well-formed supporting-file entries.
    declared: bool,
}

/// What one parse of a document found (`Validator::read`).
struct Read {
    kind: Option<Kind>,
    collected: Collected,
    declared: Vec<Declared>,
    facts: Option<Facts>,
    stamped: Option<Vec<u8>>,
    claim: Option<Claim>,
    /// Refused before its rules could run (unreadable, too large, too deep).
    refused: bool,
}

/// A document's report and what admission needs of it, from one reading.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// With `AdmissionContext::defer_quota`, without the project quota (`quota`).
    pub report: Report,
    /// What admission needs of the document; `None` when it could not be read (or
    /// was not asked for).
    pub facts: Option<Facts>,
    /// The document rewritten with the owner asked for.
    pub stamped: Option<Vec<u8>>,
    /// The project quota, when the rules reached it and `AdmissionContext::defer_quota` left
    /// it to be judged against usage read later.
    pub quota: Option<DeferredQuota>,
}

/// The project quota of one judged document, left to be judged once the usage of
/// its project is read (in the transaction that opens its record).
#[derive(Clone, Debug)]
pub struct DeferredQuota {
    pub claim: Claim,
    limits: ReportLimits,
    /// `forge.quota.project`'s severity under the deployment's `[rules]`.
    severity: Severity,
}

impl DeferredQuota {
    /// `report` as the rules would have made it knowing that the charged project
    /// holds `in_use` GPUs under `quota`: with `forge.quota.project` when the claim
    /// does not fit; `None` when it fits (the report stands as judged). `source` is
    /// the text the report was made from, to place the violation (`None` for a
    /// document that was not text).
    pub fn apply(
        &self,
        report: &Report,
        in_use: u64,
        quota: u64,
        source: Option<&[u8]>,
    ) -> Option<Report> {
        let mut violation = self.claim.judge(in_use, quota)?;
        if violation.severity != self.severity {
            violation.default = Some(violation.severity);
            violation.severity = self.severity;
        }
        let mut report = report.clone();
        report.add(violation, self.limits, source);
        Some(report)
    }
}

/// A document's report with what its supporting files were found to be.
pub struct Verified {
    /// The report, and what admission needs of the document when asked.
    pub judgement: Judgement,
    pub declared: Vec<Declared>,
    /// Per declared entry: the digest and size found, where it could be read.
    pub found: Vec<Option<Found>>,
}

impl Verified {
    /// A document refused before its files could be looked at.
    fn refused(kind: Option<Kind>, violation: Violation) -> Verified {
        Verified {
            judgement: Judgement {
                report: Report::new(kind, vec![violation]),
                facts: None,
                stamped: None,
                quota: None,
            },
            declared: Vec::new(),
            found: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_each_answers_as_check_does() {
        let v = Validator::default();
        let docs: Vec<&[u8]> = (0..100)
            .map(|i| match i % 3 {
                0 => &b"{"[..],
                1 => &b"[]"[..],
                _ => &b"{\"apiVersion\": \"forge/v2\"}"[..],
            })
            .collect();
        let a = AdmissionContext::default();
        let each = v.check_many(&docs, None, None, &a);
        let one_by_one: Vec<Report> = docs.iter().map(|d| v.check(d, None, &a)).collect();
        assert_eq!(each.len(), 100);
        for (x, y) in each.iter().zip(&one_by_one) {
            assert_eq!(format!("{x:?}"), format!("{y:?}"));
        }
    }
}
