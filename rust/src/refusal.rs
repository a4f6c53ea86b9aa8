//! Inputs refused before any rule reads them, and the one violation that says why:
//! `json.syntax` (not a readable document), `limits.size` (too large), `limits.depth`
//! (too deep), `forge.project.forbidden` (a retry whose first admission is in a project
//! the account lost). The parser, the package readers, the rules and the Python layer
//! (a file over the size limit is refused before it is read whole) all take these
//! violations from here, so each refusal's rule and wording live in one place.

use crate::kind::{Charge, Kind};
use crate::node::{few, quote};
use crate::pointer::ptr;
use crate::report::Violation;
use crate::rules::Rule;

/// Why a document could not be read.
#[derive(Debug, PartialEq)]
pub enum DecodeError {
    Syntax(String),
    Size(String),
    Depth(usize),
}

impl DecodeError {
    pub fn into_violation(self) -> Violation {
        match self {
            DecodeError::Syntax(m) => unreadable(m),
            DecodeError::Size(m) => oversized(m),
            DecodeError::Depth(limit) => Violation::new(
                Rule::LimitsDepth,
                String::new(),
                format!("the document nests deeper than {limit} levels; flatten it or raise limits.max_depth"),
            ),
        }
    }
}

/// An input that cannot be read as a document (or a package that cannot be read as
/// one); `reason` says why.
pub fn unreadable(reason: String) -> Violation {
    Violation::new(Rule::JsonSyntax, String::new(), reason)
}

/// An input over a size limit; `message` says which.
pub fn oversized(message: String) -> Violation {
    Violation::new(Rule::LimitsSize, String::new(), message)
}

/// A document of `size` bytes (`None`: known only to exceed the limit, such as a
/// stream) over `limit`.
pub fn too_large(size: Option<u64>, limit: u64) -> Violation {
    let size = match size {
        Some(size) => format!("{size} bytes"),
        None => format!("more than {limit} bytes"),
    };
    oversized(format!(
        "the document is {size}, over the limit of {limit} bytes"
    ))
}

/// An unpacked package (a directory) whose files hold `size` bytes, over `limit`.
pub fn package_too_large(package: &str, size: u64, limit: u64) -> Violation {
    oversized(format!("the package {package} holds {size} bytes, over the limit of {limit} bytes (limits.max_package_bytes)"))
}

/// An admission into `project`, which is not among the projects the account may submit
/// to (`granted`), refused before its document is read (a retry): worded and placed as
/// the rule reports it (`forbidden_at`, `forbidden_message`).
pub fn project_forbidden(kind: Option<Kind>, project: &str, granted: &[String]) -> Violation {
    Violation::new(
        Rule::ForgeProjectForbidden,
        forbidden_at(kind),
        forbidden_message(project, granted),
    )
}

/// Where `forge.project.forbidden` is placed for a document of `kind`: at a JobSpec's
/// `metadata.project`, and at the document for a kind that names no project (a
/// spec-bundle goes to its account's).
pub fn forbidden_at(kind: Option<Kind>) -> String {
    match kind.map(Kind::charge) {
        Some(Charge::OwnProject { project, .. }) => ptr![project].to_string(),
        Some(Charge::AccountHome { .. } | Charge::Nothing) | None => String::new(),
    }
}

/// What `forge.project.forbidden` says of `project`, outside `granted`.
pub fn forbidden_message(project: &str, granted: &[String]) -> String {
    format!(
        "this account may not submit to project {}; it may submit to {}",
        quote(project),
        few(granted)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_rule_and_the_sizes() {
        let v = too_large(Some(12), 10);
        assert_eq!(
            (v.rule, v.message.as_str()),
            (
                Rule::LimitsSize,
                "the document is 12 bytes, over the limit of 10 bytes"
            )
        );
        assert_eq!(
            too_large(None, 10).message,
            "the document is more than 10 bytes, over the limit of 10 bytes"
        );
        assert_eq!(unreadable("x".into()).rule, Rule::JsonSyntax);
    }
}
