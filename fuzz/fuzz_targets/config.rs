//! `cargo fuzz run config`: [`weir::fuzz_entry::config`] with libFuzzer's bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir::fuzz_entry::config(data);
});
