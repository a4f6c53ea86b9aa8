//! The compressed streams a tar package travels in (`files::streams`): every gzip
//! member and every zstd frame, against flate2's multi-member gzip decoder and
//! libzstd's multi-frame decoder on the same bytes.
//!
//! Must hold: whatever jobgate inflates, the reference inflates to the same bytes (no
//! member or frame skipped, nothing appended read); reading in pieces of any size gives
//! what one read gives; work stays within the package's inflate budget.
#![no_main]

use std::io::{BufReader, Read};

use jobgate_core::files::budget::Meter;
use jobgate_core::files::streams::{GzipMembers, ZstdFrames};
use jobgate_core::limits::PackageLimits;
use libfuzzer_sys::fuzz_target;

/// Reads all of `r` in pieces of the given sizes (a zero-sized read included).
fn read_in(mut r: impl Read, sizes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 300];
    let mut i = 0;
    loop {
        // Now and then an empty read, never two in a row.
        let size = sizes
            .get(i % sizes.len().max(1))
            .map_or(256, |s| usize::from(*s) % 300);
        let size = if i % 2 == 1 { size.max(1) } else { size };
        i += 1;
        let n = r.read(&mut buf[..size])?;
        if n == 0 && size > 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (sizes, stream) = rest.split_at(rest.len().min(usize::from(pick >> 4)));
    let limits = PackageLimits::default();
    let meter = Meter::new(&limits, stream.len() as u64, None);
    let budget = meter.budget();
    let gzip = pick & 1 == 0;
    let mine = if gzip {
        read_in(GzipMembers::new(BufReader::new(stream), &meter), sizes)
    } else {
        match ZstdFrames::new(BufReader::new(stream), &meter) {
            Ok(frames) => read_in(frames, sizes),
            Err(e) => Err(e),
        }
    };
    let Ok(mine) = mine else { return };
    assert!(
        mine.len() as u64 <= budget,
        "inflated {} bytes past the budget of {budget}",
        mine.len()
    );
    let mut theirs = Vec::new();
    let reference = if gzip {
        flate2::read::MultiGzDecoder::new(stream)
            .take(budget + 1)
            .read_to_end(&mut theirs)
    } else {
        zstd::stream::read::Decoder::new(stream)
            .and_then(|d| d.take(budget + 1).read_to_end(&mut theirs))
    };
    if let Err(e) = reference {
        panic!(
            "jobgate inflates {} bytes; the reference refuses the stream: {e}",
            mine.len()
        );
    }
    assert!(
        mine == theirs,
        "jobgate inflates {} bytes, the reference {}: they differ",
        mine.len(),
        theirs.len()
    );
    // One read after another gives the same.
    let meter = Meter::new(&limits, stream.len() as u64, None);
    let again = if gzip {
        read_in(
            GzipMembers::new(BufReader::with_capacity(7, stream), &meter),
            &[255],
        )
    } else {
        ZstdFrames::new(BufReader::with_capacity(7, stream), &meter)
            .and_then(|f| read_in(f, &[255]))
    };
    assert!(
        again.ok().as_ref() == Some(&mine),
        "another buffer size reads other bytes"
    );
});
