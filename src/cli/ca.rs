//! `weir ca path|show|rotate|install`: the local CA that HTTPS interception signs with.

use super::context::{fail, sh_quote, CommonArgs, Context};
use std::process::{Command, ExitCode};
use weir::intercept::ca_store::KEY_ACCOUNT;
use weir::intercept::CertInfo;
use weir_tls::{install_steps, remove_steps, InstallStep, Os, TrustTargets};

#[derive(clap::Args)]
pub struct CaArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    action: CaAction,
}

#[derive(clap::Subcommand)]
enum CaAction {
    /// Print the path of the CA certificate (PEM).
    Path,
    /// Show the CA: subject, fingerprint, validity, permitted names, where the key is.
    Show,
    /// Replace the CA with a new one (the old key is deleted) and print the trust-store steps.
    Rotate,
    /// Print the exact steps that make this OS (and NSS browsers) trust the CA.
    Install {
        /// Run the steps instead of printing them (uses sudo for system stores when not root).
        #[arg(long)]
        apply: bool,
    },
}

pub fn run(args: CaArgs) -> ExitCode {
    let cx = match Context::load(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match args.action {
        CaAction::Path => {
            println!("{}", cx.store.cert_path().display());
            ExitCode::SUCCESS
        }
        CaAction::Show => show(&cx),
        CaAction::Rotate => rotate(&cx),
        CaAction::Install { apply } => install(&cx, apply),
    }
}

fn show(cx: &Context) -> ExitCode {
    let path = cx.store.cert_path();
    let pem = match cx.store.read_cert() {
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
    let service = cx.store.keychain().service().to_string();
    match cx.store.load() {
        Ok(_) => println!("private key:  in the OS keychain (service `{service}`, account `{KEY_ACCOUNT}`), matches the certificate"),
        Err(e) => println!("private key:  NOT usable: {e}\n              fix: {}", e.fix()),
    }
    ExitCode::SUCCESS
}

fn rotate(cx: &Context) -> ExitCode {
    let had_old = matches!(cx.store.read_cert(), Ok(Some(_)));
    let ca = match cx.store.rotate(&cx.settings.intercept_hosts()) {
        Ok(ca) => ca,
        Err(e) => return fail(format!("{e}\nfix: {}", e.fix())),
    };
    println!(
        "weir: new local CA {} (sha256 {})",
        cx.store.cert_path().display(),
        ca.fingerprint_sha256()
    );
    println!("weir: the old private key was deleted from the OS keychain; restart `weir serve` to use the new CA");
    let os = Os::current();
    if had_old {
        match remove_steps(os, &cx.store.old_cert_path(), &TrustTargets::detect(os)) {
            Ok(steps) => {
                println!("\n# 1. Stop trusting the old CA:");
                print_steps(&steps);
            }
            Err(e) => eprintln!("weir: cannot work out the removal steps: {e}"),
        }
    }
    println!("\n# {}Trust the new CA:", if had_old { "2. " } else { "" });
    print_steps(&install_steps(os, &cx.store.cert_path()));
    ExitCode::SUCCESS
}

fn install(cx: &Context, apply: bool) -> ExitCode {
    // The certificate is all the steps need; create the CA first if this is a fresh install.
    if let Err(e) = cx.store.load_or_create(&cx.settings.intercept_hosts()) {
        if !matches!(cx.store.read_cert(), Ok(Some(_))) {
            return fail(format!("{e}\nfix: {}", e.fix()));
        }
    }
    let steps = install_steps(Os::current(), &cx.store.cert_path());
    if !apply {
        println!(
            "# Run these to trust Weir's CA ({}); or run `weir ca install --apply`.",
            cx.store.cert_path().display()
        );
        print_steps(&steps);
        return ExitCode::SUCCESS;
    }
    let mut failed = false;
    for step in &steps {
        if step.optional && !is_present_nss_step(step) {
            println!("- skipped (optional): {}", step.description);
            continue;
        }
        let cmd = with_admin(step);
        println!(
            "+ {}",
            cmd.iter()
                .map(|a| sh_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let status = Command::new(&cmd[0]).args(&cmd[1..]).status();
        match status {
            Ok(s) if s.success() => println!("✓ {}", step.description),
            Ok(s) => {
                failed |= !step.optional;
                println!(
                    "✗ {} (exit {})",
                    step.description,
                    s.code().map_or("signal".into(), |c| c.to_string())
                );
            }
            Err(e) => {
                failed |= !step.optional;
                println!("✗ {}: cannot run {}: {e}", step.description, cmd[0]);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// An NSS step is worth running when `certutil` exists and the database it names does.
fn is_present_nss_step(step: &InstallStep) -> bool {
    let db = step.command.iter().skip_while(|a| *a != "-d").nth(1);
    let Some(dir) = db.and_then(|d| d.strip_prefix("sql:")) else {
        return false;
    };
    step.command.first().is_some_and(|c| c == "certutil")
        && which("certutil")
        && std::path::Path::new(dir).join("cert9.db").is_file()
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn is_root() -> bool {
    #[cfg(unix)]
    {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// The step's command, behind `sudo` when it needs administrator rights and we are not root.
fn with_admin(step: &InstallStep) -> Vec<String> {
    if step.needs_admin && cfg!(unix) && !is_root() {
        std::iter::once("sudo".to_string())
            .chain(step.command.iter().cloned())
            .collect()
    } else {
        step.command.clone()
    }
}

pub fn print_steps(steps: &[InstallStep]) {
    for s in steps {
        let note = match (s.needs_admin, s.optional) {
            (true, true) => " (administrator; optional)",
            (true, false) => " (administrator)",
            (false, true) => " (optional)",
            (false, false) => "",
        };
        println!("# {}{note}", s.description);
        println!(
            "{}",
            with_admin(s)
                .iter()
                .map(|a| sh_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
