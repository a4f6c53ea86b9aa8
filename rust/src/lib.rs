//! jobgate's validator core. `lib.rs` only declares the modules; see each module's
//! docs for what it owns. The pure-Rust core has no Python types; the boundary lives
//! in `python` and is built only with the `python` feature.

pub mod config;
pub mod document;
pub mod facts;
pub mod files;
pub mod kinds;
pub mod locate;
pub mod node;
pub mod pointer;
pub mod report;
pub mod rules;
pub mod schema;
pub mod secrets;
pub mod validator;
pub mod wire;
pub mod yaml;

#[cfg(feature = "python")]
mod python;

pub use config::CoreConfig;
pub use kinds::{Admission, Kind};
pub use report::{Report, Severity, Violation};
pub use validator::Validator;
