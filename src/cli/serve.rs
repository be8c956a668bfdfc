//! `weir serve`: the proxy in the foreground until SIGINT/SIGTERM.

use super::{ServeArgs, EXIT_CONFIG};
use std::process::ExitCode;
use weir::config::{self, Launch};

/// Loads settings the way `weir serve`, the other commands and the tray do
/// ([`weir::config::resolve`]).
pub fn load(args: &ServeArgs) -> Result<Launch, config::ConfigError> {
    args.resolve()
}

/// For a command that talks to the running Weir: the config as loaded and Weir's base URL
/// (`http://host:port`, from `listen`); a config that does not load is said, and exits 2.
pub fn load_with_base(args: &ServeArgs) -> Result<(Launch, String), std::process::ExitCode> {
    match load(args) {
        Ok(l) => {
            let listen = l.settings.listen;
            let base = format!(
                "http://{}",
                weir::config::host_for(listen.ip(), listen.port())
            );
            Ok((l, base))
        }
        Err(e) => {
            eprintln!("weir: {e}");
            Err(std::process::ExitCode::from(super::EXIT_CONFIG))
        }
    }
}

/// `print_secret`: print the dashboard link with the control secret even when standard
/// output is not a terminal (a pipe, a file, a service manager's journal, which keeps it).
pub fn run(args: ServeArgs, gateway: bool, print_secret: bool) -> ExitCode {
    let Launch {
        settings,
        data_dir,
        config_file,
    } = match load(&args) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("weir: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    #[cfg(not(feature = "gateway"))]
    if gateway {
        eprintln!("weir: this weir was built without the `gateway` feature, which `--gateway` needs; build it with `cargo build --release -p weir --features gateway`");
        return ExitCode::from(EXIT_CONFIG);
    }
    #[cfg(feature = "gateway")]
    let gateway = if gateway {
        match weir::gateway::Gateway::load(settings.gateway.as_ref()) {
            Ok(g) => Some(g),
            Err(e) => {
                eprintln!("weir: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    } else {
        if settings.gateway.is_some() {
            say!("weir: the config file has a [gateway] table; it is used only with `weir serve --gateway`");
        }
        None
    };
    // Where secrets live is settled first (it blocks on a keychain probe): `store = "keychain"`
    // without one refuses to start, and the CA key below goes to the store chosen here.
    let secret_files = match weir::secrets::choose(&data_dir, settings.secrets_store) {
        Ok(weir::secrets::Place::Files { dir, .. }) => Some(dir),
        Ok(weir::secrets::Place::Keychain) => None,
        // `auto` runs on without a store; the engine says why creates cannot be queued.
        Err(weir::secrets::ChooseError::Files(_))
            if settings.secrets_store == weir::secrets::StoreChoice::Auto =>
        {
            None
        }
        Err(e) => {
            match e.fix() {
                Some(fix) => eprintln!("weir: {e}. {fix}"),
                None => eprintln!("weir: {e}"),
            }
            return ExitCode::FAILURE;
        }
    };
    // Before the runtime starts: the keychain calls block. Gateway replicas share one CA
    // from files when `[gateway]` names one.
    #[cfg(feature = "gateway")]
    let local_ca = match gateway.as_ref().and_then(|g| g.intercept_ca.clone()) {
        Some(ca) if settings.intercept => Some(ca),
        _ => weir::intercept::ca_store::load_local_ca(&settings, &data_dir),
    };
    #[cfg(not(feature = "gateway"))]
    let local_ca = weir::intercept::ca_store::load_local_ca(&settings, &data_dir);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        // Handlers are installed before anything is printed, so a supervisor that sends
        // SIGTERM as soon as it sees the address gets a graceful stop, not a default kill.
        let stop = shutdown_signal();
        let mut opts = weir::EngineOptions::new(settings, data_dir);
        opts.local_ca = local_ca;
        opts.config_file = config_file;
        #[cfg(feature = "gateway")]
        let is_gateway = gateway.is_some();
        #[cfg(feature = "gateway")]
        {
            opts.gateway = gateway;
        }
        #[cfg(not(feature = "gateway"))]
        let is_gateway = false;
        let handle = match weir::start(opts).await {
            Ok(h) => h,
            Err(e) => {
                eprintln!("weir: {e}");
                return ExitCode::FAILURE;
            }
        };
        if is_gateway {
            #[cfg(feature = "gateway")]
            print_gateway(&handle).await;
            super::serve_tls::print_intercept_status(&handle);
            stop.await;
            say!("weir: shutting down, draining in-flight requests");
            handle.shutdown().await;
            say!("weir: stopped");
            return ExitCode::SUCCESS;
        }
        say!("weir: proxy listening on http://{}", handle.local_addr());
        use std::io::IsTerminal;
        if print_secret || std::io::stdout().is_terminal() {
            say!(
                "weir: dashboard and control API at {}",
                handle.dashboard_url_with_secret()
            );
        } else {
            say!(
                "weir: dashboard and control API at {} (the link with the control secret is printed only to a terminal, or with --print-secret; the tray opens it too)",
                handle.dashboard_url()
            );
        }
        say!(
            "weir: point your tools at it with HTTPS_PROXY=http://{0} HTTP_PROXY=http://{0}",
            handle.local_addr()
        );
        super::serve_tls::print_intercept_status(&handle);
        if let Some(dir) = &secret_files {
            say!("weir: secrets are in owner-only files in {} (no OS keychain): anyone who can read your home directory as you can read them; `weir doctor` says more", dir.display());
        }
        stop.await;
        say!("weir: shutting down, draining in-flight requests");
        handle.shutdown().await;
        say!("weir: stopped");
        ExitCode::SUCCESS
    })
}

/// What a gateway replica says at start (never a secret).
#[cfg(feature = "gateway")]
async fn print_gateway(handle: &weir::EngineHandle) {
    say!(
        "weir: gateway listening on https://{} (TLS only, allow-listed networks)",
        handle.local_addr()
    );
    if let Some(a) = handle.admin_addr() {
        say!("weir: gateway admin API on https://{a}/_weir/api/ (Authorization: Bearer <admin token>)");
    }
    let status = handle.status().await;
    let gateway = status.gateway.as_ref();
    let db_tls = match gateway.and_then(|g| g.postgres_sslmode) {
        Some(weir::config::PgSslMode::VerifyFull) => ", over TLS (verify-full)",
        Some(weir::config::PgSslMode::Require) => ", over TLS (require: not verified)",
        _ => "",
    };
    say!(
        "weir: create queue: {}{} (replica {})",
        match status.queue.backend {
            Some(weir::status::QueueBackend::Postgresql) => "PostgreSQL, shared by the replicas",
            Some(weir::status::QueueBackend::Sqlite) => "SQLite, this replica only",
            None => "unavailable",
        },
        if status.queue.backend == Some(weir::status::QueueBackend::Postgresql) {
            db_tls
        } else {
            ""
        },
        std::process::id()
    );
    if let Some(g) = gateway.filter(|g| !g.trusted_proxies.is_empty()) {
        say!(
            "weir: PROXY protocol headers read from {} only",
            g.trusted_proxies.join(", ")
        );
    }
}

/// Registers SIGINT/SIGTERM handlers now and returns a future that resolves on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut t), Ok(mut i)) => {
                    tokio::select! {
                        _ = t.recv() => {}
                        _ = i.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
