//! Packages built member by member (`jobgate_fuzz::archive`): tar, tar.gz, tar.zst and
//! zip with files, directories, links, devices, long names and the names readers treat
//! differently, then edits at the header fields and bytes where readers part ways;
//! held to `jobgate_fuzz::package_differential`.
#![no_main]

use jobgate_fuzz::archive::Package;
use jobgate_fuzz::{package_differential, python};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: python::init(), |package: Package| package_differential(&package.bytes()));
