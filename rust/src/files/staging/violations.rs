//! How staging says it failed: a `tao.staging.conflict` at the bundle's supporting
//! files, which leaves whatever was there untouched.

use std::io;

use crate::report::Violation;
use crate::rules::Rule;

pub(super) fn conflict(message: String) -> Violation {
    Violation::new(
        Rule::TaoStagingConflict,
        "/execution/supporting_files".into(),
        message,
    )
}

pub(super) fn io_violation(what: &str, e: impl Into<io::Error>) -> Violation {
    let e: io::Error = e.into();
    conflict(format!(
        "staging failed while {what}: {e}; nothing was staged"
    ))
}
