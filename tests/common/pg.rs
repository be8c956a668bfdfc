//! A real PostgreSQL cluster for a test: `initdb` + `pg_ctl` in a temp dir, on a free loopback
//! port, stopped when dropped. PostgreSQL refuses to run as root, so as root (this machine, CI)
//! the server runs as `nobody` through `runuser`, in a directory that user owns.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    log: PathBuf,
    pub port: u16,
    as_nobody: bool,
    /// TLS on (`ssl=on`), and TCP clients must use it (`hostssl`; plain TCP is rejected).
    tls: bool,
}

/// The newest `/usr/lib/postgresql/*/bin` holding `initdb` and `pg_ctl`.
fn find_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .collect();
    dirs.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Postgres {
    /// Starts a fresh cluster, or `None` (said loudly) when PostgreSQL is not installed.
    pub fn start() -> Option<Postgres> {
        Self::start_with(None)
    }

    /// Starts a cluster with `ssl=on` serving `cert`/`key` (PEM), where TCP clients must use
    /// TLS: `pg_hba.conf` has `hostssl` only, so a plain-TCP connection is rejected. The test's
    /// own client ([`Postgres::client`]) comes through the Unix socket.
    pub fn start_tls(cert: &Path, key: &Path) -> Option<Postgres> {
        Self::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&Path, &Path)>) -> Option<Postgres> {
        let Some(bin) = find_bin() else {
            eprintln!("SKIPPED: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); `apt-get install postgresql` (scripts/test.sh does)");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("weir-pg")
            .tempdir_in("/tmp")
            .unwrap();
        let as_nobody = is_root();
        if as_nobody {
            let ok = Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown the cluster dir to nobody");
        }
        let pg = Postgres {
            data: dir.path().join("data"),
            log: dir.path().join("log"),
            _dir: dir,
            bin,
            port: free_port(),
            as_nobody,
            tls: tls.is_some(),
        };
        let out = pg
            .cmd("initdb")
            .args(["-A", "trust", "-U", "weir", "--no-sync", "-E", "UTF8", "-D"])
            .arg(&pg.data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some((cert, key)) = tls {
            // In the data dir, owned by the server's user, the key 0600 (PostgreSQL insists).
            std::fs::copy(cert, pg.data.join("server.crt")).unwrap();
            std::fs::copy(key, pg.data.join("server.key")).unwrap();
            std::fs::write(
                pg.data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                pg.data.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
            if pg.as_nobody {
                let ok = Command::new("chown")
                    .args(["-R", "nobody:nogroup"])
                    .arg(&pg.data)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "chown the TLS files to nobody");
            }
        }
        pg.start_server();
        Some(pg)
    }

    fn cmd(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn sock_dir(&self) -> &Path {
        self.data.parent().unwrap()
    }

    /// Starts (or restarts) the server and waits until it accepts connections.
    pub fn start_server(&self) {
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60",
            self.port,
            self.sock_dir().display()
        );
        if self.tls {
            opts.push_str(" -c ssl=on");
        }
        let out = self
            .cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-o", &opts, "-l"])
            .arg(&self.log)
            .args(["-w", "-t", "60", "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {} {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Stops the server (fast: open connections are cut, committed data stays).
    pub fn stop_server(&self) {
        let _ = self
            .cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"])
            .output();
    }

    /// The postmaster and every backend it runs (from `postmaster.pid` and `/proc`), for a
    /// test that freezes the server with SIGSTOP: connections stay open and nothing answers.
    pub fn pids(&self) -> Vec<u32> {
        let Some(main) = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<u32>().ok()))
        else {
            return Vec::new();
        };
        let children = std::fs::read_to_string(format!("/proc/{main}/task/{main}/children"))
            .unwrap_or_default();
        std::iter::once(main)
            .chain(children.split_whitespace().filter_map(|p| p.parse().ok()))
            .collect()
    }

    /// Sends `signal` (`STOP`, `CONT`) to [`Postgres::pids`]; returns how many were signalled.
    pub fn signal(&self, signal: &str, pids: &[u32]) -> usize {
        pids.iter()
            .filter(|p| {
                Command::new("kill")
                    .arg(format!("-{signal}"))
                    .arg(p.to_string())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .count()
    }

    /// `postgresql://weir@127.0.0.1:PORT/postgres`
    pub fn url(&self) -> String {
        format!("postgresql://weir@127.0.0.1:{}/postgres", self.port)
    }

    /// A client of the test's own (to look at the tables).
    pub async fn client(&self) -> tokio_postgres::Client {
        // With TLS required on TCP, the test's own look goes through the Unix socket.
        let host = if self.tls {
            self.sock_dir().display().to_string()
        } else {
            "127.0.0.1".to_string()
        };
        let (client, conn) = tokio_postgres::connect(
            &format!("host={host} port={} user=weir dbname=postgres", self.port),
            tokio_postgres::NoTls,
        )
        .await
        .expect("connect to the test cluster");
        tokio::spawn(conn);
        client
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}
