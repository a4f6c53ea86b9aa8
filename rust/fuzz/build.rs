//! The targets embed CPython for the Python-side oracles: the runtime linker must find
//! libpython where the interpreter that pyo3 built against keeps it.
fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
}
