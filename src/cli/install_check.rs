//! Before the CLI sends the control secret it checks that the Weir at the configured address
//! is this install's: its unauthenticated `/_weir/api/health` must name the install id kept in
//! this install's keychain. Another program on the port (or another install's Weir) is told
//! nothing. The id is not a secret, so this stops mistakes and naive impostors, not a process
//! that relays the health check to the real Weir.

use http::Request;
use std::time::Duration;
use weir::http_client::{Timeouts, UpstreamClient};
use weir::secrets::{Account, Namespace};

/// Why the secret was not sent.
#[derive(Debug, thiserror::Error)]
pub enum InstallCheckError {
    #[error("cannot reach Weir at {base} ({detail}). Is `weir serve` or the tray running?")]
    Unreachable { base: String, detail: String },
    #[error("the program at {base} is not this install's Weir (its health check names install {found}, this install is {expected}); the control secret was not sent. Check --config/--listen and --data-dir")]
    Mismatch {
        base: String,
        expected: String,
        found: String,
    },
}

/// `Ok` when the Weir at `base` names this install's id, or when this install has no id in
/// its keychain (nothing to compare: a Weir that never stored one, or no keychain).
pub async fn verify(base: &str, data_dir: &std::path::Path) -> Result<(), InstallCheckError> {
    let keychain = Namespace::for_data_dir(data_dir).keychain();
    let expected =
        tokio::task::spawn_blocking(move || keychain.get(Account::InstallId.as_str())).await;
    let Ok(Ok(Some(expected))) = expected else {
        return Ok(());
    };
    let unreachable = |detail: String| InstallCheckError::Unreachable {
        base: base.to_string(),
        detail,
    };
    let uri = format!("{base}/_weir/api/health")
        .parse()
        .map_err(|e: http::uri::InvalidUri| unreachable(e.to_string()))?;
    let mut req = Request::new(weir::http_client::empty());
    *req.uri_mut() = uri;
    let t = Timeouts {
        headers: Duration::from_secs(10),
        body: Duration::from_secs(10),
    };
    let resp = UpstreamClient::new()
        .fetch(req, t, 64 << 10)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap_or_default();
    let found = v["install_id"].as_str().unwrap_or("none").to_string();
    if found == expected.trim() {
        Ok(())
    } else {
        Err(InstallCheckError::Mismatch {
            base: base.to_string(),
            expected: expected.trim().to_string(),
            found,
        })
    }
}
