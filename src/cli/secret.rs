//! `weir secret rotate`: replaces this install's control secret in its secret store. A running
//! Weir keeps the secret it read at start until it is restarted; the CLI and the tray read the
//! new one at once, so restart Weir right after rotating.
//!
//! `weir secrets migrate --to keychain|file`: every secret moved between the OS keychain and
//! the file store, or none ([`weir::secrets::migrate`]).

use super::args::{MigrateTo, SecretCmd};
use super::serve::load;
use super::{ServeArgs, EXIT_CONFIG};
use std::process::ExitCode;
use weir::secrets::Account;

pub fn run(cmd: SecretCmd, args: ServeArgs) -> ExitCode {
    let (data_dir, settings) = match load(&args) {
        Ok(l) => (l.data_dir, l.settings),
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match cmd {
        SecretCmd::Migrate { to } => migrate(&data_dir, &settings, to),
        SecretCmd::Rotate => {
            let keychain = match weir::secrets::store_for(&data_dir, settings.secrets_store) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let new = weir::engine::new_secret();
            match keychain.set(Account::ControlSecret.as_str(), &new) {
                Ok(()) => {
                    match keychain.file_store() {
                        Some(f) => println!(
                            "A new control secret is stored in the file store ({}).",
                            f.dir().display()
                        ),
                        None => println!(
                            "A new control secret is stored in the keychain ({}).",
                            keychain.service()
                        ),
                    }
                    println!("A running Weir keeps its old secret until it is restarted: restart `weir serve` or the tray now. Dashboard tabs need the new link `weir serve` prints.");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!(
                        "weir: cannot store a new control secret in {}: {e}. {}",
                        weir::secrets::stored_where(&keychain),
                        e.fix()
                    );
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Moves the secrets, refusing while Weir answers on its address (it would keep writing to the
/// old store) and when the config's `[secrets] store` would send the next start elsewhere.
fn migrate(
    data_dir: &std::path::Path,
    settings: &weir::config::Settings,
    to: MigrateTo,
) -> ExitCode {
    use weir::secrets::migrate::{migrate, Target};
    use weir::secrets::StoreChoice;
    let clash = match (settings.secrets_store, to) {
        (StoreChoice::File, MigrateTo::Keychain) => Some("file"),
        (StoreChoice::Keychain, MigrateTo::File) => Some("keychain"),
        _ => None,
    };
    if let Some(now) = clash {
        eprintln!("weir: the config file says [secrets] store = \"{now}\", so Weir would not use the secrets where they would go. Set store = \"auto\" (or \"{}\") under [secrets] first; nothing was moved.", match to { MigrateTo::Keychain => "keychain", MigrateTo::File => "file" });
        return ExitCode::from(EXIT_CONFIG);
    }
    let timeout = std::time::Duration::from_millis(500);
    if std::net::TcpStream::connect_timeout(&settings.listen, timeout).is_ok() {
        eprintln!("weir: something answers on {} (a running Weir keeps using the store it started with): stop `weir serve` or the tray first; nothing was moved", settings.listen);
        return ExitCode::FAILURE;
    }
    let target = match to {
        MigrateTo::Keychain => Target::Keychain,
        MigrateTo::File => Target::File,
    };
    match migrate(data_dir, target) {
        Ok(m) => {
            let n = m.accounts.len();
            match to {
                MigrateTo::File => {
                    println!(
                        "Moved {n} secret(s) from the OS keychain to owner-only files in {}: {}.",
                        m.dir.display(),
                        m.accounts.join(", ")
                    );
                    println!("{}", weir::secrets::files_meaning(&m.dir));
                }
                MigrateTo::Keychain => println!(
                    "Moved {n} secret(s) from {} to the OS keychain: {}. The directory is gone.",
                    m.dir.display(),
                    m.accounts.join(", ")
                ),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weir: {e}");
            ExitCode::FAILURE
        }
    }
}
