//! Before the CLI sends the control secret it checks that the program at the configured
//! address is this install's Weir: its unauthenticated `/_weir/api/health` must name the install
//! id kept in this install's keychain (another install's Weir is told so), and it must answer a
//! fresh random challenge with the MAC only a holder of the control secret can make
//! ([`weir::control_proof`]). A program that squats on the port while Weir is down can copy the
//! public id but not the proof, and what it receives (the challenge) is worth nothing to it.
//! The secret is only handed out here, after the proof ([`verify`]).

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
    #[error("the program at {base} did not prove that it holds this install's control secret, so the secret was not sent. It may be another user's program on Weir's port while Weir is down (see who listens there), or a Weir that still has an older secret after `weir secret rotate` (restart it)")]
    NoProof { base: String },
}

/// The control secret to send to the Weir at `base` (`http://host:port`), once that Weir has
/// named this install's id (when the keychain has one) and proved it holds the secret; `None`
/// when this install has no secret to send (nothing to protect: the call goes without one).
pub async fn verify(
    base: &str,
    data_dir: &std::path::Path,
) -> Result<Option<String>, InstallCheckError> {
    let secret = secret(data_dir).await;
    let keychain = Namespace::for_data_dir(data_dir).keychain();
    let expected =
        tokio::task::spawn_blocking(move || keychain.get(Account::InstallId.as_str())).await;
    let expected = match expected {
        Ok(Ok(Some(id))) => Some(id.trim().to_string()),
        _ => None,
    };
    if secret.is_none() && expected.is_none() {
        return Ok(None);
    }
    let unreachable = |detail: String| InstallCheckError::Unreachable {
        base: base.to_string(),
        detail,
    };
    let challenge = weir::control_proof::new_challenge();
    let uri = format!("{base}/_weir/api/health?challenge={challenge}")
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
    if let Some(expected) = expected.filter(|e| *e != found) {
        return Err(InstallCheckError::Mismatch {
            base: base.to_string(),
            expected,
            found,
        });
    }
    let Some(secret) = secret else {
        return Ok(None);
    };
    let address = base.strip_prefix("http://").unwrap_or(base);
    let proof = v["proof"].as_str().unwrap_or_default();
    if weir::control_proof::verify(&secret, address, &challenge, proof) {
        Ok(Some(secret))
    } else {
        Err(InstallCheckError::NoProof {
            base: base.to_string(),
        })
    }
}

/// The control secret: `WEIR_CONTROL_SECRET`, else the keychain entry of this data dir's install.
async fn secret(data_dir: &std::path::Path) -> Option<String> {
    if let Ok(s) = std::env::var("WEIR_CONTROL_SECRET") {
        return Some(s.trim().to_string());
    }
    let keychain = Namespace::for_data_dir(data_dir).keychain();
    let got =
        tokio::task::spawn_blocking(move || keychain.get(Account::ControlSecret.as_str())).await;
    match got {
        // Trimmed as `weir serve` reads it (a file store's secret may end in a newline).
        Ok(Ok(s)) => s.map(|s| s.trim().to_string()),
        Ok(Err(e)) => {
            eprintln!(
                "weir: cannot read the control secret from the keychain: {e}. {}",
                e.fix()
            );
            None
        }
        Err(_) => None,
    }
}
