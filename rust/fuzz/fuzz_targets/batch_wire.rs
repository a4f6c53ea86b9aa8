//! The in-place decoder of `AdmitBatchRequest` (`batch_wire::decode`), the service's
//! hot path for dry-run batches: request bytes straight off the network.
//!
//! Must hold for any bytes: no panic; `decode` takes the request exactly when prost,
//! decoding the messages as the protos declare them, reads a dry run of raw documents
//! without packages, and then finds the same documents, with the same bodies and
//! kinds, in the same order; every body it returns is a slice of the request itself.
#![no_main]

use jobgate_core::batch_wire::{decode, reference::by_prost};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let expected = by_prost(data);
    let batch = decode(data);
    let found = batch.as_ref().map(|b| {
        b.documents()
            .map(|(raw, kind)| {
                let inside = data.as_ptr_range();
                assert!(
                    raw.is_empty()
                        || (inside.contains(&raw.as_ptr()) && raw.as_ptr_range().end <= inside.end),
                    "a document body is not a slice of the request"
                );
                (raw.to_vec(), kind)
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(found, expected, "decode reads otherwise than prost");
    if let Some(b) = batch {
        assert_eq!(b.len(), b.documents().count());
        assert_eq!(b.is_empty(), b.len() == 0);
    }
});
