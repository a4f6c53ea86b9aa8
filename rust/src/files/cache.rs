//! Verified digests of files under producer roots, so a root checked again (the
//! service admits bundles from the same producer all day) re-hashes only what changed.
//!
//! An entry is keyed by what the kernel reports of the open file: device, inode, size,
//! modification time and change time. Writing to a file moves its ctime, which no
//! user can set back; a file replaced by another has another inode. So an entry only
//! answers for the very bytes it hashed, and a modified file is always re-hashed.
//!
//! Two races are closed on top of that. Timestamps tick at the kernel clock's
//! granularity, so a write in the same tick as the hash could leave the key unchanged
//! (git's "racy" entries): files changed less than `SETTLE` before the hash began are
//! hashed every time, never cached. And a file written while it was being read is not
//! cached either: its key is taken again after the read and must not have moved.

use super::imports::Imports;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::Stat;

/// How long a file must have been left alone before its digest may be cached.
pub const SETTLE: Duration = Duration::from_secs(2);
/// Entries kept per validator; the cache starts over when it is full.
pub const CAPACITY: usize = 1 << 16;

/// What the kernel reports of an open file that changes whenever its bytes may have:
/// the one stat identity of the crate, keying this cache and telling whether a package
/// read for `package_cache` moved while it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Key {
    pub fn of(stat: &Stat) -> Key {
        Key {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size,
            mtime: (stat.st_mtime, stat.st_mtime_nsec as i64),
            ctime: (stat.st_ctime, stat.st_ctime_nsec as i64),
        }
    }

    /// The later of the two times, in nanoseconds since the epoch.
    fn changed_ns(&self) -> i128 {
        let ns = |(s, n): (i64, i64)| s as i128 * 1_000_000_000 + n as i128;
        ns(self.mtime).max(ns(self.ctime))
    }
}

/// What a verified file held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    pub sha256: String,
    pub size: u64,
    /// For Python helpers, what it imports from beside it.
    pub imports: Imports,
}

#[derive(Debug, Default)]
pub struct DigestCache {
    entries: Mutex<HashMap<Key, Digest>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl DigestCache {
    pub fn get(&self, key: &Key) -> Option<Digest> {
        let found = self.lock().get(key).cloned();
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `digest` for `before`, the key taken when the read began, if `after` (taken
    /// once it ended) is the same and the file had settled when the hash began.
    pub fn put(&self, before: Key, after: Key, started: SystemTime, digest: Digest) {
        let Ok(started) = started.duration_since(UNIX_EPOCH) else {
            return;
        };
        let settled = started.saturating_sub(SETTLE).as_nanos() as i128;
        if before != after || before.changed_ns() >= settled {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(before, digest);
    }

    /// (hits, misses, entries) since the validator was built.
    pub fn stats(&self) -> (u64, u64, usize) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            self.lock().len(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Digest>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ctime: i64) -> Key {
        Key {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (ctime - 10, 0),
            ctime: (ctime, 0),
        }
    }

    fn digest() -> Digest {
        Digest {
            sha256: "ab".into(),
            size: 3,
            imports: Imports::default(),
        }
    }

    #[test]
    fn only_settled_unchanged_files_are_kept() {
        let cache = DigestCache::default();
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        cache.put(key(999), key(999), now, digest()); // changed 1 s before: too fresh
        assert_eq!(cache.get(&key(999)), None);
        cache.put(key(990), key(995), now, digest()); // written while read
        assert_eq!(cache.get(&key(990)), None);
        cache.put(key(990), key(990), now, digest());
        assert_eq!(cache.get(&key(990)), Some(digest()));
        assert_eq!(cache.get(&key(991)), None);
        assert_eq!(cache.stats(), (1, 3, 1));
    }
}
