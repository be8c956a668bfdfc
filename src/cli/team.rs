//! `weir team`: the team's secrets for `[team]` (docs/team.md), kept in this install's
//! keychain: the team key that signs team signals, and the NATS login. Secrets are read from
//! standard input, never from the command line (it shows in `ps` and shell history).

use super::args::TeamCmd;
use super::serve::load;
use super::{ServeArgs, EXIT_CONFIG};
use std::io::Read;
use std::process::ExitCode;
use weir::secrets::Account;
use weir::team::{new_key_hex, NatsAuth, TeamKey};

pub fn run(cmd: TeamCmd, args: ServeArgs) -> ExitCode {
    let (data_dir, settings) = match load(&args) {
        Ok(l) => (l.data_dir, l.settings),
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let keychain = match weir::secrets::store_for(&data_dir, settings.secrets_store) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stored =
        |account: Account, value: &str, what: &str| match keychain.set(account.as_str(), value) {
            Ok(()) => {
                println!(
                    "The {what} is stored in {}. Restart Weir to use it.",
                    weir::secrets::stored_where(&keychain)
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "weir: cannot store the {what} in {}: {e}. {}",
                    weir::secrets::stored_where(&keychain),
                    e.fix()
                );
                ExitCode::FAILURE
            }
        };
    match cmd {
        TeamCmd::SetKey { generate: true } => {
            let key = new_key_hex();
            let code = stored(Account::TeamKey, &key, "team key");
            if code == ExitCode::SUCCESS {
                println!("{key}");
                eprintln!(
                    "Give this key to each teammate (`weir team set-key` reads it from stdin)."
                );
            }
            code
        }
        TeamCmd::SetKey { generate: false } => {
            let Some(key) = read_stdin() else {
                return ExitCode::from(EXIT_CONFIG);
            };
            if TeamKey::from_hex(&key).is_none() {
                eprintln!(
                    "weir: a team key is 64 hex digits (`weir team set-key --generate` makes one)"
                );
                return ExitCode::from(EXIT_CONFIG);
            }
            stored(Account::TeamKey, key.trim(), "team key")
        }
        TeamCmd::SetCredentials { user } => {
            let Some(secret) = read_stdin() else {
                return ExitCode::from(EXIT_CONFIG);
            };
            let auth = match user {
                Some(user) => NatsAuth::UserPassword {
                    user,
                    password: secret,
                },
                None => NatsAuth::Token { token: secret },
            };
            stored(Account::TeamCredentials, &auth.encode(), "NATS login")
        }
        TeamCmd::Clear => {
            for a in [Account::TeamKey, Account::TeamCredentials] {
                if let Err(e) = keychain.delete(a.as_str()) {
                    eprintln!(
                        "weir: cannot remove {a} from the keychain: {e}. {}",
                        e.fix()
                    );
                    return ExitCode::FAILURE;
                }
            }
            println!(
                "The team key and NATS login are removed from the keychain ({}).",
                keychain.service()
            );
            ExitCode::SUCCESS
        }
    }
}

/// One secret from stdin (the first line, trimmed); `None` (with a message) when empty.
fn read_stdin() -> Option<String> {
    let mut s = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut s) {
        eprintln!("weir: cannot read stdin: {e}");
        return None;
    }
    let line = s.lines().next().unwrap_or("").trim().to_string();
    if line.is_empty() {
        eprintln!("weir: nothing on stdin; pipe the secret in, e.g. `pass show nats | weir team set-credentials`");
        return None;
    }
    Some(line)
}
