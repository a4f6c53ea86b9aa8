//! The Python boundary: `jobgate._core`, split by concern.
//!
//! - `config`: the deployment settings, handed over as typed values (`Settings`);
//! - `input`: documents read from Python values;
//! - `validator`: the compiled `Validator` and what its methods return;
//! - `report`: reports and violations as Python sees them, the rule catalogue, and
//!   the reports of inputs refused before they are read;
//! - `lock`: how a recipe lock stands against the catalog (`RecipeStatus`);
//! - `lines`: the request log's writer (`LineSink`), a thread that never takes the GIL;
//! - `record_writer`: records opened by a thread of the core beside the calls, on
//!   SQLite (`sqlite_writer`) and PostgreSQL (`postgres_writer`);
//! - `guard`: no panic crosses into Python.
//!
//! A class Python sees is a `Py*` struct named for Python (`PyReport` is
//! `jobgate._core.Report`), so `Report`, `Violation`, `Validator`, `Facts` and
//! `Judgement` here are always the core's own types.
//!
//! Python exceptions are made here and nowhere else; bad documents are reports, never
//! exceptions. The core never imports the Python package: `jobgate` turns its own
//! configuration into `Settings` before it builds a validator.

mod config;
mod guard;
mod input;
mod lines;
mod lock;
mod postgres_writer;
mod record_writer;
mod report;
mod sqlite_writer;
mod validator;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::kind::Kind;
use crate::kinds::job_record;
use crate::rules::Rule;

use guard::guarded;

/// `text` with the secret part of every credential replaced by `***`: the detector of
/// `tao.execution.secret` (every shape), as the store applies it to what it keeps.
#[pyfunction]
fn redact(text: &str) -> String {
    crate::secrets::redact(text)
}

/// The comments of a YAML text as its reader sees them (`yaml::comments`), as
/// `(line, column, alone, text)`: what `jobgate check` reads suppressions from.
#[pyfunction]
fn yaml_comments(text: &str) -> PyResult<Vec<(u32, u32, bool, String)>> {
    guarded(|| {
        crate::yaml::comments(text)
            .into_iter()
            .map(|c| (c.line, c.column, c.alone, c.text))
            .collect()
    })
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

/// Document files read by path in one call, on every core with the GIL released:
/// each file's bytes, or the report refusing it for documents of `kind`
/// (`files::documents::read`: not a regular file, unreadable, over `max_bytes`).
/// `jobgate revalidate --engine ray` reads what it ships so.
#[pyfunction]
#[pyo3(signature = (paths, max_bytes, *, kind=None))]
fn read_documents(
    py: Python<'_>,
    paths: Vec<std::path::PathBuf>,
    max_bytes: usize,
    kind: Option<&str>,
) -> PyResult<Vec<Py<PyAny>>> {
    use rayon::prelude::*;
    let kind = input::parse_kind(kind)?;
    let read: Vec<Result<Vec<u8>, crate::report::Violation>> = py.detach(|| {
        guarded(|| {
            paths
                .par_iter()
                .with_min_len(16)
                .map(|path| {
                    let mut bytes = Vec::new();
                    crate::files::documents::read(path, max_bytes, &mut bytes).map(|()| bytes)
                })
                .collect()
        })
    })?;
    read.into_iter()
        .map(|r| match r {
            Ok(bytes) => Ok(pyo3::types::PyBytes::new(py, &bytes).into_any().unbind()),
            Err(refusal) => Ok(Py::new(
                py,
                report::PyReport::wrap(crate::report::Report::new(kind, vec![refusal])),
            )?
            .into_any()),
        })
        .collect()
}

/// `number`'s image under the keyed permutation of the integers below 2^`bits` that
/// numbers job ids (`job_ids::permuted`); ValueError for a key that is not 32 bytes, odd
/// `bits` or above 64, or a number out of range.
#[pyfunction]
#[pyo3(signature = (number, key, bits))]
fn permuted_job_number(number: u64, key: &[u8], bits: u32) -> PyResult<u64> {
    let key: &[u8; 32] = key.try_into().map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "a job id key is 32 bytes, not {}",
            key.len()
        ))
    })?;
    crate::job_ids::permuted(number, key, bits).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{number} is not a job number of {bits} bits (an even width up to 64)"
        ))
    })
}

/// Every kind, in `KINDS` order, as the core's table has it: `name`, `proto` (its
/// `jobgate.v1.Kind` number), `detect` (the top-level keys that mark it), `rank`
/// (the lowest wins when several kinds' keys are present), `launches`, and `charge`:
/// where an admission's project comes from (`"project"`, the document's own; `"home"`,
/// the account's; `None`, a kind that launches nothing).
#[pyfunction]
fn kind_table(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    crate::kind::TABLE
        .iter()
        .map(|info| {
            let d = PyDict::new(py);
            d.set_item("name", info.name)?;
            d.set_item("proto", info.proto)?;
            d.set_item("detect", PyTuple::new(py, info.detect)?)?;
            d.set_item("rank", info.rank)?;
            d.set_item("launches", info.kind.launches())?;
            d.set_item("charge", info.charge.as_str())?;
            d.set_item("typed_lists", PyTuple::new(py, info.typed_lists)?)?;
            Ok(d)
        })
        .collect()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The rustc that compiled the core (build.rs), for jobgate_build_info.
    m.add("RUSTC_VERSION", env!("JOBGATE_RUSTC_VERSION"))?;
    // The kinds a document may be given as, for choices and checks in Python.
    m.add("KINDS", PyTuple::new(py, Kind::ALL.map(Kind::as_str))?)?;
    // The rule the service answers with PERMISSION_DENIED rather than a verdict.
    m.add("PROJECT_FORBIDDEN", Rule::ForgeProjectForbidden.id())?;
    // A job record's lifecycle, as the job-record kind checks it: the store writes
    // only these states and sources, and a terminal state ends a record.
    m.add("RECORD_STATES", PyTuple::new(py, job_record::STATES)?)?;
    m.add("RECORD_TERMINAL", PyTuple::new(py, job_record::TERMINAL)?)?;
    m.add("RECORD_SOURCES", PyTuple::new(py, job_record::SOURCES)?)?;
    // The core's defaults of the [limits] keys it reads, which jobgate.config serves.
    m.add("DEFAULT_LIMITS", config::default_limits(py)?)?;
    m.add_class::<validator::PyValidator>()?;
    m.add_class::<report::PyReport>()?;
    m.add_class::<report::PyViolation>()?;
    m.add_class::<validator::Staging>()?;
    m.add_class::<validator::PyFacts>()?;
    m.add_class::<validator::PyJudgement>()?;
    m.add_class::<validator::BatchOutcome>()?;
    m.add_class::<config::Settings>()?;
    m.add_class::<config::CatalogEntry>()?;
    m.add_class::<lock::RecipeStatus>()?;
    m.add_class::<lines::LineSink>()?;
    m.add_class::<sqlite_writer::SqliteWriter>()?;
    m.add_class::<postgres_writer::PostgresWriter>()?;
    m.add_class::<record_writer::Opening>()?;
    m.add_function(wrap_pyfunction!(report::rules, m)?)?;
    m.add_function(wrap_pyfunction!(kind_table, m)?)?;
    m.add_function(wrap_pyfunction!(report::fit_reports, m)?)?;
    m.add_function(wrap_pyfunction!(report::refused_too_large, m)?)?;
    m.add_function(wrap_pyfunction!(report::refused_package_too_large, m)?)?;
    m.add_function(wrap_pyfunction!(report::refused_unreadable, m)?)?;
    m.add_function(wrap_pyfunction!(report::refused_project, m)?)?;
    m.add_function(wrap_pyfunction!(input::read_document, m)?)?;
    m.add_function(wrap_pyfunction!(config::project_quota, m)?)?;
    m.add_function(wrap_pyfunction!(config::check_version_range, m)?)?;
    m.add_function(wrap_pyfunction!(config::validate_rules, m)?)?;
    m.add_function(wrap_pyfunction!(lock::recipe_status, m)?)?;
    m.add_function(wrap_pyfunction!(redact, m)?)?;
    m.add_function(wrap_pyfunction!(content_keys, m)?)?;
    m.add_function(wrap_pyfunction!(yaml_comments, m)?)?;
    m.add_function(wrap_pyfunction!(read_documents, m)?)?;
    m.add_function(wrap_pyfunction!(permuted_job_number, m)?)?;
    Ok(())
}
