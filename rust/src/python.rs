//! The Python boundary: `jobgate._core`. Extracts documents, releases the GIL for
//! the work, and wraps reports. Python exceptions are made here and nowhere else;
//! bad documents are reports, never exceptions.

use pyo3::exceptions::{PyFileNotFoundError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString};

use std::collections::HashMap;
use std::path::PathBuf;

use crate::config::{CatalogEntry, CoreConfig, Observability};
use crate::document::{DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH};
use crate::files::staging::FileSource;
use crate::kinds::{Admission, Kind, QuotaTable};
use crate::report::{Report as CoreReport, Severity, Violation as CoreViolation};
use crate::validator::Validator as CoreValidator;

/// Runs `f`, turning a panic (a bug in jobgate) into a Python RuntimeError, so that
/// no panic crosses into Python and a document is never admitted by accident.
fn guarded<T>(f: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        pyo3::exceptions::PyRuntimeError::new_err(format!(
            "jobgate could not check this document (internal error: {what}); it was not admitted. Please report it with the document."
        ))
    })
}

/// Documents larger than this are checked with the GIL released; smaller ones finish
/// faster than a GIL hand-off costs.
const DETACH_ABOVE: usize = 16 * 1024;

#[pyclass(module = "jobgate._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Violation {
    #[pyo3(get)]
    rule: &'static str,
    #[pyo3(get)]
    field: String,
    #[pyo3(get)]
    message: String,
    #[pyo3(get)]
    severity: &'static str,
}

impl From<&CoreViolation> for Violation {
    fn from(v: &CoreViolation) -> Self {
        Violation {
            rule: v.rule,
            field: v.field.clone(),
            message: v.message.clone(),
            severity: v.severity.as_str(),
        }
    }
}

#[pymethods]
impl Violation {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("rule", self.rule)?;
        d.set_item("field", &self.field)?;
        d.set_item("message", &self.message)?;
        d.set_item("severity", self.severity)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Violation(rule={:?}, field={:?}, severity={:?}, message={:?})",
            self.rule, self.field, self.severity, self.message
        )
    }
}

#[pyclass(module = "jobgate._core", frozen)]
pub struct Report {
    inner: CoreReport,
    violations: PyOnceLock<Py<PyList>>,
}

impl Report {
    fn wrap(inner: CoreReport) -> Self {
        Report {
            inner,
            violations: PyOnceLock::new(),
        }
    }
}

#[pymethods]
impl Report {
    /// `jobspec`, `spec_bundle`, `job_record`, `best_rec`, or `unknown`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind_name()
    }

    /// `pass` when no violation is an error, else `fail`.
    #[getter]
    fn verdict(&self) -> &'static str {
        self.inner.verdict()
    }

    #[getter]
    fn ok(&self) -> bool {
        self.inner.ok()
    }

    #[getter]
    fn errors(&self) -> usize {
        self.inner.errors()
    }

    #[getter]
    fn warnings(&self) -> usize {
        self.inner.warnings()
    }

    #[getter]
    fn violations<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = self
            .violations
            .get_or_try_init(py, || -> PyResult<Py<PyList>> {
                let items: Vec<Violation> =
                    self.inner.violations.iter().map(Violation::from).collect();
                Ok(PyList::new(py, items)?.unbind())
            })?;
        Ok(list.bind(py).clone())
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("kind", self.inner.kind_name())?;
        d.set_item("verdict", self.inner.verdict())?;
        let vs = PyList::empty(py);
        for v in &self.inner.violations {
            vs.append(Violation::from(v).to_dict(py)?)?;
        }
        d.set_item("violations", vs)?;
        Ok(d)
    }

    /// The report as JSON text, in the shape of the CLI's `results` entries.
    fn to_json(&self) -> String {
        self.inner.to_json_value().to_string()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Report>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __bool__(&self) -> bool {
        self.inner.ok()
    }

    fn __repr__(&self) -> String {
        format!(
            "Report(kind={:?}, verdict={:?}, errors={}, warnings={})",
            self.inner.kind_name(),
            self.inner.verdict(),
            self.inner.errors(),
            self.inner.warnings()
        )
    }
}

/// A compiled validator: built once from an optional configuration, then shared by
/// any number of threads.
#[pyclass(module = "jobgate._core", frozen)]
pub struct Validator {
    core: CoreValidator,
}

#[pymethods]
impl Validator {
    #[new]
    #[pyo3(signature = (config=None))]
    fn new(py: Python<'_>, config: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let core = match config {
            None => CoreConfig::default(),
            Some(c) if c.is_none() => CoreConfig::default(),
            Some(c) => {
                // jobgate.config validates (pydantic) and normalises; errors name the file and key.
                let settings = py
                    .import("jobgate.config")?
                    .call_method1("core_settings", (c,))?;
                core_config(settings.cast::<PyDict>()?)?
            }
        };
        Ok(Validator {
            core: CoreValidator::new(core),
        })
    }

    /// Checks one document: `bytes`, `str` (JSON or YAML) or an already-parsed `dict`;
    /// with `root` or `package`, also its supporting files.
    #[pyo3(signature = (document, kind=None, root=None, package=None, *, owner=None, project_gpus_in_use=None, project_quota=None, projects=None, release_gil=false))]
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
        release_gil: bool,
    ) -> PyResult<Report> {
        let kind = parse_kind(kind)?;
        let admission = Admission {
            owner,
            project_gpus_in_use,
            project_quota,
            quotas: None,
            projects,
        };
        let doc = document
            .filter(|d| !d.is_none())
            .map(Document::extract)
            .transpose()?;
        if let Some(source) = file_source(&root, &package)? {
            if let Some(Document::Unreadable(_)) = &doc {
                return Ok(Report::wrap(
                    doc.as_ref()
                        .map(|d| d.check(&self.core, kind, &admission))
                        .unwrap_or_else(|| CoreReport::new(kind, vec![])),
                ));
            }
            let bytes = doc.as_ref().map(Document::bytes);
            let verified = py
                .detach(|| guarded(|| self.core.check_files(bytes, kind, &admission, source)))?
                .map_err(PyFileNotFoundError::new_err)?;
            return Ok(Report::wrap(verified.report));
        }
        let doc = doc.ok_or_else(|| {
            PyTypeError::new_err("a document is needed unless a package is given")
        })?;
        let bytes = doc.bytes();
        let report = match &doc {
            Document::Unreadable(_) => doc.check(&self.core, kind, &admission),
            _ if release_gil || bytes.len() > DETACH_ABOVE => {
                py.detach(|| guarded(|| self.core.check(bytes, kind, &admission)))?
            }
            _ => guarded(|| self.core.check(bytes, kind, &admission))?,
        };
        Ok(Report::wrap(report))
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
    ) -> PyResult<Option<Facts>> {
        let kind = parse_kind(kind)?;
        let doc = Document::extract(document)?;
        let bytes = doc.bytes();
        let found = guarded(|| self.core.facts(bytes, kind, owner.as_deref()))?;
        Ok(found.map(|(f, stamped)| Facts {
            kind: f.kind.map_or("unknown", Kind::as_str),
            project: f.project,
            gpus: f.gpus,
            network_arch: f.network_arch,
            action: f.action,
            image: f.image,
            upload_excludes: f.upload_excludes,
            stamped: stamped.map(|b| PyBytes::new(py, &b).unbind()),
        }))
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
            .map(Document::extract)
            .transpose()?;
        let bytes = doc.as_ref().map(Document::bytes);
        let (report, staged) = py
            .detach(|| guarded(|| self.core.stage(bytes, source, &job_dir)))?
            .map_err(PyFileNotFoundError::new_err)?;
        Ok(Staging {
            report: Py::new(py, Report::wrap(report))?,
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
    ) -> PyResult<Vec<Report>> {
        let kind = parse_kind(kind)?;
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let docs: Vec<Document> = documents
            .try_iter()?
            .map(|d| Document::extract(&d?))
            .collect::<PyResult<_>>()?;
        let admission = Admission {
            owner,
            projects,
            ..Default::default()
        };
        let mut reports: Vec<CoreReport> =
            if docs.iter().any(|d| matches!(d, Document::Unreadable(_))) {
                docs.iter()
                    .map(|d| d.check(&self.core, kind, &admission))
                    .collect()
            } else {
                let slices: Vec<&[u8]> = docs.iter().map(Document::bytes).collect();
                py.detach(|| guarded(|| self.core.check_many(&slices, kind, threads, &admission)))?
            };
        if let Some(budget) = max_response_bytes {
            crate::report::fit(&mut reports, budget);
        }
        Ok(reports.into_iter().map(Report::wrap).collect())
    }

    /// The service's AdmitBatch dry-run path: an encoded `jobgate.v1.AdmitBatchRequest`
    /// in, its encoded `AdmitBatchResponse` out, checked on every core with the GIL
    /// released and no Python object per document. `None` when the request is not a
    /// dry run of raw documents (or not a request at all): the caller's general path
    /// handles those.
    ///
    /// With `quota_default` or `quota_projects`, `forge.quota.project` is judged per
    /// document against `gpus_in_use`, one snapshot for the batch: a `{project: GPUs}`
    /// mapping, or a callable returning one, called only when this path answers the
    /// request (so a request it leaves to the caller costs no usage lookup).
    #[pyo3(signature = (request, *, owner=None, max_batch=usize::MAX, threads=None, quota_default=None, quota_projects=None, gpus_in_use=None, projects=None, max_response_bytes=None))]
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
        max_response_bytes: Option<usize>,
    ) -> PyResult<Option<BatchOutcome>> {
        let Some(batch) = py.detach(|| guarded(|| crate::wire::decode(request)))? else {
            return Ok(None);
        };
        let has_quotas =
            quota_default.is_some() || quota_projects.as_ref().is_some_and(|p| !p.is_empty());
        let quotas = if has_quotas && batch.len() <= max_batch {
            let in_use = match gpus_in_use {
                Some(u) if u.is_callable() => u.call0()?.extract()?,
                Some(u) if !u.is_none() => u.extract()?,
                _ => HashMap::new(),
            };
            Some(QuotaTable {
                default: quota_default,
                projects: quota_projects.unwrap_or_default(),
                in_use,
            })
        } else {
            None
        };
        let admission = Admission {
            owner,
            quotas,
            projects,
            ..Default::default()
        };
        let outcome = py.detach(|| {
            guarded(|| {
                crate::wire::answer(
                    &self.core,
                    &batch,
                    &admission,
                    max_batch,
                    threads,
                    max_response_bytes,
                )
            })
        })?;
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

fn file_source<'a>(
    root: &'a Option<PathBuf>,
    package: &'a Option<PathBuf>,
) -> PyResult<Option<FileSource<'a>>> {
    match (root, package) {
        (Some(_), Some(_)) => Err(PyValueError::new_err("give root= or package=, not both")),
        (Some(r), None) => Ok(Some(FileSource::Root(r))),
        (None, Some(p)) => Ok(Some(FileSource::Package(p))),
        (None, None) => Ok(None),
    }
}

/// What `Validator.facts` read from a document.
#[pyclass(module = "jobgate._core", frozen, get_all)]
pub struct Facts {
    kind: &'static str,
    project: String,
    gpus: u64,
    network_arch: String,
    action: String,
    image: String,
    upload_excludes: Vec<String>,
    /// The document with the owner stamped in, when an owner was given.
    stamped: Option<Py<PyBytes>>,
}

/// What `Validator.check_batch_request` answered.
#[pyclass(module = "jobgate._core", frozen, get_all)]
pub struct BatchOutcome {
    /// How many documents the request held.
    documents: usize,
    /// The encoded `AdmitBatchResponse`; `None` when the batch was over `max_batch`.
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
    report: Py<Report>,
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

/// A document's bytes, borrowed from Python where possible.
enum Document<'py> {
    Bytes(Bound<'py, PyBytes>),
    Str(Bound<'py, PyString>),
    Owned(Vec<u8>),
    /// A parsed object that JSON cannot hold; the reason becomes its `json.syntax` report.
    Unreadable(String),
}

impl<'py> Document<'py> {
    fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Document::Bytes(b.clone()));
        }
        if let Ok(s) = obj.cast::<PyString>() {
            s.to_str()?;
            return Ok(Document::Str(s.clone()));
        }
        if let Ok(b) = obj.cast::<PyByteArray>() {
            return Ok(Document::Owned(b.to_vec()));
        }
        if obj.cast::<PyDict>().is_ok() || obj.hasattr("keys")? {
            return Ok(match dumps(obj) {
                Ok(bytes) => Document::Owned(bytes),
                Err(reason) => Document::Unreadable(reason),
            });
        }
        Err(PyTypeError::new_err(format!(
            "a document is bytes, str or dict, not {}",
            obj.get_type().name()?
        )))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Document::Bytes(b) => b.as_bytes(),
            // Checked to be valid UTF-8 in `extract`.
            Document::Str(s) => s.to_str().map(str::as_bytes).unwrap_or_default(),
            Document::Owned(v) => v,
            Document::Unreadable(_) => b"",
        }
    }

    fn check(&self, core: &CoreValidator, kind: Option<Kind>, admission: &Admission) -> CoreReport {
        match self {
            Document::Unreadable(reason) => CoreReport::new(
                kind,
                vec![CoreViolation {
                    rule: "json.syntax",
                    field: String::new(),
                    message: reason.clone(),
                    severity: Severity::Error,
                }],
            ),
            _ => core.check(self.bytes(), kind, admission),
        }
    }
}

/// A parsed document back to JSON text: orjson for speed, the standard library for
/// what orjson refuses (integers beyond 64 bits). `Err` names what JSON cannot hold.
fn dumps(obj: &Bound<'_, PyAny>) -> Result<Vec<u8>, String> {
    static ORJSON: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static STDLIB: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = obj.py();
    let import =
        |cell: &'static PyOnceLock<Py<PyAny>>, module: &str| -> PyResult<Bound<'_, PyAny>> {
            Ok(cell
                .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                    Ok(py.import(module)?.getattr("dumps")?.unbind())
                })?
                .bind(py)
                .clone())
        };
    let fast = import(&ORJSON, "orjson")
        .and_then(|f| f.call1((obj,)))
        .and_then(|b| Ok(b.cast::<PyBytes>()?.as_bytes().to_vec()));
    if let Ok(bytes) = fast {
        return Ok(bytes);
    }
    let kwargs = PyDict::new(py);
    let slow = kwargs
        .set_item("allow_nan", false)
        .and_then(|_| import(&STDLIB, "json"))
        .and_then(|f| f.call((obj,), Some(&kwargs)))
        .and_then(|s| Ok(s.cast::<PyString>()?.to_str()?.as_bytes().to_vec()));
    slow.map_err(|e| format!("the document cannot be written as JSON: {}", e.value(py)))
}

fn parse_kind(kind: Option<&str>) -> PyResult<Option<Kind>> {
    match kind {
        None => Ok(None),
        Some(k) => Kind::parse(k).map(Some).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown kind {k:?}; one of jobspec, spec_bundle, job_record, best_rec"
            ))
        }),
    }
}

fn core_config(d: &Bound<'_, PyDict>) -> PyResult<CoreConfig> {
    let get = |k: &str| d.get_item(k).ok().flatten().filter(|v| !v.is_none());
    let max_bytes: usize = get("max_document_bytes")
        .map(|v| v.extract())
        .transpose()?
        .unwrap_or(DEFAULT_MAX_BYTES);
    let max_depth: usize = get("max_depth")
        .map(|v| v.extract())
        .transpose()?
        .unwrap_or(DEFAULT_MAX_DEPTH);
    let mut config =
        CoreConfig::with_limits(max_bytes, max_depth).map_err(PyValueError::new_err)?;
    config.package.max_bundle_bytes = max_bytes as u64;
    config.registries = get("registries").map(|v| v.extract()).transpose()?;
    config.series = get("series").map(|v| v.extract()).transpose()?;
    config.max_gpus_per_job = get("max_gpus_per_job").map(|v| v.extract()).transpose()?;
    if let Some(v) = get("max_package_bytes") {
        config.package.max_bytes = v.extract()?;
    }
    if let Some(v) = get("package_cache_bytes") {
        config.package.cache_bytes = v.extract()?;
    }
    if let Some(v) = get("max_package_members") {
        config.package.max_members = v.extract()?;
    }
    if let Some(v) = get("max_violations") {
        config.report.max_violations = v.extract::<usize>()?.max(1);
    }
    if let Some(catalog) = get("catalog") {
        let mut entries = Vec::new();
        for item in catalog.try_iter()? {
            let item = item?;
            let e = item.cast::<PyDict>()?;
            let s = |k: &str| -> PyResult<String> {
                Ok(e.get_item(k)?
                    .filter(|v| !v.is_none())
                    .map(|v| v.extract::<String>())
                    .transpose()?
                    .unwrap_or_default())
            };
            let mut entry = CatalogEntry::new(
                &s("name")?,
                &s("version")?,
                &s("digest")?,
                &s("runtime_id")?,
            );
            entry.custom = e
                .get_item("custom")?
                .map(|v| v.is_truthy())
                .transpose()?
                .unwrap_or(false);
            entry.observability = match s("observability")?.as_str() {
                "platform" => Observability::Platform,
                "external" => Observability::External,
                _ => Observability::Unspecified,
            };
            let requires = s("requires_core")?;
            if !requires.is_empty() {
                entry = entry
                    .with_requires_core(&requires)
                    .map_err(PyValueError::new_err)?;
            }
            entries.push(entry);
        }
        config.set_catalog(entries);
    }
    Ok(config)
}

/// Every rule id jobgate reports, with its default severity and meaning.
#[pyfunction]
fn rules(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    crate::rules::CATALOGUE
        .iter()
        .map(|r| {
            let d = PyDict::new(py);
            d.set_item("rule", r.id)?;
            d.set_item(
                "severity",
                if r.severity == Severity::Error {
                    "error"
                } else {
                    "warning"
                },
            )?;
            d.set_item("summary", r.summary)?;
            Ok(d)
        })
        .collect()
}

/// The reports of one batch, the largest cut so that together they weigh at most
/// `max_bytes` and fit one response; reports under their share come back unchanged,
/// and every verdict is kept (see `report::fit`).
/// A report shaped like one (`kind`, `violations` of `rule`, `field`, `message`,
/// `severity`) is taken too, e.g. one whose messages were renamed.
#[pyfunction]
fn fit_reports(reports: Vec<Bound<'_, PyAny>>, max_bytes: usize) -> PyResult<Vec<Report>> {
    let mut inner: Vec<CoreReport> = reports.iter().map(core_report).collect::<PyResult<_>>()?;
    crate::report::fit(&mut inner, max_bytes);
    Ok(inner.into_iter().map(Report::wrap).collect())
}

fn core_report(obj: &Bound<'_, PyAny>) -> PyResult<CoreReport> {
    if let Ok(r) = obj.cast::<Report>() {
        return Ok(r.get().inner.clone());
    }
    let kind: String = obj.getattr("kind")?.extract()?;
    let mut violations = Vec::new();
    for v in obj.getattr("violations")?.try_iter()? {
        let v = v?;
        let rule: String = v.getattr("rule")?.extract()?;
        let rule = crate::rules::CATALOGUE
            .iter()
            .find(|r| r.id == rule)
            .map(|r| r.id)
            .ok_or_else(|| PyValueError::new_err(format!("unknown rule {rule:?}")))?;
        let severity: String = v.getattr("severity")?.extract()?;
        violations.push(CoreViolation {
            rule,
            field: v.getattr("field")?.extract()?,
            message: v.getattr("message")?.extract()?,
            severity: if severity == "error" {
                Severity::Error
            } else {
                Severity::Warning
            },
        });
    }
    Ok(CoreReport::new(Kind::parse(&kind), violations))
}

/// `text` with the secret part of every credential replaced by `***`: the detector of
/// `tao.execution.secret` and `tao.record.secret`, as the store applies it to what it keeps.
#[pyfunction]
fn redact(text: &str) -> String {
    crate::secrets::redact(text)
}

/// BLAKE3 content keys of `(name, bytes or None)` items, in lowercase hex, hashed on
/// every core with the GIL released; `None` where a named file cannot be read
/// (`files::package_cache::content_keys`). `jobgate revalidate --cache` keys its items so.
#[pyfunction]
fn content_keys(
    py: Python<'_>,
    salt: &[u8],
    items: Vec<crate::files::package_cache::Keyed>,
) -> PyResult<Vec<Option<String>>> {
    let keys = py.detach(|| guarded(|| crate::files::package_cache::content_keys(salt, &items)))?;
    Ok(keys
        .into_iter()
        .map(|k| k.map(|k| crate::files::hashing::hex(&k)))
        .collect())
}

/// The document as jobgate reads it, as JSON text; ValueError with the refusal's
/// message (`json.syntax`, `limits.size`, `limits.depth`) when it cannot be read.
#[pyfunction]
fn read_document(py: Python<'_>, document: &Bound<'_, PyAny>) -> PyResult<String> {
    let document = Document::extract(document)?;
    if let Document::Unreadable(reason) = &document {
        return Err(PyValueError::new_err(format!("json.syntax: {reason}")));
    }
    let bytes = document.bytes();
    let result = py.detach(|| {
        guarded(|| crate::document::reading(bytes, &crate::document::Limits::default()))
    })?;
    match result {
        Ok(json) => String::from_utf8(json).map_err(|e| PyValueError::new_err(e.to_string())),
        Err(v) => Err(PyValueError::new_err(format!("{}: {}", v.rule, v.message))),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Validator>()?;
    m.add_class::<Report>()?;
    m.add_class::<Violation>()?;
    m.add_class::<Staging>()?;
    m.add_class::<Facts>()?;
    m.add_class::<BatchOutcome>()?;
    m.add_function(wrap_pyfunction!(rules, m)?)?;
    m.add_function(wrap_pyfunction!(read_document, m)?)?;
    m.add_function(wrap_pyfunction!(fit_reports, m)?)?;
    m.add_function(wrap_pyfunction!(redact, m)?)?;
    m.add_function(wrap_pyfunction!(content_keys, m)?)?;
    Ok(())
}
