//! What `weir serve` says about HTTPS interception at start-up.

/// One line: intercepting with which CA, or why not.
pub fn print_intercept_status(handle: &weir::EngineHandle) {
    match handle.interceptor() {
        Some(i) => say!(
            "weir: HTTPS to {} is intercepted with the local CA (sha256 {}); clients must trust it (`weir ca install`, `weir env`)",
            i.ca().permitted_hosts().join(", "),
            i.ca().fingerprint_sha256()
        ),
        None => say!("weir: HTTPS to managed hosts is tunnelled untouched (TLS interception is off; `weir doctor` says why)"),
    }
}
