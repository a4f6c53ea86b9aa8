//! Packages verified once: a gateway attaches the same helper package to thousands of
//! submissions, so what reading a package found (its members, their digests and
//! imports, its bundle document) is kept, keyed by the BLAKE3 hash of the package's
//! bytes. Hashing the bytes costs a fraction of inflating and SHA-256-hashing every
//! member, and two packages with the same bytes hold the same members, so a hit gives
//! exactly the report a miss would. Only packages read whole are kept (a refused one
//! is read again, and its message names its path); the cache is bounded by bytes and
//! drops the least recently used. A validator has its own cache, so a configuration
//! reload (new limits) starts afresh.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::package::Contents;
use crate::limits::DEFAULT_PACKAGE_CACHE_BYTES;

pub type Key = [u8; 32];

/// The content key of a file: BLAKE3 of its bytes, read in bounded blocks.
pub fn key_of(file: &mut File) -> io::Result<Key> {
    let mut hasher = blake3::Hasher::new();
    hash_into(&mut hasher, file)?;
    Ok(*hasher.finalize().as_bytes())
}

fn hash_into(hasher: &mut blake3::Hasher, file: &mut File) -> io::Result<()> {
    let mut buffer = vec![0u8; 256 << 10];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                hasher.update(&buffer[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One item to key: its name, and its bytes, or `None` to read them from the file the
/// name is a path of.
pub type Keyed = (String, Option<Vec<u8>>);

/// Content keys of many items at once (`jobgate revalidate --cache`): BLAKE3 of
/// `salt`, the item's name, a NUL and its bytes, hashed on every core. `None` for a
/// file that is not a regular file or cannot be read; whoever checks it says why.
/// Keying an archive of small items is dominated by opening and reading them, which
/// is why it is done here in one call and not one Python call per item.
pub fn content_keys(salt: &[u8], items: &[Keyed]) -> Vec<Option<Key>> {
    use rayon::prelude::*;
    items
        .par_iter()
        .with_min_len(64)
        .map(|(name, data)| {
            let mut hasher = blake3::Hasher::new();
            hasher.update(salt).update(name.as_bytes()).update(b"\0");
            match data {
                Some(bytes) => {
                    hasher.update(bytes);
                }
                None => {
                    let mut file = super::archive::open_regular(std::path::Path::new(name)).ok()?;
                    hash_into(&mut hasher, &mut file).ok()?;
                }
            }
            Some(*hasher.finalize().as_bytes())
        })
        .collect()
}

struct Entry {
    contents: Arc<Contents>,
    weight: usize,
    used: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    weight: usize,
    clock: u64,
}

pub struct PackageCache {
    max_bytes: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Default for PackageCache {
    fn default() -> Self {
        PackageCache::new(DEFAULT_PACKAGE_CACHE_BYTES)
    }
}

impl std::fmt::Debug for PackageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackageCache")
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

/// About the memory an entry holds.
fn weight(contents: &Contents) -> usize {
    let bundle = contents
        .bundle
        .as_ref()
        .map_or(0, |(n, d)| n.len() + d.len());
    let members: usize = contents
        .members
        .iter()
        .map(|m| {
            160 + m.name.len()
                + m.imports
                    .modules
                    .iter()
                    .map(|s| s.len() + 24)
                    .sum::<usize>()
        })
        .sum();
    let violations: usize = contents
        .violations
        .iter()
        .map(|v| 64 + v.message.len() + v.field.len())
        .sum();
    256 + bundle + members + violations
}

impl PackageCache {
    pub fn new(max_bytes: usize) -> Self {
        PackageCache {
            max_bytes,
            inner: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// False when built with no memory: nothing would ever be kept.
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    pub fn get(&self, key: &Key) -> Option<Arc<Contents>> {
        let mut inner = self.inner.lock().ok()?;
        inner.clock += 1;
        let now = inner.clock;
        let found = inner.entries.get_mut(key).map(|e| {
            e.used = now;
            Arc::clone(&e.contents)
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub fn put(&self, key: Key, contents: Arc<Contents>) {
        let w = weight(&contents);
        if w > self.max_bytes / 4 {
            return; // one package must not push out all the others
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.clock += 1;
        let used = inner.clock;
        if let Some(old) = inner.entries.insert(
            key,
            Entry {
                contents,
                weight: w,
                used,
            },
        ) {
            inner.weight -= old.weight;
        }
        inner.weight += w;
        while inner.weight > self.max_bytes {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.weight -= e.weight;
            }
        }
    }

    /// (hits, misses, entries)
    pub fn stats(&self) -> (u64, u64, usize) {
        let entries = self.inner.lock().map_or(0, |i| i.entries.len());
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            entries,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::package::Member;

    fn contents(name: &str, size: usize) -> Arc<Contents> {
        Arc::new(Contents {
            bundle: Some(("bundle.json".into(), vec![b' '; size])),
            members: vec![Member {
                name: name.into(),
                kind: crate::files::archive::MemberKind::Regular,
                found: None,
                imports: Default::default(),
            }],
            violations: vec![],
        })
    }

    #[test]
    fn content_keys_cover_salt_name_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        std::fs::write(&path, b"{}").unwrap();
        let name = path.to_str().unwrap().to_string();
        let keys = content_keys(
            b"salt",
            &[
                (name.clone(), None),
                (name.clone(), Some(b"{}".to_vec())),
                ("other".into(), Some(b"{}".to_vec())),
                (dir.path().to_str().unwrap().into(), None),
                ("/no/such/file".into(), None),
            ],
        );
        let expected = *blake3::hash(format!("salt{name}\0{{}}").as_bytes()).as_bytes();
        assert_eq!(keys[0], Some(expected), "read from the file");
        assert_eq!(keys[1], Some(expected), "given bytes key as the file's");
        assert_ne!(keys[2], Some(expected), "the name is part of the key");
        assert_eq!(keys[3], None, "a directory is not keyed");
        assert_eq!(keys[4], None, "a missing file is not keyed");
        assert_ne!(content_keys(b"other", &[(name, None)])[0], Some(expected));
    }

    #[test]
    fn keeps_what_fits_and_drops_the_least_recently_used() {
        let cache = PackageCache::new(40_000);
        cache.put([1; 32], contents("a", 9_000));
        cache.put([2; 32], contents("b", 9_000));
        cache.put([3; 32], contents("c", 9_000));
        assert!(cache.get(&[1; 32]).is_some()); // 1 is now the most recently used
        cache.put([4; 32], contents("d", 9_000));
        cache.put([5; 32], contents("e", 9_000));
        assert!(cache.get(&[2; 32]).is_none());
        assert!(cache.get(&[1; 32]).is_some());
        assert!(cache.get(&[5; 32]).is_some());
        // Too large for its share: never kept.
        cache.put([6; 32], contents("f", 20_000));
        assert!(cache.get(&[6; 32]).is_none());
        let (hits, misses, entries) = cache.stats();
        assert_eq!((hits, misses), (3, 2));
        assert!(entries <= 4);
    }
}
