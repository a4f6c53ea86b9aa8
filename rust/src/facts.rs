//! What admission needs to know about a document besides its verdict: the project and
//! GPU count for the quota (counted by `gpus`, as the rules count it), the parts of the
//! job id, the record's image, network and action, and the document rewritten with the
//! authenticated owner. Read from the same tape the rules walk, so the service never
//! turns a document into Python objects: each kind's module reads its own
//! (`kinds::facts`, through `kinds::behaviour`).

use std::io::Write;

use crate::kind::Kind;
use crate::node::{Type, Value};
use crate::schema::COUNT_MAX;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    pub kind: Option<Kind>,
    pub project: String,
    /// What the quota charges: the GPUs the rules judged (`gpus::of_jobspec`,
    /// `gpus::of_bundle`).
    pub gpus: u64,
    pub network_arch: String,
    pub action: String,
    pub image: String,
    pub upload_excludes: Vec<String>,
}

pub fn text(v: Option<Value<'_, '_>>) -> String {
    v.and_then(|v| v.as_str())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What the quota charges for `total` (from `gpus`): 0 when a count cannot be charged
/// or the total is past `COUNT_MAX`, for such a document is refused (`forge.quota.job`,
/// locked) and never charged.
pub fn charged(total: Option<u64>) -> u64 {
    total.filter(|&t| t <= COUNT_MAX as u64).unwrap_or(0)
}

/// The document as JSON with `/metadata/owner` set to `owner` (JobSpecs; other kinds
/// are written back unchanged).
pub fn stamp_owner(root: Value<'_, '_>, owner: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let stamp = Kind::detect(root) == Some(Kind::JobSpec);
    write(root, &mut out, if stamp { Some(owner) } else { None }, 0);
    out
}

/// Writes `v` as compact JSON. `owner`, when given, is stamped as `metadata.owner`:
/// passed at the root (depth 0) and on to `metadata` (depth 1), where it replaces the
/// `owner` key or is appended; every other value is written as read.
fn write(v: Value<'_, '_>, out: &mut Vec<u8>, owner: Option<&str>, depth: usize) {
    match v.ty() {
        Type::Object(_) => {
            out.push(b'{');
            let mut first = true;
            let mut stamped = false;
            for (key, value) in v.entries() {
                if !first {
                    out.push(b',');
                }
                first = false;
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                match (owner, depth, key) {
                    (Some(o), 0, "metadata") if value.is_object() => write(value, out, Some(o), 1),
                    (Some(o), 1, "owner") => {
                        let _ = serde_json::to_writer(&mut *out, o);
                        stamped = true;
                    }
                    _ => write(value, out, None, depth + 1),
                }
            }
            if let (Some(o), 1, false) = (owner, depth, stamped) {
                if !first {
                    out.push(b',');
                }
                let _ = write!(out, "\"owner\":");
                let _ = serde_json::to_writer(&mut *out, o);
            }
            out.push(b'}');
        }
        Type::Array(_) => {
            out.push(b'[');
            for (i, item) in v.items().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out, None, depth + 1);
            }
            out.push(b']');
        }
        Type::Str(s) => {
            let _ = serde_json::to_writer(&mut *out, s);
        }
        _ => out.extend_from_slice(v.describe().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::with_document;
    use crate::limits::Limits;

    #[test]
    fn reads_facts_and_stamps_the_owner() {
        let doc = br#"{"apiVersion":"forge/v2","metadata":{"name":"n","project":"lab","owner":"mallory"},"spec":{"recipe":{"name":"nemo-rl/grpo","version":"1"},"source":{"exp":"experiments/x/"},"resources":{"pools":[{"name":"a","nodes":2,"gpus_per_node":8},{"name":"b"}]}}}"#;
        with_document(doc, &Limits::default(), |doc| {
            let root = doc.root;
            let f = crate::kinds::facts(root, None);
            assert_eq!(
                (
                    f.project.as_str(),
                    f.gpus,
                    f.network_arch.as_str(),
                    f.action.as_str()
                ),
                ("lab", 17, "grpo", "x")
            );
            assert_eq!(f.image, "recipe:nemo-rl/grpo@1");
            let stamped: serde_json::Value =
                serde_json::from_slice(&stamp_owner(root, "alice")).unwrap();
            assert_eq!(stamped["metadata"]["owner"], "alice");
            assert_eq!(stamped["spec"]["resources"]["pools"][0]["nodes"], 2);
        })
        .unwrap();
        with_document(
            br#"{"apiVersion":"forge/v2","metadata":{"name":"n"},"x":1.5}"#,
            &Limits::default(),
            |doc| {
                let root = doc.root;
                let stamped: serde_json::Value =
                    serde_json::from_slice(&stamp_owner(root, "bob")).unwrap();
                assert_eq!(stamped["metadata"]["owner"], "bob");
                assert_eq!(stamped["x"], 1.5);
            },
        )
        .unwrap();
    }
}
