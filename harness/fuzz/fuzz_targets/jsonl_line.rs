//! verl's file-logger JSONL records (`{"step": 3, "data": {...}}`, `null` for non-finite) on
//! arbitrary text: a record or an error, never a panic; each value is read exactly once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlharness::run::capture::parse_jsonl_line;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.split('\n') {
        if let Ok(r) = parse_jsonl_line(line) {
            for (k, v) in &r.values {
                assert!(
                    !v.is_nan() || r.non_finite.contains(k),
                    "NaN for {k} without a null in the record"
                );
            }
        }
    }
});
