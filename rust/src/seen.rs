//! `Seen`: the set of names a rule has met so far in one document (pool names, plugin
//! ids, suites). Documents hold a few of each, so the first ones are kept in place and
//! compared directly, with no allocation or hashing; past `FEW` a hash set takes over,
//! so thousands still cost linear time.
//!
//! A leaf of the crate: imports nothing from it.

use std::collections::HashSet;
use std::hash::Hash;

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

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }
}
