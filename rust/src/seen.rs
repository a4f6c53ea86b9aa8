//! `Seen`: the set of names a rule has met so far in one document (pool names, plugin
//! ids, suites), and `FirstSeen`, the first value met for each name (a plugin leaf's
//! first owner). Documents hold a few of each, so the first ones are kept in place and
//! compared directly, with no allocation or hashing; past `FEW` a hash set or map takes
//! over, so thousands still cost linear time.
//!
//! A leaf of the crate: imports nothing from it.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Enough to name the first few in a message (`node::SHOWN`).
const FEW: usize = 8;

pub struct Seen<T> {
    few: [Option<T>; FEW],
    len: usize,
    many: HashSet<T>,
}

impl<T: Copy + Eq + Hash> Seen<T> {
    pub fn new() -> Self {
        Seen {
            few: [None; FEW],
            len: 0,
            many: HashSet::new(),
        }
    }

    pub fn contains(&self, item: &T) -> bool {
        self.few[..self.len.min(FEW)].contains(&Some(*item)) || self.many.contains(item)
    }

    /// How many items were added.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first items added, in the order they were added: all of them up to `FEW`
    /// (enough for a message that names the first few).
    pub fn first(&self) -> impl Iterator<Item = T> + '_ {
        self.few[..self.len.min(FEW)].iter().flatten().copied()
    }

    /// Adds `item`; `false` when it was there already.
    pub fn insert(&mut self, item: T) -> bool {
        if self.contains(&item) {
            return false;
        }
        if self.len < FEW {
            self.few[self.len] = Some(item);
        } else {
            self.many.insert(item);
        }
        self.len += 1;
        true
    }
}

impl<T: Copy + Eq + Hash> Default for Seen<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Eq + Hash> FromIterator<T> for Seen<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut seen = Seen::new();
        for item in iter {
            seen.insert(item);
        }
        seen
    }
}

/// The first value recorded for each key.
pub struct FirstSeen<K, V> {
    few: [Option<(K, V)>; FEW],
    len: usize,
    many: HashMap<K, V>,
}

impl<K: Copy + Eq + Hash, V: Copy> FirstSeen<K, V> {
    pub fn new() -> Self {
        FirstSeen {
            few: [None; FEW],
            len: 0,
            many: HashMap::new(),
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        self.few[..self.len.min(FEW)]
            .iter()
            .flatten()
            .find(|(k, _)| k == key)
            .map(|&(_, v)| v)
            .or_else(|| self.many.get(key).copied())
    }

    /// Records `value` for `key`, unless a value was recorded for it already.
    pub fn keep_first(&mut self, key: K, value: V) {
        if self.get(&key).is_some() {
            return;
        }
        if self.len < FEW {
            self.few[self.len] = Some((key, value));
        } else {
            self.many.insert(key, value);
        }
        self.len += 1;
    }
}

impl<K: Copy + Eq + Hash, V: Copy> Default for FirstSeen<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_value_few_and_many() {
        for n in [0usize, 1, FEW - 1, FEW, FEW + 1, 100] {
            let mut first = FirstSeen::new();
            for i in 0..n {
                assert_eq!(first.get(&i), None);
                first.keep_first(i, i * 10);
                first.keep_first(i, i * 10 + 1);
            }
            for i in 0..n {
                assert_eq!(first.get(&i), Some(i * 10));
            }
            assert_eq!(first.get(&n), None);
        }
    }

    #[test]
    fn remembers_few_and_many() {
        for n in [0usize, 1, FEW - 1, FEW, FEW + 1, 100] {
            let mut seen = Seen::new();
            for i in 0..n {
                assert!(seen.insert(i), "{i} is new");
                assert!(!seen.insert(i), "{i} is seen");
            }
            for i in 0..n {
                assert!(seen.contains(&i));
            }
            assert!(!seen.contains(&n));
            assert_eq!(seen.len(), n);
            assert!(seen.first().eq(0..n.min(FEW)));
        }
    }
}
