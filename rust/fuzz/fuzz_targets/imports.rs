//! The sibling-import scanner (`files::imports`) against Python's own parser, `ast`,
//! run in-process on the same source.
//!
//! Must hold for any helper source: no panic, in bounded memory; fed in pieces of any
//! size it finds what it finds in one piece; and for every source Python can compile
//! (without a foreign coding declaration, which the scanner reports and jobgate refuses),
//! the scanner finds every module path `ast` shows an import statement can load beside
//! the helper (one missed is a sibling staged unverified) and no other (one more is a
//! package refused for a file it never imports).
#![no_main]

use std::collections::BTreeSet;

use jobgate_core::files::imports::ImportScanner;
use jobgate_fuzz::python;
use libfuzzer_sys::fuzz_target;

fn scan(pieces: impl Iterator<Item = impl AsRef<[u8]>>) -> jobgate_core::files::imports::Imports {
    let mut scanner = ImportScanner::default();
    for p in pieces {
        scanner.feed(p.as_ref());
    }
    scanner.finish()
}

fuzz_target!(init: python::init(), |data: &[u8]| {
    let Some((&size, source)) = data.split_first() else { return };
    let whole = scan(std::iter::once(source));
    let pieces = scan(source.chunks(usize::from(size % 64) + 1));
    assert_eq!(whole, pieces, "read in pieces of {} bytes, the scanner finds other imports", size % 64 + 1);
    if whole.encoding.is_some() {
        return;
    }
    let Ok(theirs) = python::ask("sibling_imports", source, &[]) else {
        return; // Python cannot compile it: it never runs, whatever it imports
    };
    let theirs: BTreeSet<String> = serde_json::from_str(&theirs).expect("a JSON list");
    let mine: BTreeSet<String> = whole.modules.iter().cloned().collect();
    let missed: Vec<&String> = theirs.difference(&mine).collect();
    let more: Vec<&String> = mine.difference(&theirs).collect();
    assert!(
        missed.is_empty() && more.is_empty(),
        "source {:?}: the scanner misses {missed:?} and adds {more:?} (ast: {theirs:?})",
        String::from_utf8_lossy(source)
    );
});
