//! `cargo fuzz run json_answer`: [`weir::fuzz_entry::json_answer`] with libFuzzer's bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir::fuzz_entry::json_answer(data);
});
