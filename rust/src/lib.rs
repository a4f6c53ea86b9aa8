//! jobgate's validator core. `lib.rs` only declares the modules; see each module's
//! docs for what it owns. The pure-Rust core has no Python types; the boundary lives
//! in `python` and is built only with the `python` feature.
//!
//! The modules form no import circle (`module_graph` tests it): the vocabulary at the
//! bottom (`rules`, `limits`, `text`, `seen`, `tape`, `node`, `pointer`, `kind`,
//! `admission`, `paths`, `secrets`, `config`, `locate`, `job_ids`) imports nothing above it;
//! `report`, `refusal`, `quota`, `collect` (the collector every rule reports through),
//! `schema` and `facts` build on it, and `gpus` on `schema`; the parser (`document`,
//! `yaml`), the rules and facts of each kind (`kinds`), `recipe_status` and the file
//! checks (`files`) on those; `validator` ties them together, and `batch_wire` and `python`
//! face the outside.
//!
//! `unsafe` is denied here and allowed only in the modules that need it (`tape`,
//! `files::mapped`), each of which says why.

#![deny(unsafe_code)]

pub mod admission;
pub mod batch_wire;
pub mod collect;
pub mod config;
pub mod document;
pub mod facts;
pub mod files;
pub mod gpus;
pub mod job_ids;
pub mod kind;
pub mod kinds;
pub mod limits;
pub mod locate;
pub mod node;
mod parallel;
pub mod paths;
pub mod pointer;
pub mod quota;
pub mod recipe_status;
pub mod refusal;
pub mod report;
pub mod rules;
pub mod schema;
pub mod secrets;
pub mod seen;
pub mod tape;
pub mod text;
pub mod validator;
pub mod yaml;

#[cfg(feature = "python")]
mod python;

#[cfg(test)]
mod module_graph;

pub use admission::AdmissionContext;
pub use config::CoreConfig;
pub use kind::Kind;
pub use report::{Report, Violation};
pub use rules::{Rule, Severity};
pub use validator::Validator;
