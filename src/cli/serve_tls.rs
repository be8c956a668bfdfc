//! What `weir serve` says about HTTPS interception at start-up.

/// One line: intercepting with which CA, or why not.
pub fn print_intercept_status(handle: &weir::EngineHandle) {
    use weir::intercept::CaCertificate;
    match handle.interceptor() {
        Some(i) => match i.ca_cert() {
            CaCertificate::Own(_) => say!(
                "weir: HTTPS to {} is intercepted with the local CA (sha256 {}); clients must trust it (`weir ca install`, `weir env`)",
                i.ca().permitted_hosts().join(", "),
                i.ca().fingerprint_sha256()
            ),
            // A client's own `weir ca install` installs that client's CA, not the gateway's.
            CaCertificate::Gateway(path) => say!(
                "weir: HTTPS to {} is intercepted with the gateway's CA (sha256 {}); its clients must trust {} (NODE_EXTRA_CA_CERTS, or their system's trust store)",
                i.ca().permitted_hosts().join(", "),
                i.ca().fingerprint_sha256(),
                path.display()
            ),
        },
        None => say!("weir: HTTPS to managed hosts is tunnelled untouched (TLS interception is off; `weir doctor` says why)"),
    }
}
