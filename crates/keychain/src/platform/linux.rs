//! Linux: the freedesktop Secret Service over D-Bus (gnome-keyring, KeePassXC, KWallet 6).

use dbus_secret_service::Error as SsError;
use keyring::secret_service::SsCredential;

use crate::KeychainError;

pub(crate) const FIX_NO_SERVICE: &str = "Weir stores replay credentials in the Secret Service. \
Start a provider in your desktop session: gnome-keyring (`gnome-keyring-daemon --start \
--components=secrets`) or KeePassXC with Settings > Secret Service Integration enabled. \
Check that DBUS_SESSION_BUS_ADDRESS is set for Weir. On a headless box run Weir under \
`dbus-run-session` and unlock a keyring with `echo -n PASSWORD | gnome-keyring-daemon --unlock \
--components=secrets`.";

pub(crate) const FIX_LOCKED: &str = "Unlock your default keyring, or approve its unlock prompt: \
in GNOME open 'Passwords and Keys' (Seahorse) and unlock 'Login'; in KeePassXC unlock \
the database that has Secret Service integration. If there is no default keyring, create \
one and make it the default. Headless: `echo -n PASSWORD | gnome-keyring-daemon --unlock \
--components=secrets`.";

pub(crate) const FIX_DENIED: &str = "The Secret Service refused Weir's request. Check that Weir \
runs as the user who owns the session bus; in KeePassXC allow access for Weir under Secret \
Service Integration (and disable 'confirm when passwords are retrieved' for it if you want \
unattended replay).";

/// The entry is built on the Secret Service backend explicitly, not through keyring's global
/// default builder, so nothing (another crate, a test) can swap in the mock store.
pub(crate) fn entry(service: &str, account: &str) -> keyring::Result<keyring::Entry> {
    let cred = SsCredential::new_with_target(None, service, account)?;
    Ok(keyring::Entry::new_with_credential(Box::new(cred)))
}

/// gnome-keyring's answer when it cannot find the session a secret was wrapped in. Each call
/// opens its own connection and session, so the next call has a new one.
const NO_SESSION: &str = "org.freedesktop.Secret.Error.NoSession";

/// Not reachable (a restarting daemon), or the session was lost: see `platform::worth_asking_again`.
pub(crate) fn worth_asking_again_inner(inner: &(dyn std::error::Error + 'static)) -> bool {
    match inner.downcast_ref::<SsError>() {
        Some(SsError::Dbus(e)) if e.name() == Some(NO_SESSION) => true,
        _ => matches!(classify_platform(inner), KeychainError::NoService { .. }),
    }
}

pub(crate) fn classify_no_access(inner: &(dyn std::error::Error + 'static)) -> KeychainError {
    classify_platform(inner)
}

/// keyring boxes the Secret Service error; look at its variant and, for D-Bus errors, at the
/// well-known error name (the D-Bus protocol's own error code).
pub(crate) fn classify_platform(inner: &(dyn std::error::Error + 'static)) -> KeychainError {
    let detail = inner.to_string();
    let Some(ss) = inner.downcast_ref::<SsError>() else {
        return KeychainError::Other { detail };
    };
    match ss {
        SsError::Locked => KeychainError::Locked { detail },
        // No default collection (alias "default" unset): nothing to unlock or store into.
        SsError::NoResult => KeychainError::Locked {
            detail: format!("{detail} (no default keyring)"),
        },
        // keyring only prompts to unlock a collection: whether the user said no or no
        // prompter could be shown (headless), the keyring stays locked.
        SsError::Prompt => KeychainError::Locked {
            detail: format!("{detail} (or could not be shown)"),
        },
        SsError::Unavailable => KeychainError::NoService { detail },
        SsError::Dbus(e) => classify_dbus_name(e.name().unwrap_or(""), detail),
        _ => KeychainError::Other { detail },
    }
}

fn classify_dbus_name(name: &str, detail: String) -> KeychainError {
    match name {
        // Cannot reach a bus, or nobody on it provides org.freedesktop.secrets.
        "org.freedesktop.DBus.Error.NoServer"
        | "org.freedesktop.DBus.Error.FileNotFound"
        | "org.freedesktop.DBus.Error.BadAddress"
        | "org.freedesktop.DBus.Error.NotSupported"
        | "org.freedesktop.DBus.Error.Disconnected"
        | "org.freedesktop.DBus.Error.ServiceUnknown"
        | "org.freedesktop.DBus.Error.NameHasNoOwner"
        | "org.freedesktop.DBus.Error.NoReply"
        | "org.freedesktop.DBus.Error.Timeout"
        | "org.freedesktop.DBus.Error.TimedOut" => KeychainError::NoService { detail },
        n if n.starts_with("org.freedesktop.DBus.Error.Spawn.") => {
            KeychainError::NoService { detail }
        }
        "org.freedesktop.Secret.Error.IsLocked" => KeychainError::Locked { detail },
        "org.freedesktop.Secret.Error.NoSuchObject" => KeychainError::Locked {
            detail: format!("{detail} (no default keyring)"),
        },
        "org.freedesktop.DBus.Error.AccessDenied" | "org.freedesktop.DBus.Error.AuthFailed" => {
            KeychainError::AccessDenied { detail }
        }
        _ => KeychainError::Other { detail },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_session_or_a_missing_service_is_asked_again_and_a_locked_keyring_is_not() {
        let dbus = |name: &str| SsError::Dbus(dbus::Error::new_custom(name, "message"));
        assert!(worth_asking_again_inner(&dbus(NO_SESSION)));
        assert!(worth_asking_again_inner(&dbus(
            "org.freedesktop.DBus.Error.NoReply"
        )));
        assert!(worth_asking_again_inner(&SsError::Unavailable));
        assert!(!worth_asking_again_inner(&dbus(
            "org.freedesktop.Secret.Error.IsLocked"
        )));
        assert!(!worth_asking_again_inner(&SsError::Locked));
        // What the person sees if the second try fails too: a plain error, not "no keychain".
        assert_eq!(
            classify_platform(&dbus(NO_SESSION)).code(),
            "keychain_error"
        );
    }

    #[test]
    fn dbus_names_map_to_kinds() {
        let kind = |n: &str| classify_dbus_name(n, String::new()).code();
        assert_eq!(
            kind("org.freedesktop.DBus.Error.ServiceUnknown"),
            "keychain_unavailable"
        );
        assert_eq!(
            kind("org.freedesktop.DBus.Error.Spawn.ChildExited"),
            "keychain_unavailable"
        );
        assert_eq!(
            kind("org.freedesktop.Secret.Error.IsLocked"),
            "keychain_locked"
        );
        assert_eq!(
            kind("org.freedesktop.DBus.Error.AccessDenied"),
            "keychain_access_denied"
        );
        assert_eq!(kind("org.example.Weird"), "keychain_error");
    }

    #[test]
    fn secret_service_variants_map_to_kinds() {
        assert_eq!(
            classify_platform(&SsError::Locked).code(),
            "keychain_locked"
        );
        assert_eq!(
            classify_platform(&SsError::Prompt).code(),
            "keychain_locked"
        );
        assert_eq!(
            classify_platform(&SsError::Unavailable).code(),
            "keychain_unavailable"
        );
        let io = std::io::Error::other("x");
        assert_eq!(classify_platform(&io).code(), "keychain_error");
    }
}
