//! Making the OS (and NSS browsers) trust the local CA: the steps for this platform, running
//! them (behind `sudo` where needed), and a rotation's removal steps. The platform-specific
//! parts (root check, `sudo`, NSS databases) are all in this file.

use super::{sh_quote, Install};
use crate::intercept::CaError;
use std::path::Path;
use std::process::Command;
use weir_tls::{remove_steps, InstallStep, Os, TlsError, TrustTargets};

/// The steps that make this OS trust the install's CA, creating the CA first on a fresh
/// install. Blocks on the keychain. Only a CA Weir can vouch for is installed: its key is in
/// the keychain, it passes [`vouch`], and the file the steps copy is rewritten from the
/// certificate in memory, so whatever was on disk (another CA put in its place) is not what
/// goes into the trust store.
pub fn install_steps(install: &Install) -> Result<Vec<InstallStep>, CaError> {
    let loaded = install
        .ca
        .load_or_create(&install.settings.intercept_hosts())?;
    vouch(&loaded.ca)?;
    let path = install.ca.cert_path();
    rewrite(&path, loaded.ca.cert_pem())?;
    Ok(weir_tls::install_steps(Os::current(), &path))
}

/// Checks that `ca` is one Weir made: self-signed with the key the keychain holds (the
/// signature verifies; the key itself was matched on load), with critical name constraints
/// byte for byte as Weir writes them for its permitted hosts. Independent of which hosts or
/// exclusions Weir writes: the reference is a CA generated now for the same hosts.
pub fn vouch(ca: &weir_tls::LocalCa) -> Result<(), CaError> {
    let refuse =
        |why: String| CaError::Tls(TlsError::InvalidCaCert(format!("not installed: {why}")));
    let (_, cert) = x509_parser::parse_x509_certificate(ca.cert_der())
        .map_err(|e| refuse(format!("it does not parse: {e}")))?;
    // Weir's CAs are ECDSA P-256 with SHA-256 (rcgen's PKCS_ECDSA_P256_SHA256).
    let key = ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_ASN1,
        cert.public_key().subject_public_key.data.as_ref(),
    );
    if cert.signature_algorithm.algorithm != x509_parser::oid_registry::OID_SIG_ECDSA_WITH_SHA256
        || key
            .verify(
                cert.tbs_certificate.as_ref(),
                cert.signature_value.data.as_ref(),
            )
            .is_err()
    {
        return Err(refuse(
            "it is not self-signed (ECDSA P-256, SHA-256) by the key in the keychain".into(),
        ));
    }
    let reference = weir_tls::LocalCa::generate_for_owner(
        ca.permitted_hosts(),
        weir_tls::OffsetDateTime::now_utc(),
        "check",
    )?;
    let (_, want) = x509_parser::parse_x509_certificate(reference.cert_der())
        .map_err(|e| refuse(format!("cannot build the reference CA: {e}")))?;
    let constraints = |c: &x509_parser::certificate::X509Certificate<'_>| {
        c.get_extension_unique(&x509_parser::oid_registry::OID_X509_EXT_NAME_CONSTRAINTS)
            .ok()
            .flatten()
            .map(|e| (e.critical, e.value.to_vec()))
    };
    match (constraints(&cert), constraints(&want)) {
        (None, _) => Err(refuse(
            "it has no name constraints, so it could vouch for any site".into(),
        )),
        (Some((false, _)), _) => Err(refuse(
            "its name constraints are not marked critical".into(),
        )),
        (Some(got), Some(want)) if got == want => Ok(()),
        _ => Err(refuse(format!(
            "its name constraints are not the ones Weir writes for {}",
            ca.permitted_hosts().join(", ")
        ))),
    }
}

/// Writes `pem` to `path` through a temporary file and a rename (the CA directory is private
/// to this user).
fn rewrite(path: &Path, pem: &str) -> Result<(), CaError> {
    let io = |source| CaError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("pem.install");
    std::fs::write(&tmp, pem).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// A rotated CA and what to do about the trust stores.
#[derive(Debug)]
pub struct Rotation {
    pub ca: weir_tls::LocalCa,
    /// Steps that stop trusting the replaced CA; `None` when there was none.
    pub removal: Option<Result<Vec<InstallStep>, TlsError>>,
    /// Steps that trust the new CA.
    pub install: Vec<InstallStep>,
}

/// Replaces the install's CA (the old key is deleted from the keychain) and works out the
/// trust-store steps. Blocks on the keychain.
pub fn rotate(install: &Install) -> Result<Rotation, CaError> {
    let had_old = matches!(install.ca.read_cert(), Ok(Some(_)));
    let ca = install.ca.rotate(&install.settings.intercept_hosts())?;
    let os = Os::current();
    let removal =
        had_old.then(|| remove_steps(os, &install.ca.old_cert_path(), &TrustTargets::detect(os)));
    Ok(Rotation {
        ca,
        removal,
        install: weir_tls::install_steps(os, &install.ca.cert_path()),
    })
}

/// What happened to one step while [`apply_steps`] ran them.
#[derive(Debug)]
pub enum StepReport<'a> {
    /// An optional step whose tool or database is not on this machine.
    Skipped(&'a InstallStep),
    /// About to run `command` (with `sudo` when needed).
    Running {
        step: &'a InstallStep,
        command: &'a [String],
    },
    Done(&'a InstallStep),
    /// It ran and exited unsuccessfully (`None`: killed by a signal).
    Failed {
        step: &'a InstallStep,
        exit: Option<i32>,
    },
    /// It could not be started.
    CannotRun {
        step: &'a InstallStep,
        program: &'a str,
        error: std::io::Error,
    },
}

/// Runs the steps in order, reporting each as it goes. Returns `true` when every required
/// (non-optional) step succeeded.
pub fn apply_steps(steps: &[InstallStep], mut report: impl FnMut(StepReport<'_>)) -> bool {
    let mut ok = true;
    for step in steps {
        if step.optional && !is_present_nss_step(step) {
            report(StepReport::Skipped(step));
            continue;
        }
        let cmd = with_admin(step);
        let Some((program, args)) = cmd.split_first() else {
            continue;
        };
        report(StepReport::Running {
            step,
            command: &cmd,
        });
        match Command::new(program).args(args).status() {
            Ok(s) if s.success() => report(StepReport::Done(step)),
            Ok(s) => {
                ok &= step.optional;
                report(StepReport::Failed {
                    step,
                    exit: s.code(),
                });
            }
            Err(error) => {
                ok &= step.optional;
                report(StepReport::CannotRun {
                    step,
                    program,
                    error,
                });
            }
        }
    }
    ok
}

/// The step's command, behind `sudo` when it needs administrator rights and we are not root.
pub fn with_admin(step: &InstallStep) -> Vec<String> {
    if step.needs_admin && cfg!(unix) && !is_root() {
        std::iter::once("sudo".to_string())
            .chain(step.command.iter().cloned())
            .collect()
    } else {
        step.command.clone()
    }
}

/// [`with_admin`] as one POSIX shell line.
pub fn command_line(step: &InstallStep) -> String {
    with_admin(step)
        .iter()
        .map(|a| sh_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An NSS step is worth running when `certutil` exists and the database it names does.
fn is_present_nss_step(step: &InstallStep) -> bool {
    let db = step.command.iter().skip_while(|a| *a != "-d").nth(1);
    let Some(dir) = db.and_then(|d| d.strip_prefix("sql:")) else {
        return false;
    };
    step.command.first().is_some_and(|c| c == "certutil")
        && which("certutil")
        && Path::new(dir).join("cert9.db").is_file()
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[cfg(unix)]
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

#[cfg(not(unix))]
fn is_root() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(command: &[&str], optional: bool) -> InstallStep {
        InstallStep {
            description: "d".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            needs_admin: false,
            optional,
        }
    }

    #[test]
    fn runs_steps_skips_absent_nss_and_counts_required_failures() {
        let steps = [
            step(&["true"], false),
            step(&["certutil", "-d", "sql:/nonexistent", "-A"], true),
            step(&["false"], false),
        ];
        let mut seen = Vec::new();
        let ok = apply_steps(&steps, |r| {
            seen.push(match r {
                StepReport::Skipped(_) => "skipped",
                StepReport::Running { .. } => "running",
                StepReport::Done(_) => "done",
                StepReport::Failed { .. } => "failed",
                StepReport::CannotRun { .. } => "cannot",
            })
        });
        assert!(!ok);
        assert_eq!(seen, ["running", "done", "skipped", "running", "failed"]);
        assert_eq!(command_line(&step(&["a b", "c"], false)), "'a b' c");
    }
}
