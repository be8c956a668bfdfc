//! The coverage-guided fuzz targets' saved inputs as plain tests: every file under
//! `fuzz/corpus/<target>/` (the minimized corpus `scripts/fuzz.sh` keeps) and
//! `fuzz/artifacts/<target>/` (inputs that once crashed, each fixed) goes through the same
//! `weir::fuzz_entry` function the target calls, on the stable toolchain. A panic fails the
//! test and names the file.
#![cfg(feature = "fuzzing")]

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
    }
    files.sort();
    files
}

fn replay(target: &str, mut entry: impl FnMut(&[u8])) {
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "fuzz/corpus/{target} has no inputs: the corpus is committed with the targets"
    );
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| entry(&data)));
        assert!(caught.is_ok(), "{} panicked", f.display());
    }
}

#[test]
fn config_corpus() {
    replay("config", weir::fuzz_entry::config);
}

#[test]
fn json_answer_corpus() {
    replay("json_answer", weir::fuzz_entry::json_answer);
}

#[test]
fn queue_row_corpus() {
    replay("queue_row", weir::fuzz_entry::queue_row);
}

#[test]
fn http1_corpus() {
    let mut answered = 0;
    replay("http1", |data| {
        if !weir::fuzz_entry::http1(data).is_empty() {
            answered += 1;
        }
    });
    // Most saved inputs get some answer (a status line or a problem); an engine that stopped
    // answering would fail every one silently otherwise.
    assert!(answered > 0, "no input got an answer");
}
