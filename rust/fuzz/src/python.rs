//! The consumers written in Python, run inside the target's process: PyYAML's
//! `safe_load`, `tarfile`, `zipfile` (and `zstandard` for tar.zst), and `ast`. They are
//! the readers jobgate must agree with (SPEC §1, docs/strictness.md), so they are asked
//! directly rather than through a Rust look-alike. Their code is `oracles.py`; each
//! function answers with a JSON text, or raises when the consumer refuses the input.
//!
//! The interpreter is the one pyo3 was built against; its packages come from
//! `PYTHONPATH` (`scripts/dev fuzz` points it at the project's virtualenv).

use std::ffi::CString;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyModule};

static ORACLES: OnceLock<Py<PyModule>> = OnceLock::new();

fn oracles(py: Python<'_>) -> &Bound<'_, PyModule> {
    ORACLES
        .get_or_init(|| {
            let code = CString::new(include_str!("../oracles.py")).expect("no NUL in oracles.py");
            PyModule::from_code(py, &code, c"oracles.py", c"oracles")
                .unwrap_or_else(|e| {
                    e.print(py);
                    panic!("oracles.py does not load: is PYTHONPATH set to the virtualenv's site-packages (scripts/dev fuzz sets it)?")
                })
                .unbind()
        })
        .bind(py)
}

/// What the consumer reads: `Ok(json)` from `oracles.<function>(data, *args)`, or
/// `Err(why)` when it refuses the input (raises).
pub fn ask(function: &str, data: &[u8], args: &[&str]) -> Result<String, String> {
    Python::attach(|py| {
        let f = oracles(py).getattr(function).expect("an oracle function");
        let mut call: Vec<Bound<'_, PyAny>> = vec![PyBytes::new(py, data).into_any()];
        for a in args {
            call.push(a.into_pyobject(py).expect("str").into_any());
        }
        let tuple = pyo3::types::PyTuple::new(py, call).expect("a tuple");
        match f.call1(tuple) {
            Ok(v) => Ok(v.extract::<String>().expect("an oracle answers with a str")),
            Err(e) => Err(e.to_string()),
        }
    })
}

/// Warms the interpreter and the oracles up, so the first input is not charged for it.
pub fn init() {
    Python::attach(|py| {
        oracles(py);
    });
}
