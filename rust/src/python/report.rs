//! Reports and violations as Python sees them (`Report`, `Violation`), the rule
//! catalogue (`rules()`), the cutting of a batch's reports (`fit_reports`), and the
//! reports of inputs refused before they are read (`refused_*`): a file over the
//! size limit is refused by the Python layer without reading it, with the core's
//! words.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use crate::kind::Kind;
use crate::refusal;
use crate::report::{Report, Violation};
use crate::rules::{Rule, Severity};

use super::input::parse_kind;

#[pyclass(name = "Violation", module = "jobgate._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyViolation {
    #[pyo3(get)]
    rule: &'static str,
    #[pyo3(get)]
    field: String,
    #[pyo3(get)]
    message: String,
    #[pyo3(get)]
    severity: &'static str,
    /// Where `field` is in the source: line and column from 1 (None when the report
    /// was not made from text, e.g. a file refused unread).
    #[pyo3(get)]
    line: Option<u32>,
    #[pyo3(get)]
    column: Option<u32>,
    /// The severity the rules gave, when the deployment's `[rules]` changed it.
    #[pyo3(get)]
    default_severity: Option<&'static str>,
}

impl From<&Violation> for PyViolation {
    fn from(v: &Violation) -> Self {
        PyViolation {
            rule: v.rule.id(),
            field: v.field.clone(),
            message: v.message.clone(),
            severity: v.severity.as_str(),
            line: v.at.map(|a| a.line),
            column: v.at.map(|a| a.column),
            default_severity: v.default.map(Severity::as_str),
        }
    }
}

/// An optional number as Python prints it.
fn shown(n: Option<u32>) -> String {
    n.map_or_else(|| "None".to_owned(), |n| n.to_string())
}

#[pymethods]
impl PyViolation {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("rule", self.rule)?;
        d.set_item("field", &self.field)?;
        d.set_item("message", &self.message)?;
        d.set_item("severity", self.severity)?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            d.set_item("line", line)?;
            d.set_item("column", column)?;
        }
        if let Some(default) = self.default_severity {
            d.set_item("default_severity", default)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Violation(rule={:?}, field={:?}, severity={:?}, message={:?}, line={}, column={})",
            self.rule,
            self.field,
            self.severity,
            self.message,
            shown(self.line),
            shown(self.column)
        )
    }
}

#[pyclass(name = "Report", module = "jobgate._core", frozen)]
pub struct PyReport {
    pub(super) inner: Report,
    violations: PyOnceLock<Py<PyList>>,
}

impl PyReport {
    pub(super) fn wrap(inner: Report) -> Self {
        PyReport {
            inner,
            violations: PyOnceLock::new(),
        }
    }
}

#[pymethods]
impl PyReport {
    /// A name of `jobgate.KINDS` (the core's kind table), or `unknown`.
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
                let items: Vec<PyViolation> = self
                    .inner
                    .violations
                    .iter()
                    .map(PyViolation::from)
                    .collect();
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
            vs.append(PyViolation::from(v).to_dict(py)?)?;
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
            .cast::<PyReport>()
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

/// Every rule id jobgate reports, with its default severity and meaning.
#[pyfunction]
pub fn rules(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    Rule::ALL
        .iter()
        .map(|r| {
            let d = PyDict::new(py);
            d.set_item("rule", r.id())?;
            d.set_item("severity", r.severity().as_str())?;
            d.set_item("summary", r.summary())?;
            d.set_item("relaxable", r.relaxable())?;
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
pub fn fit_reports(reports: Vec<Bound<'_, PyAny>>, max_bytes: usize) -> PyResult<Vec<PyReport>> {
    let mut inner: Vec<Report> = reports.iter().map(core_report).collect::<PyResult<_>>()?;
    crate::report::fit(&mut inner, max_bytes);
    Ok(inner.into_iter().map(PyReport::wrap).collect())
}

fn core_report(obj: &Bound<'_, PyAny>) -> PyResult<Report> {
    if let Ok(r) = obj.cast::<PyReport>() {
        return Ok(r.get().inner.clone());
    }
    let kind: String = obj.getattr("kind")?.extract()?;
    let mut violations = Vec::new();
    for v in obj.getattr("violations")?.try_iter()? {
        let v = v?;
        let rule: String = v.getattr("rule")?.extract()?;
        let rule = Rule::parse(&rule)
            .ok_or_else(|| PyValueError::new_err(format!("unknown rule {rule:?}")))?;
        let severity: String = v.getattr("severity")?.extract()?;
        let default = match v.getattr("default_severity") {
            Ok(d) if !d.is_none() => d.extract::<String>().ok().and_then(|d| Severity::parse(&d)),
            _ => None,
        };
        let place = |name: &str| -> PyResult<Option<u32>> {
            match v.getattr(name) {
                Ok(value) if !value.is_none() => Ok(value.extract::<u32>().ok().filter(|n| *n > 0)),
                _ => Ok(None),
            }
        };
        let at = match (place("line")?, place("column")?) {
            (Some(line), Some(column)) => Some(crate::locate::Location { line, column }),
            _ => None,
        };
        violations.push(Violation {
            at,
            default,
            ..Violation::new(
                rule.with_severity(Severity::parse(&severity).unwrap_or(Severity::Warning)),
                v.getattr("field")?.extract()?,
                v.getattr("message")?.extract()?,
            )
        });
    }
    Ok(Report::new(Kind::parse(&kind), violations))
}

/// The report of one refusal, for a document of `kind` (`None`: not known).
fn refused(kind: Option<&str>, violation: Violation) -> PyResult<PyReport> {
    Ok(PyReport::wrap(Report::new(
        parse_kind(kind)?,
        vec![violation],
    )))
}

/// The report of a document over the size limit, refused before it is read whole:
/// `limits.size`. `size` is `None` when it is only known to exceed `limit` (a stream).
#[pyfunction]
#[pyo3(signature = (size, limit, *, kind=None))]
pub fn refused_too_large(size: Option<u64>, limit: u64, kind: Option<&str>) -> PyResult<PyReport> {
    refused(kind, refusal::too_large(size, limit))
}

/// The report of an unpacked package (a directory) whose files hold more than
/// `limits.max_package_bytes`: `limits.size`.
#[pyfunction]
#[pyo3(signature = (package, size, limit, *, kind=None))]
pub fn refused_package_too_large(
    package: &str,
    size: u64,
    limit: u64,
    kind: Option<&str>,
) -> PyResult<PyReport> {
    refused(kind, refusal::package_too_large(package, size, limit))
}

/// The report of a retry whose first admission is in `project`, which the account's
/// grant (`projects`) no longer reaches: `forge.project.forbidden`, worded as the rule
/// words it, and nothing about the job.
#[pyfunction]
#[pyo3(signature = (project, projects, *, kind=None))]
pub fn refused_project(
    project: &str,
    projects: Vec<String>,
    kind: Option<&str>,
) -> PyResult<PyReport> {
    let violation = refusal::project_forbidden(parse_kind(kind)?, project, &projects);
    refused(kind, violation)
}

/// The report of an input that could not be read at all (`reason`, e.g. the system's
/// error for a file): `json.syntax`.
#[pyfunction]
#[pyo3(signature = (reason, *, kind=None))]
pub fn refused_unreadable(reason: String, kind: Option<&str>) -> PyResult<PyReport> {
    refused(kind, refusal::unreadable(reason))
}
