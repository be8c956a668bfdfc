//! A real `nats-server` (Debian package `nats-server`) for the team tests: started in a temp
//! dir on a free loopback port with JetStream and a store dir, stopped (by its own pid) on drop.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where `nats-server` is, or `None` (the caller skips loudly). Debian installs it in
/// /usr/sbin, which is not on every user's PATH.
pub fn nats_server_bin() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            "/usr/sbin".into(),
            "/usr/local/bin".into(),
            "/usr/bin".into(),
        ])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}

/// Skips the calling test with a loud message when `nats-server` is absent.
#[macro_export]
macro_rules! require_nats {
    () => {
        match nats::nats_server_bin() {
            Some(b) => b,
            None => {
                eprintln!("\n!!!!!!!! SKIPPED: `nats-server` is not installed (apt-get install nats-server; scripts/test.sh does) !!!!!!!!\n");
                return;
            }
        }
    };
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

pub struct NatsServer {
    pub addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts on a free port; `auth` is extra flags (e.g. `["--user", "u", "--pass", "p"]`).
    pub async fn start(bin: &std::path::Path, auth: &[&str]) -> NatsServer {
        Self::start_on(bin, free_port(), auth).await
    }

    pub async fn start_on(bin: &std::path::Path, port: u16, auth: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(bin)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path().join("js"))
            .args(auth)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // Owned (and so killed and waited for on drop) before anything can fail.
        let mut server = NatsServer {
            addr,
            child,
            _dir: dir,
        };
        for _ in 0..250 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.stop();
        panic!("nats-server did not listen on {addr}");
    }

    /// Starts with TLS required (`--tls`), serving `cert`/`key` (PEM files).
    pub async fn start_tls(
        bin: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> NatsServer {
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        Self::start(bin, &["--tls", "--tlscert", cert, "--tlskey", key]).await
    }

    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// `tls://127.0.0.1:PORT` (the client requires TLS).
    pub fn tls_url(&self) -> String {
        format!("tls://{}", self.addr)
    }

    /// Stops the server (kill by its own pid).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
