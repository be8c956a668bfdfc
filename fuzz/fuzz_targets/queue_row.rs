//! `cargo fuzz run queue_row`: [`weir::fuzz_entry::queue_row`] with libFuzzer's bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir::fuzz_entry::queue_row(data);
});
