// The example shows every table, `[gateway]` and `[team]` included: it validates where they
// are built.
#![cfg(all(feature = "gateway", feature = "team"))]
//! The README's configuration example is a valid config (docs that match the code).

#[test]
fn readme_config_example_validates() {
    let readme = include_str!("../README.md");
    let start = readme
        .find("## Configuration")
        .expect("a Configuration section");
    let block = &readme[start..];
    let open = block.find("```toml\n").expect("a toml example") + "```toml\n".len();
    let close = block[open..].find("```").unwrap();
    let example = &block[open..open + close];
    let s = weir::config::parse_str(example, "README.md").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.listen.port(), weir::config::DEFAULT_PORT);
    assert!(s.upstream_proxy.is_some());
}
