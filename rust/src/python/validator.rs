//! The compiled `Validator` as Python holds it, and what its methods return
//! (`Facts`, `Staging`, `BatchOutcome`). Reads documents through `input`, checks them
//! with the GIL released where that pays, and wraps the reports (`report`).

use pyo3::exceptions::{PyFileNotFoundError, PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict};

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::admission::{AdmissionContext, QuotaTable};
use crate::config::CoreConfig;
use crate::facts::Facts;
use crate::files::staging::FileSource;
use crate::kind::Kind;
use crate::report::Report;
use crate::validator::{DeferredQuota, Judgement, Unjudged, Validator};

use super::config::Settings;
use super::guard::guarded;
use super::input::{file_source, parse_kind, GivenDocument};
use super::report::PyReport;

/// The instant `timeout` seconds from now: `None` for no timeout (or one too far to
/// reach), now for a negative one (a deadline already passed).
fn deadline_after(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    let Some(seconds) = timeout else {
        return Ok(None);
    };
    if seconds.is_nan() {
        return Err(PyValueError::new_err(
            "timeout must be a number of seconds, not NaN",
        ));
    }
    Ok(Duration::try_from_secs_f64(seconds.max(0.0))
        .ok()
        .and_then(|d| Instant::now().checked_add(d)))
}

/// Documents larger than this are checked with the GIL released; smaller ones finish
/// faster than a GIL hand-off costs.
const DETACH_ABOVE: usize = 16 * 1024;

/// A compiled validator: built once from an optional configuration, then shared by
/// any number of threads.
#[pyclass(name = "Validator", module = "jobgate._core", frozen, subclass)]
pub struct PyValidator {
    core: Validator,
}

#[pymethods]
impl PyValidator {
    /// `settings` from `jobgate.config` (`Config.core_settings`); without, only the
    /// rules that need no deployment apply. `jobgate.Validator` takes a configuration
    /// in any of its forms and makes the settings.
    #[new]
    #[pyo3(signature = (settings=None))]
    fn new(settings: Option<&Settings>) -> Self {
        let config = settings.map_or_else(CoreConfig::default, |s| s.core.clone());
        PyValidator {
            core: Validator::new(config),
        }
    }

    /// Checks one document: `bytes`, `str` (JSON or YAML) or an already-parsed `dict`;
    /// with `root` or `package`, also its supporting files.
    /// With `timeout` (seconds), reading the package stops with TimeoutError once
    /// that much time has passed.
    #[pyo3(signature = (document, kind=None, root=None, package=None, *, owner=None, project_gpus_in_use=None, project_quota=None, projects=None, home=None, release_gil=false, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        py: Python<'_>,
        document: Option<&Bound<'_, PyAny>>,
        kind: Option<&str>,
        root: Option<PathBuf>,
        package: Option<PathBuf>,
        owner: Option<String>,
        project_gpus_in_use: Option<u64>,
        project_quota: Option<u64>,
        projects: Option<Vec<String>>,
        home: Option<String>,
        release_gil: bool,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyReport>> {
        let kind = parse_kind(kind)?;
        let deadline = deadline_after(timeout)?;
        let admission = AdmissionContext {
            owner,
            project_gpus_in_use,
            project_quota,
            projects,
            home,
            ..Default::default()
        };
        let doc = document
            .filter(|d| !d.is_none())
            .map(GivenDocument::extract)
            .transpose()?;
        if let Some(source) = file_source(&root, &package)? {
            if doc.as_ref().is_some_and(GivenDocument::is_unreadable) {
                return to_python(
                    py,
                    doc.as_ref()
                        .map(|d| d.check(&self.core, kind, &admission))
                        .unwrap_or_else(|| Report::new(kind, vec![])),
                );
            }
            let bytes = doc.as_ref().map(GivenDocument::bytes);
            let verified = py
                .detach(|| {
                    guarded(|| {
                        self.core
                            .check_files(bytes, kind, &admission, source, deadline)
                    })
                })?
                .map_err(|e| match e {
                    Unjudged::Usage(m) => PyFileNotFoundError::new_err(m),
                    Unjudged::DeadlinePassed(m) => PyTimeoutError::new_err(m),
                })?;
            return to_python(py, verified.judgement.report);
        }
        let doc = doc.ok_or_else(|| {
            PyTypeError::new_err("a document is needed unless a package is given")
        })?;
        let bytes = doc.bytes();
        let mut report = if doc.is_unreadable() {
            doc.check(&self.core, kind, &admission)
        } else if release_gil || bytes.len() > DETACH_ABOVE {
            py.detach(|| guarded(|| self.core.check(bytes, kind, &admission)))?
        } else {
            guarded(|| self.core.check(bytes, kind, &admission))?
        };
        if !doc.is_text() {
            report.unlocate();
        }
        to_python(py, report)
    }

    /// Checks one document for admission and reads, from the same parse, what admission
    /// needs of it (`Judgement.facts`): one call per document. The project quota is
    /// left to `Judgement.with_usage`, judged against the usage read when the record is
    /// opened. With `stamp`, the facts hold the document rewritten with `owner`; with
    /// `package`, a spec-bundle's supporting files are verified against it, read until
    /// `timeout` seconds have passed (then TimeoutError).
    #[pyo3(signature = (document, kind=None, package=None, *, owner=None, projects=None, home=None, stamp=false, release_gil=false, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        py: Python<'_>,
        document: &Bound<'_, PyAny>,
        kind: Option<&str>,
        package: Option<PathBuf>,
        owner: Option<String>,
        projects: Option<Vec<String>>,
        home: Option<String>,
        stamp: bool,
        release_gil: bool,
        timeout: Option<f64>,
    ) -> PyResult<PyJudgement> {
        let kind = parse_kind(kind)?;
        let deadline = deadline_after(timeout)?;
        let doc = GivenDocument::extract(document)?;
        let stamp = if stamp { owner.clone() } else { None };
        let admission = AdmissionContext {
            owner,
            projects,
            home,
            defer_quota: true,
            ..Default::default()
        };
        let judgement = if doc.is_unreadable() {
            Judgement {
                report: doc.check(&self.core, kind, &admission),
                facts: None,
                stamped: None,
                quota: None,
            }
        } else if let Some(path) = package {
            let bytes = doc.bytes();
            let source = FileSource::Package(&path);
            py.detach(|| {
                guarded(|| {
                    self.core.judge_files(
                        Some(bytes),
                        kind,
                        &admission,
                        source,
                        deadline,
                        stamp.as_deref(),
                        true,
                    )
                })
            })?
            .map_err(|e| match e {
                Unjudged::Usage(m) => PyFileNotFoundError::new_err(m),
                Unjudged::DeadlinePassed(m) => PyTimeoutError::new_err(m),
            })?
            .judgement
        } else {
            let bytes = doc.bytes();
            let judge = || guarded(|| self.core.judge(bytes, kind, &admission, stamp.as_deref()));
            if release_gil || bytes.len() > DETACH_ABOVE {
                py.detach(judge)?
            } else {
                judge()?
            }
        };
        let mut report = judgement.report;
        let text = doc.is_text();
        if !text {
            report.unlocate();
        }
        let facts = judgement
            .facts
            .map(|f| Py::new(py, PyFacts::new(py, f, judgement.stamped.as_deref())))
            .transpose()?;
        Ok(PyJudgement {
            report: to_python(py, report)?,
            facts,
            // The text is kept only while a quota may still place a violation in it.
            source: (text && judgement.quota.is_some()).then(|| document.clone().unbind()),
            quota: judgement.quota,
        })
    }

    /// What admission needs besides the verdict (project, GPU count, id parts, image),
    /// read from the core's own parse; with `owner`, also the document rewritten with
    /// that owner. `None` when the document cannot be read.
    #[pyo3(signature = (document, kind=None, *, owner=None))]
    fn facts(
        &self,
        py: Python<'_>,
        document: &Bound<'_, PyAny>,
        kind: Option<&str>,
        owner: Option<String>,
    ) -> PyResult<Option<PyFacts>> {
        let kind = parse_kind(kind)?;
        let doc = GivenDocument::extract(document)?;
        let bytes = doc.bytes();
        let found = guarded(|| self.core.facts(bytes, kind, owner.as_deref()))?;
        Ok(found.map(|(f, stamped)| PyFacts::new(py, f, stamped.as_deref())))
    }

    /// Verifies a spec-bundle's supporting files and stages them under
    /// `<job_dir>/inputs/action-helpers/`, atomically. Nothing is written unless the
    /// report passes.
    #[pyo3(signature = (document, job_dir, *, root=None, package=None))]
    fn stage(
        &self,
        py: Python<'_>,
        document: Option<&Bound<'_, PyAny>>,
        job_dir: PathBuf,
        root: Option<PathBuf>,
        package: Option<PathBuf>,
    ) -> PyResult<Staging> {
        let source = file_source(&root, &package)?
            .ok_or_else(|| PyValueError::new_err("staging needs root= or package="))?;
        let doc = document
            .filter(|d| !d.is_none())
            .map(GivenDocument::extract)
            .transpose()?;
        let bytes = doc.as_ref().map(GivenDocument::bytes);
        let (report, staged) = py
            .detach(|| guarded(|| self.core.stage(bytes, source, &job_dir)))?
            .map_err(PyFileNotFoundError::new_err)?;
        Ok(Staging {
            report: Py::new(py, PyReport::wrap(report))?,
            directory: staged
                .as_ref()
                .map(|s| s.directory.to_string_lossy().into_owned()),
            reused: staged.as_ref().is_some_and(|s| s.reused),
            files: staged
                .map(|s| {
                    s.entries
                        .into_iter()
                        .map(|e| (e.source, e.destination, e.sha256, e.size))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// Checks many documents on every core (or `threads` of them) with the GIL released.
    /// With `max_response_bytes`, the largest reports are cut so that all of them
    /// together fit one response of that size (see `fit_reports`).
    #[pyo3(signature = (documents, kind=None, *, threads=None, owner=None, projects=None, max_response_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn check_many(
        &self,
        py: Python<'_>,
        documents: &Bound<'_, PyAny>,
        kind: Option<&str>,
        threads: Option<usize>,
        owner: Option<String>,
        projects: Option<Vec<String>>,
        max_response_bytes: Option<usize>,
    ) -> PyResult<Vec<Py<PyReport>>> {
        let kind = parse_kind(kind)?;
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let docs: Vec<GivenDocument> = documents
            .try_iter()?
            .map(|d| GivenDocument::extract(&d?))
            .collect::<PyResult<_>>()?;
        let admission = AdmissionContext {
            owner,
            projects,
            ..Default::default()
        };
        let mut reports: Vec<Report> = if docs.iter().any(GivenDocument::is_unreadable) {
            docs.iter()
                .map(|d| d.check(&self.core, kind, &admission))
                .collect()
        } else {
            let slices: Vec<&[u8]> = docs.iter().map(GivenDocument::bytes).collect();
            py.detach(|| guarded(|| self.core.check_many(&slices, kind, threads, &admission)))?
        };
        for (report, doc) in reports.iter_mut().zip(&docs) {
            if !doc.is_text() {
                report.unlocate();
            }
        }
        if let Some(budget) = max_response_bytes {
            crate::report::fit(&mut reports, budget);
        }
        reports.into_iter().map(|r| to_python(py, r)).collect()
    }

    /// Reads and checks many document files, named by path, in one call with the GIL
    /// released, on every core (or `threads` of them): no Python object is made for a
    /// file's bytes. A file that is not a regular file, cannot be read or is over
    /// `limits.max_document_bytes` (known from its size, before it is read) gets the
    /// report refusing it. Reports come back in the paths' order.
    #[pyo3(signature = (paths, kind=None, *, threads=None))]
    fn check_paths(
        &self,
        py: Python<'_>,
        paths: Vec<PathBuf>,
        kind: Option<&str>,
        threads: Option<usize>,
    ) -> PyResult<Vec<Py<PyReport>>> {
        let kind = parse_kind(kind)?;
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let admission = AdmissionContext::default();
        let reports =
            py.detach(|| guarded(|| self.core.check_paths(&paths, kind, threads, &admission)))?;
        reports.into_iter().map(|r| to_python(py, r)).collect()
    }

    /// The service's AdmitBatch dry-run path: an encoded `jobgate.v1.AdmitBatchRequest`
    /// in, its encoded `AdmitBatchResponse` out, checked on every core with the GIL
    /// released and no Python object per document. `None` when the request is not a
    /// dry run of raw documents (or not a request at all): the caller's general path
    /// handles those.
    ///
    /// With `quota_default` or `quota_projects`, `forge.quota.project` is judged per
    /// document against `gpus_in_use`, one snapshot for the batch plus the GPUs of the
    /// earlier items that passed (quota consumed in item order): a `{project: GPUs}`
    /// mapping, or a callable returning one, called only when this path answers the
    /// request (so a request it leaves to the caller costs no usage lookup).
    ///
    /// With `single`, the request is an encoded `jobgate.v1.AdmitRequest` and the
    /// response its `AdmitResponse`: Admit's dry-run path, for a request holding one
    /// raw document (`batch_wire::answer_one`); a callable `gpus_in_use` is then
    /// called with the one project the document is charged to, and returns its GPUs; with `unlocated` as well, its report has
    /// no lines and columns (the document is a typed message's JSON form).
    #[pyo3(signature = (request, *, owner=None, max_batch=usize::MAX, threads=None, quota_default=None, quota_projects=None, gpus_in_use=None, projects=None, home=None, max_response_bytes=None, single=false, unlocated=false))]
    #[allow(clippy::too_many_arguments)]
    fn check_batch_request(
        &self,
        py: Python<'_>,
        request: &[u8],
        owner: Option<String>,
        max_batch: usize,
        threads: Option<usize>,
        quota_default: Option<u64>,
        quota_projects: Option<HashMap<String, u64>>,
        gpus_in_use: Option<&Bound<'_, PyAny>>,
        projects: Option<Vec<String>>,
        home: Option<String>,
        max_response_bytes: Option<usize>,
        single: bool,
        unlocated: bool,
    ) -> PyResult<Option<BatchOutcome>> {
        let has_quotas =
            quota_default.is_some() || quota_projects.as_ref().is_some_and(|p| !p.is_empty());
        let mut admission = AdmissionContext {
            owner,
            projects,
            home,
            ..Default::default()
        };
        let answer = |batch: &crate::batch_wire::Batch<'_>, admission: &AdmissionContext| {
            if single {
                crate::batch_wire::answer_one(
                    &self.core,
                    batch,
                    admission,
                    max_response_bytes,
                    unlocated,
                )
            } else {
                Some(crate::batch_wire::answer(
                    &self.core,
                    batch,
                    admission,
                    max_batch,
                    threads,
                    max_response_bytes,
                ))
            }
        };
        let outcome = if has_quotas {
            // The usage is read between decoding and checking, with the GIL held.
            let Some(batch) = py.detach(|| guarded(|| crate::batch_wire::decode(request)))? else {
                return Ok(None);
            };
            // Read only for a request this path answers: one document (only the usage
            // of the project it is charged to), or a batch within `max_batch`.
            let in_use: Option<HashMap<String, u64>> = match gpus_in_use {
                _ if (single && batch.len() != 1) || (!single && batch.len() > max_batch) => None,
                Some(u) if !u.is_none() && !u.is_callable() => Some(u.extract()?),
                Some(u) if u.is_callable() && single => {
                    let (raw, kind) = batch.documents().next().unwrap_or_default();
                    let home = admission.home.as_deref();
                    match crate::batch_wire::charged(&self.core, raw, kind, home) {
                        Some((project, _)) => {
                            let held: u64 = u.call1((project.as_str(),))?.extract()?;
                            Some(HashMap::from([(project, held)]))
                        }
                        None => Some(HashMap::new()),
                    }
                }
                Some(u) if u.is_callable() => Some(u.call0()?.extract()?),
                _ => Some(HashMap::new()),
            };
            if let Some(in_use) = in_use {
                admission.quotas = Some(QuotaTable {
                    default: quota_default,
                    projects: quota_projects.unwrap_or_default(),
                    in_use,
                });
            }
            let Some(outcome) = py.detach(|| guarded(|| answer(&batch, &admission)))? else {
                return Ok(None);
            };
            outcome
        } else {
            // Decoded and checked with the GIL released once; kept for one small
            // document, which takes less time than handing the GIL over would.
            let run = || {
                guarded(|| {
                    crate::batch_wire::decode(request).and_then(|batch| answer(&batch, &admission))
                })
            };
            let outcome = if single && request.len() <= DETACH_ABOVE {
                run()?
            } else {
                py.detach(run)?
            };
            let Some(outcome) = outcome else {
                return Ok(None);
            };
            outcome
        };
        let verdicts = PyDict::new(py);
        for (verdict, n) in outcome.verdicts {
            verdicts.set_item(verdict, n)?;
        }
        let rules = PyDict::new(py);
        for (key, n) in outcome.rules {
            rules.set_item(key, n)?;
        }
        Ok(Some(BatchOutcome {
            documents: outcome.documents,
            response: outcome.response.map(|r| PyBytes::new(py, &r).unbind()),
            verdicts: verdicts.unbind(),
            rules: rules.unbind(),
        }))
    }

    /// How the cache of packages read whole (by the BLAKE3 of their bytes) has
    /// served: `{"hits", "misses", "entries"}` since this validator was built.
    fn package_cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (hits, misses, entries) = self.core.packages.stats();
        let d = PyDict::new(py);
        d.set_item("hits", hits)?;
        d.set_item("misses", misses)?;
        d.set_item("entries", entries)?;
        Ok(d)
    }

    /// How the digest cache of files verified under producer roots has served:
    /// `{"hits", "misses", "entries"}` since this validator was built.
    fn digest_cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (hits, misses, entries) = self.core.digests.stats();
        let d = PyDict::new(py);
        d.set_item("hits", hits)?;
        d.set_item("misses", misses)?;
        d.set_item("entries", entries)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = &self.core.config;
        format!(
            "Validator(catalog={}, max_document_bytes={}, max_depth={})",
            c.catalog.as_ref().map_or(0, |c| c.len()),
            c.limits.max_bytes,
            c.limits.max_depth
        )
    }
}

/// A report as Python holds it. Reports are immutable, so a passing one (no
/// violations) is one shared object per kind: the common case costs no allocation.
fn to_python(py: Python<'_>, report: Report) -> PyResult<Py<PyReport>> {
    static CLEAN: [PyOnceLock<Py<PyReport>>; 5] = [const { PyOnceLock::new() }; 5];
    if !report.violations.is_empty() || report.omitted != Default::default() {
        return Py::new(py, PyReport::wrap(report));
    }
    let slot = report
        .kind
        .and_then(|k| Kind::ALL.iter().position(|&x| x == k))
        .unwrap_or(Kind::ALL.len());
    match CLEAN.get(slot) {
        Some(cell) => cell
            .get_or_try_init(py, || Py::new(py, PyReport::wrap(report)))
            .map(|r| r.clone_ref(py)),
        None => Py::new(py, PyReport::wrap(report)),
    }
}

/// What `Validator.judge` decided of one document for admission: its report, what
/// admission needs of it, and the project quota left to judge.
#[pyclass(name = "Judgement", module = "jobgate._core", frozen)]
pub struct PyJudgement {
    /// The report, without the project quota (`with_usage`).
    #[pyo3(get)]
    report: Py<PyReport>,
    /// What admission needs of the document; `None` when it cannot be read.
    #[pyo3(get)]
    facts: Option<Py<PyFacts>>,
    quota: Option<DeferredQuota>,
    /// The document as given, when it is text and a quota may place a violation in it.
    source: Option<Py<PyAny>>,
}

#[pymethods]
impl PyJudgement {
    /// The report knowing that the project charged holds `gpus_in_use` GPUs under
    /// `quota`: with `forge.quota.project` when the document's GPUs do not fit, else
    /// `report` itself. Reads no document again.
    fn with_usage(&self, py: Python<'_>, gpus_in_use: u64, quota: u64) -> PyResult<Py<PyReport>> {
        let Some(deferred) = &self.quota else {
            return Ok(self.report.clone_ref(py));
        };
        let source = self
            .source
            .as_ref()
            .map(|s| GivenDocument::extract(s.bind(py)))
            .transpose()?;
        match deferred.apply(
            &self.report.get().inner,
            gpus_in_use,
            quota,
            source.as_ref().map(GivenDocument::bytes),
        ) {
            Some(report) => to_python(py, report),
            None => Ok(self.report.clone_ref(py)),
        }
    }

    /// The GPUs the document charges to its project's quota; `None` when the quota
    /// does not apply to it (a kind that launches nothing, a count that cannot be
    /// charged, a project outside the grant).
    #[getter]
    fn gpus_claimed(&self) -> Option<u64> {
        self.quota.as_ref().map(|q| q.claim.gpus)
    }
}

/// What `Validator.facts` read from a document.
#[pyclass(name = "Facts", module = "jobgate._core", frozen, get_all)]
pub struct PyFacts {
    kind: &'static str,
    /// Whether the kind launches a job: only those are admitted.
    launches: bool,
    /// Where an admission of it is charged: `"project"` (`project`, the document's
    /// own), `"home"` (the account's), `None` (it launches nothing).
    charge: Option<&'static str>,
    project: String,
    gpus: u64,
    network_arch: String,
    action: String,
    image: String,
    upload_excludes: Vec<String>,
    /// The document with the owner stamped in, when an owner was given.
    stamped: Option<Py<PyBytes>>,
}

impl PyFacts {
    fn new(py: Python<'_>, f: Facts, stamped: Option<&[u8]>) -> PyFacts {
        PyFacts {
            kind: f.kind.map_or("unknown", Kind::as_str),
            launches: f.kind.is_some_and(Kind::launches),
            charge: f.kind.and_then(|k| k.charge().as_str()),
            project: f.project,
            gpus: f.gpus,
            network_arch: f.network_arch,
            action: f.action,
            image: f.image,
            upload_excludes: f.upload_excludes,
            stamped: stamped.map(|b| PyBytes::new(py, b).unbind()),
        }
    }
}

/// What `Validator.check_batch_request` answered.
#[pyclass(module = "jobgate._core", frozen, get_all)]
pub struct BatchOutcome {
    /// How many documents the request held.
    documents: usize,
    /// The encoded `AdmitBatchResponse` (`AdmitResponse` with `single`); `None` when
    /// the batch was over `max_batch`.
    response: Option<Py<PyBytes>>,
    /// `{verdict: reports}`.
    verdicts: Py<PyDict>,
    /// `{(rule, severity): violations}`.
    rules: Py<PyDict>,
}

/// The outcome of `Validator.stage`: the verification report and, when it passed,
/// where the files were staged.
#[pyclass(module = "jobgate._core", frozen)]
pub struct Staging {
    #[pyo3(get)]
    report: Py<PyReport>,
    /// The staging directory, or `None` when nothing was staged.
    #[pyo3(get)]
    directory: Option<String>,
    /// Whether an identical existing staging was reused rather than written.
    #[pyo3(get)]
    reused: bool,
    /// `(source, destination, sha256, size)` per staged file.
    #[pyo3(get)]
    files: Vec<(String, String, String, u64)>,
}

#[pymethods]
impl Staging {
    #[getter]
    fn ok(&self) -> bool {
        self.report.get().inner.ok() && self.directory.is_some()
    }

    fn __repr__(&self) -> String {
        format!(
            "Staging(ok={}, directory={:?}, reused={}, files={})",
            self.report.get().inner.ok() && self.directory.is_some(),
            self.directory,
            self.reused,
            self.files.len()
        )
    }
}
