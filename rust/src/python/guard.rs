//! No panic crosses into Python: work that could panic (a bug in jobgate) runs under
//! `guarded`, which makes it a RuntimeError instead. Imports nothing of the crate, so
//! every part of the boundary can use it.

use pyo3::prelude::*;

/// Runs `f`, turning a panic (a bug in jobgate) into a Python RuntimeError, so that
/// no panic crosses into Python and a document is never admitted by accident.
pub fn guarded<T>(f: impl FnOnce() -> T) -> PyResult<T> {
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
