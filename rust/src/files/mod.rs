//! Supporting files: the closed set a spec-bundle declares in
//! `execution.supporting_files`, verified against a producer root directory or a
//! package archive, and staged atomically next to a job.
//!
//! Owns file access and hashing; must not judge the bundle document itself (the
//! `kinds::spec_bundle` rules do). Every path is resolved without leaving its root.

pub mod archive;
pub mod budget;
pub mod cache;
pub mod declared;
pub mod documents;
pub mod hashing;
pub mod imports;
pub mod mapped;
pub mod package;
pub mod package_cache;
pub mod root;
pub mod staging;
pub mod streams;
pub mod tar_format;
pub mod zip_format;

pub use declared::{declared, Declared, Found};
