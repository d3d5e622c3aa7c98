//! The DSSST1 decoder on arbitrary bytes: it must answer an error, never panic, and whatever
//! it accepts must survive a re-encode.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rlharness_arctic::wire::dssst1::{header_extent, header_summary};
use rlharness_arctic::wire::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let _ = header_extent(data);
    let _ = header_summary(data);
    if let Ok(node) = decode(Bytes::copy_from_slice(data)) {
        let _ = node.summary();
        let _ = node.to_json();
        if let Ok(bytes) = encode(&node) {
            let again = decode(Bytes::from(bytes));
            assert!(
                again.is_ok(),
                "a re-encoded frame no longer decodes: {again:?}"
            );
        }
    }
});
