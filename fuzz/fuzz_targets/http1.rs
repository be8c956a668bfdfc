//! `cargo fuzz run http1`: [`weir::fuzz_entry::http1`] with libFuzzer's bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir::fuzz_entry::http1(data);
});
