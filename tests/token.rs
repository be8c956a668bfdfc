//! A GitHub token can be stored in / removed from the keychain through the control API; it is
//! never sent back. Needs the Secret Service (scripts/with-keychain.sh); without one, a 503.

mod common;
use common::{with_secret, Weir};

#[tokio::test]
async fn token_goes_to_the_keychain_and_never_comes_back() {
    let weir = Weir::start(&[], "").await;
    let url = format!("{}/_weir/api/token", weir.proxy_url());
    let c = reqwest::Client::new();
    let token = "ghp_weirTestToken0123456789";
    let r = c
        .put(&url)
        .body(format!(r#"{{"token":"{token}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "needs the secret");
    let r = with_secret(
        c.put(&url).body(format!(r#"{{"token":"{token}"}}"#)),
        weir.handle.control_secret(),
    )
    .await;
    if std::env::var("DBUS_SESSION_BUS_ADDRESS").is_err() {
        assert_eq!(r.status(), 503);
        return;
    }
    assert_eq!(r.status(), 200);
    let status = reqwest::get(format!("{}/_weir/api/status", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(status.contains("\"github_token_stored\": true"), "{status}");
    assert!(!status.contains(token), "the token is never displayed back");
    for entry in walk(weir.dir.path()) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(token),
            "token found in {}",
            entry.display()
        );
    }
    let r = c
        .delete(&url)
        .header("x-weir-secret", weir.handle.control_secret())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let status = weir.status().await;
    assert_eq!(status["github_token_stored"], false);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
