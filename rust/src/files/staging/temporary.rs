//! The temporary directory a staging is written in, beside its target in `inputs`,
//! and the ones a staging process that no longer runs left behind.

use std::os::fd::BorrowedFd;
use std::path::Path;

use super::beneath::{names, remove_tree_at};

const TEMP_PREFIX: &str = ".action-helpers.staging-";

/// A name no other staging uses: this process's id and the time.
pub(super) fn temporary_name() -> String {
    format!("{TEMP_PREFIX}{}-{}", std::process::id(), nanos())
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Temporary directories left by a staging process that no longer runs, removed
/// through `inputs` without following anything.
pub(super) fn clean_stale_temporaries(inputs: BorrowedFd<'_>) {
    let Ok(listed) = names(inputs) else {
        return;
    };
    let me = std::process::id();
    for name in listed {
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix(TEMP_PREFIX) else {
            continue;
        };
        let pid: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
        let alive = pid.is_some_and(|p| p == me || Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = remove_tree_at(inputs, &name);
        }
    }
}
