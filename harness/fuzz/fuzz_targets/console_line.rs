//! verl's console metric lines (`(TaskRunner pid=1) step:3 - a:np.float64(0.5) - ...`, with
//! ANSI colours and Ray prefixes) on arbitrary text: a record or `None`, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlharness::run::capture::{parse_console_line, parse_python_number, strip_ansi};
use rlharness::model::metrics::StepMetrics;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = strip_ansi(&text);
    let _ = parse_python_number(&text);
    for line in text.split('\n') {
        if let Some(record) = parse_console_line(line) {
            let step = record.step;
            let m = StepMetrics::from(record);
            assert_eq!(m.step, step);
        }
    }
});
