//! Rebuild when the embedded dashboard (`ui/`) changes (include_dir does not tell Cargo), and
//! write the man pages (`$OUT_DIR/man/weir.1`, `weir-serve.1`, …) with clap_mangen from the
//! CLI's own definitions: `src/cli/args.rs` depends only on clap, so it is included here as is
//! and the pages cannot drift from `weir --help`. `scripts/package.sh` installs them.

#[allow(dead_code)]
#[path = "src/cli/args.rs"]
mod args;

use clap::CommandFactory;

fn main() {
    println!("cargo:rerun-if-changed=ui");
    println!("cargo:rerun-if-changed=src/cli/args.rs");
    let Some(out) = std::env::var_os("OUT_DIR") else {
        eprintln!("build.rs: cargo did not set OUT_DIR");
        std::process::exit(1);
    };
    let dir = std::path::Path::new(&out).join("man");
    if let Err(e) = std::fs::create_dir_all(&dir)
        .and_then(|()| clap_mangen::generate_to(args::Cli::command(), &dir))
    {
        // A build script has no caller to return to; the message is what the user needs.
        eprintln!(
            "build.rs: cannot write the man pages to {}: {e}",
            dir.display()
        );
        std::process::exit(1);
    }
}
