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

/// Set in the copy of this test binary that runs inside the namespace.
const IN_NAMESPACE: &str = "WEIR_REBINDING_NAMESPACE";

/// DNS rebinding. The test binary runs itself again inside a user, mount and network namespace
/// (`unshare -rmn`) where `/etc/resolv.conf` names 127.0.0.1 and the only network is loopback:
/// a tiny DNS server there answers each `rebind-*` name with a public address the first time
/// and 127.0.0.1 after, and each `fail-*` name with NXDOMAIN first and 127.0.0.1 after. A
/// check that resolves apart from the connection passes on the first answer and connects on
/// the second. Weir resolves once and connects to what it checked: the public address (which
/// is unreachable in the namespace: nothing leaves it) or nothing, and the loopback server
/// behind the names is never reached. Each name is looked up exactly once.
#[test]
fn dns_rebinding_cannot_reach_loopback() {
    if std::env::var_os(IN_NAMESPACE).is_some() {
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(rebinding_in_namespace());
    }
    let dir = tempfile::tempdir().unwrap();
    let (hosts, resolv) = (dir.path().join("hosts"), dir.path().join("resolv.conf"));
    std::fs::write(&hosts, "127.0.0.1 localhost\n::1 localhost\n").unwrap();
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n",
    )
    .unwrap();
    let script = "ip link set lo up && mount --bind \"$1\" /etc/hosts && \
                  mount --bind \"$2\" /etc/resolv.conf && \
                  exec \"$0\" dns_rebinding_cannot_reach_loopback --exact --nocapture --test-threads=1";
    let out = std::process::Command::new("unshare")
        .args(["-rmn", "sh", "-c", script])
        .arg(std::env::current_exe().unwrap())
        .arg(&hosts)
        .arg(&resolv)
        .env(IN_NAMESPACE, "1")
        .output()
        .expect("unshare (util-linux) is needed for this test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("1 passed"),
        "the test ran in the namespace: {text}"
    );
}

async fn rebinding_in_namespace() {
    let dns = RebindingDns::start();
    let inside = Upstream::start().await;
    let weir = Weir::start(&[], "").await;
    let port = inside.addr.port();
    let get = |name: &str| {
        let host = format!("{name}:{port}");
        format!("GET http://{host}/x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    };
    let connect = |name: &str| {
        let host = format!("{name}:{port}");
        format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n")
    };
    for (name, request) in [
        ("rebind-get.test", get("rebind-get.test")),
        ("rebind-connect.test", connect("rebind-connect.test")),
        ("fail-get.test", get("fail-get.test")),
        ("fail-connect.test", connect("fail-connect.test")),
    ] {
        let r = raw(&weir, &request).await;
        // The public address is unreachable here; a lookup that failed is no connection.
        assert!(r.starts_with("HTTP/1.1 502"), "{name}: {r}");
        assert!(r.contains("application/problem+json"), "{name}: {r}");
        assert_eq!(inside.total(), 0, "{name} reached the loopback server: {r}");
        assert_eq!(dns.lookups(name), 1, "{name} was resolved once");
    }
    // A name that resolves to loopback at once is refused by the lookup that connects.
    for request in [get("loopback.test"), connect("loopback.test")] {
        let r = raw(&weir, &request).await;
        assert_forbidden(&r);
        assert!(r.contains("resolves to 127.0.0.1"), "{r}");
    }
    assert_eq!(inside.total(), 0);
    // The server does rebind: a second lookup of a name now says 127.0.0.1.
    let again: Vec<_> = tokio::net::lookup_host(("rebind-get.test", 80))
        .await
        .unwrap()
        .collect();
    assert_eq!(again, vec!["127.0.0.1:80".parse().unwrap()]);
    weir.handle.shutdown().await;
}

/// A DNS server on 127.0.0.1:53 (the namespace's root may bind it) that rebinds: see
/// [`dns_rebinding_cannot_reach_loopback`]. AAAA questions get an empty answer.
struct RebindingDns {
    seen: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl RebindingDns {
    fn start() -> RebindingDns {
        let socket = std::net::UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let counts = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                if let Some(answer) = Self::answer(&buf[..n], &counts) {
                    let _ = socket.send_to(&answer, from);
                }
            }
        });
        RebindingDns { seen }
    }

    fn lookups(&self, name: &str) -> usize {
        self.seen.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    fn answer(
        q: &[u8],
        seen: &std::sync::Mutex<std::collections::HashMap<String, usize>>,
    ) -> Option<Vec<u8>> {
        // Header (12 bytes), then one question: labels, type, class.
        let mut i = 12;
        let mut labels = Vec::new();
        while *q.get(i)? != 0 {
            let len = q[i] as usize;
            labels.push(String::from_utf8_lossy(q.get(i + 1..i + 1 + len)?).to_lowercase());
            i += 1 + len;
        }
        let end = i + 5;
        let qtype = u16::from_be_bytes([*q.get(i + 1)?, *q.get(i + 2)?]);
        let name = labels.join(".");
        let mut out = q[..2].to_vec();
        let record = |ip: [u8; 4]| {
            let mut r = vec![0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4];
            r.extend_from_slice(&ip);
            r
        };
        let answer = if qtype == 1 {
            let mut s = seen.lock().unwrap();
            let n = s.entry(name.clone()).or_insert(0);
            *n += 1;
            let first = *n == 1;
            match name.split('-').next() {
                Some("rebind") if first => Some(record([140, 82, 112, 6])),
                Some("fail") if first => None,
                _ => Some(record([127, 0, 0, 1])),
            }
        } else {
            Some(Vec::new())
        };
        // QR, RD, RA; rcode 3 (NXDOMAIN) when there is no answer at all.
        let rcode = if answer.is_none() { 3 } else { 0 };
        out.extend_from_slice(&[0x81, 0x80 | rcode, 0, 1]);
        let records = answer.unwrap_or_default();
        out.extend_from_slice(&[0, (!records.is_empty()) as u8, 0, 0, 0, 0]);
        out.extend_from_slice(q.get(12..end)?);
        out.extend_from_slice(&records);
        Some(out)
    }
}
