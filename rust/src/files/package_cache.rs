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

/// The memory the cache may hold, about.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

pub type Key = [u8; 32];

/// The content key of a file: BLAKE3 of its bytes, read in bounded blocks.
pub fn key_of(file: &mut File) -> io::Result<Key> {
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; 256 << 10];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Ok(*hasher.finalize().as_bytes()),
            Ok(n) => {
                hasher.update(&buffer[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
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
        PackageCache::new(DEFAULT_MAX_BYTES)
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
                kind: crate::files::package::MemberKind::Regular,
                found: None,
                imports: Default::default(),
            }],
            violations: vec![],
        })
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
