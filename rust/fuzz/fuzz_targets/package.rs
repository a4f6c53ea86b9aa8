//! The package reader (`files::package` over `tar_format`, `zip_format`, `streams`) on
//! raw bytes, against Python's `tarfile` and `zipfile`: see
//! `jobgate_fuzz::package_differential` for what must hold.
#![no_main]

use jobgate_fuzz::{package_differential, python};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: python::init(), |data: &[u8]| package_differential(data));
