//! A real `nats-server` (Debian package) for the team scenario: a temp dir, a free loopback
//! port, JetStream on; stopped (by its own pid) on drop.

use crate::LabError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where `nats-server` is (Debian puts it in /usr/sbin, not on every PATH).
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

pub struct NatsServer {
    addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    pub async fn start() -> Result<NatsServer, LabError> {
        Self::start_with_users(&[]).await
    }

    /// With `users`, each may publish breaker facts only under its own name
    /// (`weir.v1.*.breaker.<user>`, password `pw-<user>`): Weir counts teammates by the NATS
    /// user the server lets publish, so a team needs one login per teammate.
    pub async fn start_with_users(users: &[String]) -> Result<NatsServer, LabError> {
        let bin = nats_server_bin().ok_or_else(|| {
            LabError::Settings(
                "`nats-server` is not installed (apt-get install nats-server)".into(),
            )
        })?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = tempfile::tempdir()?;
        let mut cmd = Command::new(bin);
        cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path().join("js"));
        if !users.is_empty() {
            let mut conf = String::from("authorization {\n  users = [\n");
            for u in users {
                conf.push_str(&format!(
                    "    {{user: {u}, password: pw-{u}, permissions: {{publish: [\"weir.v1.*.breaker.{u}\"], subscribe: [\"weir.v1.>\", \"_INBOX.>\"]}}}}\n"
                ));
            }
            conf.push_str("  ]\n}\n");
            let path = dir.path().join("nats.conf");
            std::fs::write(&path, conf)?;
            cmd.arg("-c").arg(path);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut server = NatsServer {
            addr,
            child,
            _dir: dir,
        };
        for _ in 0..250 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.stop();
        Err(LabError::Settings(format!(
            "nats-server did not listen on {addr}"
        )))
    }

    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
