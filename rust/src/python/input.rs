//! Documents read from Python values: `bytes` and `str` borrowed as they are, a
//! parsed mapping written back as JSON; kinds and file sources named by the caller;
//! and `read_document`, the document as the core reads it.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};

use std::path::PathBuf;

use crate::admission::AdmissionContext;
use crate::files::staging::FileSource;
use crate::kind::Kind;
use crate::limits::Limits;
use crate::refusal;
use crate::report::{Report, Violation};
use crate::validator::Validator;

use super::guard::guarded;

/// A document as Python gave it (`bytes`, `str` or a parsed `dict`): its bytes,
/// borrowed from Python where possible.
pub enum GivenDocument<'py> {
    Bytes(Bound<'py, PyBytes>),
    Str(Bound<'py, PyString>),
    Owned(Vec<u8>),
    /// A parsed object (a dict), written as JSON: not text anyone wrote, so its
    /// violations carry no line or column.
    Parsed(Vec<u8>),
    /// A parsed object that JSON cannot hold; the reason becomes its `json.syntax` report.
    Unreadable(String),
}

impl<'py> GivenDocument<'py> {
    pub fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(GivenDocument::Bytes(b.clone()));
        }
        if let Ok(s) = obj.cast::<PyString>() {
            // A str with a lone surrogate has no UTF-8 form: refused as bytes that are
            // not UTF-8 are, with a report rather than an exception.
            return Ok(match s.to_str() {
                Ok(_) => GivenDocument::Str(s.clone()),
                Err(e) => GivenDocument::Unreadable(format!(
                    "the document is not valid UTF-8: {}",
                    e.value(obj.py())
                )),
            });
        }
        if let Ok(b) = obj.cast::<PyByteArray>() {
            return Ok(GivenDocument::Owned(b.to_vec()));
        }
        if obj.cast::<PyDict>().is_ok() || obj.hasattr("keys")? {
            return Ok(match dumps(obj) {
                Ok(bytes) => GivenDocument::Parsed(bytes),
                Err(reason) => GivenDocument::Unreadable(reason),
            });
        }
        Err(PyTypeError::new_err(format!(
            "a document is bytes, str or dict, not {}",
            obj.get_type().name()?
        )))
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            GivenDocument::Bytes(b) => b.as_bytes(),
            // Checked to be valid UTF-8 in `extract`.
            GivenDocument::Str(s) => s.to_str().map(str::as_bytes).unwrap_or_default(),
            GivenDocument::Owned(v) | GivenDocument::Parsed(v) => v,
            GivenDocument::Unreadable(_) => b"",
        }
    }

    pub fn is_unreadable(&self) -> bool {
        matches!(self, GivenDocument::Unreadable(_))
    }

    /// Whether the document was handed over as text (bytes or str), whose lines and
    /// columns mean something to whoever wrote it.
    pub fn is_text(&self) -> bool {
        matches!(
            self,
            GivenDocument::Bytes(_) | GivenDocument::Str(_) | GivenDocument::Owned(_)
        )
    }

    /// The document's report: its refusal when it could not be written as JSON.
    pub fn check(
        &self,
        core: &Validator,
        kind: Option<Kind>,
        admission: &AdmissionContext,
    ) -> Report {
        match self {
            GivenDocument::Unreadable(reason) => {
                Report::new(kind, vec![refusal::unreadable(reason.clone())])
            }
            _ => core.check(self.bytes(), kind, admission),
        }
    }
}

/// A parsed document back to JSON text: orjson for speed, the standard library for
/// what orjson refuses (integers beyond 64 bits) or may have rewritten (NaN).
/// `Err` names what JSON cannot hold.
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
    // orjson writes NaN and the infinities as `null`, which would check a document
    // the same text could not be; only output holding a `null` may hide one, and the
    // standard library (which refuses them) writes that again.
    if let Ok(bytes) = fast {
        if memchr::memmem::find(&bytes, b"null").is_none() {
            return Ok(bytes);
        }
    }
    let kwargs = PyDict::new(py);
    let slow = kwargs
        .set_item("allow_nan", false)
        .and_then(|_| import(&STDLIB, "json"))
        .and_then(|f| f.call((obj,), Some(&kwargs)))
        .and_then(|s| Ok(s.cast::<PyString>()?.to_str()?.as_bytes().to_vec()));
    slow.map_err(|e| {
        let why = e.value(py).to_string();
        if why.starts_with("Out of range float values") {
            "the document holds a float that is NaN or infinite, which is not a JSON number; write null or a string instead".into()
        } else {
            format!("the document cannot be written as JSON: {why}")
        }
    })
}

/// A kind named by the caller; `None` is detected from the document.
pub fn parse_kind(kind: Option<&str>) -> PyResult<Option<Kind>> {
    match kind {
        None => Ok(None),
        Some(k) => Kind::parse(k).map(Some).ok_or_else(|| {
            PyValueError::new_err(format!("unknown kind {k:?}; one of {}", Kind::names()))
        }),
    }
}

/// Where a spec-bundle's supporting files come from: a producer root or a package.
pub fn file_source<'a>(
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

/// The document as jobgate reads it, as JSON text; ValueError with the refusal's
/// message (`json.syntax`, `limits.size`, `limits.depth`) when it cannot be read.
#[pyfunction]
pub fn read_document(py: Python<'_>, document: &Bound<'_, PyAny>) -> PyResult<String> {
    let refused = |v: Violation| PyValueError::new_err(format!("{}: {}", v.rule.id(), v.message));
    let document = GivenDocument::extract(document)?;
    if let GivenDocument::Unreadable(reason) = &document {
        return Err(refused(refusal::unreadable(reason.clone())));
    }
    let bytes = document.bytes();
    let result = py.detach(|| guarded(|| crate::document::reading(bytes, &Limits::default())))?;
    let json = result.map_err(refused)?;
    String::from_utf8(json).map_err(|e| PyValueError::new_err(e.to_string()))
}
