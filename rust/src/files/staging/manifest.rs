//! What a staging holds: its entries, written down as `.jobgate-manifest.json` beside
//! the files, and read back when a staging is found already in place.

use std::path::PathBuf;

pub const MANIFEST: &str = ".jobgate-manifest.json";

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManifestEntry {
    pub destination: String,
    pub source: String,
    pub sha256: String,
    pub size: u64,
}

#[derive(Debug)]
pub struct Staged {
    pub directory: PathBuf,
    pub reused: bool,
    pub entries: Vec<ManifestEntry>,
}

pub fn manifest_json(entries: &[ManifestEntry]) -> String {
    let files: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| serde_json::json!({"source": e.source, "destination": e.destination, "sha256": e.sha256, "size": e.size}))
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({"files": files})).unwrap_or_default() + "\n"
}

pub(super) fn parse_manifest(data: &[u8]) -> Option<Vec<ManifestEntry>> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    let mut entries: Vec<ManifestEntry> = value
        .get("files")?
        .as_array()?
        .iter()
        .map(|f| {
            Some(ManifestEntry {
                destination: f.get("destination")?.as_str()?.into(),
                source: f.get("source")?.as_str()?.into(),
                sha256: f.get("sha256")?.as_str()?.into(),
                size: f.get("size")?.as_u64()?,
            })
        })
        .collect::<Option<_>>()?;
    entries.sort();
    Some(entries)
}
