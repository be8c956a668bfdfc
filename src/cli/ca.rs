//! `weir ca path|show|rotate|install`: prints what [`weir::client_setup::ca_install`] and the
//! CA store ([`weir::intercept::CaStore`]) say about the local CA, or runs the install steps.

use super::args::{CaAction, GlobalArgs};
use super::context::{fail, load};
use std::process::ExitCode;
use weir::client_setup::ca_install::{self, command_line, StepReport};
use weir::client_setup::{sh_quote, Install};
use weir::intercept::ca_store::KEY_ACCOUNT;
use weir::intercept::CertInfo;
use weir_tls::InstallStep;

pub fn run(action: CaAction, global: &GlobalArgs) -> ExitCode {
    let mut install = match load(global) {
        Ok(i) => i,
        Err(code) => return code,
    };
    // These two may create the CA: its key goes where `weir serve` will look (the file store
    // on a box with no keychain, made now if it is the first command run).
    if matches!(action, CaAction::Rotate | CaAction::Install { .. }) {
        match install.settled_ca() {
            Ok(ca) => install.ca = ca,
            Err(e) => {
                return fail(match e.fix() {
                    Some(fix) => format!("{e}\nfix: {fix}"),
                    None => e.to_string(),
                })
            }
        }
    }
    match action {
        CaAction::Path => {
            println!("{}", install.ca.cert_path().display());
            ExitCode::SUCCESS
        }
        CaAction::Show => show(&install),
        CaAction::Rotate => rotate(&install),
        CaAction::Install { apply } => run_install(&install, apply),
    }
}

fn show(install: &Install) -> ExitCode {
    let store = &install.ca;
    let path = store.cert_path();
    let pem = match store.read_cert() {
        Ok(Some(p)) => p,
        Ok(None) => {
            return fail(format!(
            "there is no local CA yet ({} does not exist); `weir serve` creates it on first run",
            path.display()
        ))
        }
        Err(e) => return fail(e),
    };
    let info = match CertInfo::from_pem(&pem) {
        Ok(i) => i,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    println!("certificate:  {}", path.display());
    println!("{info}");
    let service = store.keychain().service().to_string();
    let place = match store.keychain().file_store() {
        Some(f) => format!(
            "in the file store ({})",
            f.dir().join(KEY_ACCOUNT).display()
        ),
        None => format!("in the OS keychain (service `{service}`, account `{KEY_ACCOUNT}`)"),
    };
    match store.load() {
        Ok(_) => println!("private key:  {place}, matches the certificate"),
        Err(e) => println!(
            "private key:  NOT usable: {e}\n              fix: {}",
            e.fix()
        ),
    }
    ExitCode::SUCCESS
}

fn rotate(install: &Install) -> ExitCode {
    let rotation = match ca_install::rotate(install) {
        Ok(r) => r,
        Err(e) => return fail(format!("{e}\nfix: {}", e.fix())),
    };
    println!(
        "weir: new local CA {} (sha256 {})",
        install.ca.cert_path().display(),
        rotation.ca.fingerprint_sha256()
    );
    let from = match install.ca.keychain().file_store() {
        Some(_) => "the file store",
        None => "the OS keychain",
    };
    println!(
        "weir: the old private key was deleted from {from}; restart `weir serve` to use the new CA"
    );
    let had_old = rotation.removal.is_some();
    match rotation.removal {
        Some(Ok(steps)) => {
            println!("\n# 1. Stop trusting the old CA:");
            print_steps(&steps);
        }
        Some(Err(e)) => eprintln!("weir: cannot work out the removal steps: {e}"),
        None => {}
    }
    println!("\n# {}Trust the new CA:", if had_old { "2. " } else { "" });
    print_steps(&rotation.install);
    ExitCode::SUCCESS
}

fn run_install(install: &Install, apply: bool) -> ExitCode {
    let steps = match ca_install::install_steps(install) {
        Ok(s) => s,
        Err(e) => return fail(format!("{e}\nfix: {}", e.fix())),
    };
    if !apply {
        println!(
            "# Run these to trust Weir's CA ({}); or run `weir ca install --apply`.",
            install.ca.cert_path().display()
        );
        print_steps(&steps);
        return ExitCode::SUCCESS;
    }
    let ok = ca_install::apply_steps(&steps, |report| match report {
        StepReport::Skipped(s) => println!("- skipped (optional): {}", s.description),
        StepReport::Running { command, .. } => println!(
            "+ {}",
            command
                .iter()
                .map(|a| sh_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        StepReport::Done(s) => println!("✓ {}", s.description),
        StepReport::Failed { step, exit } => println!(
            "✗ {} (exit {})",
            step.description,
            exit.map_or("signal".into(), |c| c.to_string())
        ),
        StepReport::CannotRun {
            step,
            program,
            error,
        } => println!("✗ {}: cannot run {program}: {error}", step.description),
    });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_steps(steps: &[InstallStep]) {
    for s in steps {
        let note = match (s.needs_admin, s.optional) {
            (true, true) => " (administrator; optional)",
            (true, false) => " (administrator)",
            (false, true) => " (optional)",
            (false, false) => "",
        };
        println!("# {}{note}", s.description);
        println!("{}", command_line(s));
    }
}
