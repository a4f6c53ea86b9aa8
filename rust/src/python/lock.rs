//! `recipe_status`: how a client's `recipe.lock.json` stands against the deployment's
//! catalog (`crate::recipe_status`), for the service's `RecipeStatus`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::recipe_status as lock;

use super::config::Settings;
use super::guard::guarded;

/// How a lock stands against the catalog.
#[pyclass(module = "jobgate._core", frozen, get_all)]
pub struct RecipeStatus {
    /// `current`, `compatible`, `upgrade_advised`, `incompatible`,
    /// `sdk_incompatible`, `runtime_removed` or `malformed`.
    status: &'static str,
    /// What it means and what to do, naming both versions.
    message: String,
    /// The catalog's recipe version, digest and runtime id, when it serves the recipe.
    catalog_version: Option<String>,
    catalog_digest: Option<String>,
    catalog_runtime_id: Option<String>,
}

#[pymethods]
impl RecipeStatus {
    fn __repr__(&self) -> String {
        format!(
            "RecipeStatus(status={:?}, message={:?})",
            self.status, self.message
        )
    }
}

/// The status of `lock` (the lock file's bytes) against the catalog of `settings`, for
/// a client of core version `core_version` (empty: the lock's own
/// `created_by.core_version`). ValueError, with the limit's message, for a lock past
/// the document limits: that is not a lock to judge.
#[pyfunction]
#[pyo3(signature = (settings, lock, core_version=""))]
pub fn recipe_status(
    py: Python<'_>,
    settings: &Settings,
    lock: &[u8],
    core_version: &str,
) -> PyResult<RecipeStatus> {
    let catalog = settings.core.catalog.as_ref();
    let found = py.detach(|| guarded(|| lock::recipe_status(catalog, lock, core_version)))?;
    let found = found.map_err(|lock::LockUnreadable(why)| PyValueError::new_err(why))?;
    let (catalog_version, catalog_digest, catalog_runtime_id) = match found.catalog {
        Some(served) => (
            Some(served.version),
            Some(served.digest),
            Some(served.runtime_id),
        ),
        None => (None, None, None),
    };
    Ok(RecipeStatus {
        status: found.status.as_str(),
        message: found.message,
        catalog_version,
        catalog_digest,
        catalog_runtime_id,
    })
}
