//! Rebuild when the embedded dashboard (`ui/`) changes: include_dir does not tell Cargo.
fn main() {
    println!("cargo:rerun-if-changed=ui");
}
