//! placeholder created by the lead so the workspace loads; replace freely
fn main() {}
