//! `weir secret rotate`: replaces this install's control secret in the keychain. A running Weir
//! keeps the secret it read at start until it is restarted; the CLI and the tray read the new
//! one at once, so restart Weir right after rotating.

use super::args::SecretCmd;
use super::serve::load;
use super::{ServeArgs, EXIT_CONFIG};
use std::process::ExitCode;
use weir::secrets::{Account, Namespace};

pub fn run(cmd: SecretCmd, args: ServeArgs) -> ExitCode {
    let data_dir = match load(&args) {
        Ok(l) => l.data_dir,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match cmd {
        SecretCmd::Rotate => {
            let keychain = Namespace::for_data_dir(&data_dir).keychain();
            let new = weir::engine::new_secret();
            match keychain.set(Account::ControlSecret.as_str(), &new) {
                Ok(()) => {
                    println!(
                        "A new control secret is stored in the keychain ({}).",
                        keychain.service()
                    );
                    println!("A running Weir keeps its old secret until it is restarted: restart `weir serve` or the tray now. Dashboard tabs need the new link `weir serve` prints.");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!(
                        "weir: cannot store a new control secret in the keychain: {e}. {}",
                        e.fix()
                    );
                    ExitCode::FAILURE
                }
            }
        }
    }
}
