//! Weir is not a way into the laptop's own network: unmanaged absolute-form requests and CONNECT
//! tunnels to loopback, link-local or private addresses (by literal or by a name that resolves
//! there) are refused with a `forbidden_target` problem, unless `allow_private_targets = true`.
//! Managed upstreams are exempt (the fixtures' loopback upstreams keep working).

mod common;
use common::{Upstream, Weir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn raw(weir: &Weir, request: &str) -> String {
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0; 8192];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn assert_forbidden(text: &str) {
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(
        text.contains("application/problem+json") && text.contains("forbidden_target"),
        "{text}"
    );
    assert!(
        text.contains("allow_private_targets"),
        "names the setting: {text}"
    );
}

#[tokio::test]
async fn unmanaged_requests_to_loopback_are_refused() {
    let managed = Upstream::start().await;
    let other = Upstream::start().await;
    let weir = Weir::start(&[&managed.origin()], "").await;
    let port = other.addr.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = raw(
            &weir,
            &format!("GET http://{host}/x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_forbidden(&r);
    }
    assert_eq!(other.total(), 0, "nothing reached the private target");
    // The managed upstream, on loopback too, still works.
    let r = weir
        .client("a")
        .get(format!("{}/agents/sessions", managed.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(managed.total(), 1);
}

#[tokio::test]
async fn connect_to_private_addresses_is_refused() {
    let other = Upstream::start().await;
    let weir = Weir::start(&[], "").await;
    let port = other.addr.port();
    for target in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "169.254.169.254:80".to_string(),
        "10.1.2.3:443".to_string(),
        "192.168.0.1:443".to_string(),
        "172.16.0.1:443".to_string(),
        "0.0.0.0:443".to_string(),
        "[fe80::1]:443".to_string(),
        "[fd00::1]:443".to_string(),
    ] {
        let r = raw(
            &weir,
            &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
        )
        .await;
        assert_forbidden(&r);
    }
    assert_eq!(other.total(), 0);
}

#[tokio::test]
async fn allow_private_targets_lets_them_through() {
    let other = Upstream::start().await;
    let weir = Weir::start(&[], "allow_private_targets = true\n").await;
    let r = weir
        .client("a")
        .get(format!("{}/x", other.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(other.total(), 1);
}
