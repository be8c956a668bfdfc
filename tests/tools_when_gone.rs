//! Tools keep working when Weir is gone, through the real `weir` binary with a throwaway HOME
//! and no keychain: `weir env --if-running` prints the variables only while this Weir answers
//! (nothing, exit 0, otherwise); `weir env --unset` prints the commands that take Weir's
//! variables out (a company proxy stays); `weir setup vscode --undo` takes the proxy settings
//! back out of a settings.json with comments; `weir doctor` names every tool still pointed at
//! a Weir that is not running.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// A throwaway install: HOME, config file (interception off: no CA, no keychain needed) and
/// data dir, with Weir's port free now.
struct Install {
    dir: tempfile::TempDir,
    port: u16,
}

impl Install {
    fn new() -> Install {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // A closed loopback port as the upstream: doctor's upstream check fails fast.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(
            dir.path().join("weir.toml"),
            format!("default_upstreams = false\nlisten = \"127.0.0.1:{port}\"\nintercept = false\nwatch_github_status = false\n\n[[upstream]]\nname = \"up\"\norigin = \"http://127.0.0.1:{closed}\"\n"),
        )
        .unwrap();
        Install { dir, port }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    fn proxy(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn vscode_settings(&self) -> PathBuf {
        self.home().join("cfg/Code/User/settings.json")
    }

    /// `weir ARGS --config … --data-dir …` with this HOME, no keychain, and no proxy
    /// variables from the test's own environment.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.cmd_with_keychain(args, &self.home().join("data"));
        c.env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/weir-test-bus",
        );
        c
    }

    /// [`Install::cmd`] with data dir `data` and the test's own keychain (if any).
    fn cmd_with_keychain(&self, args: &[&str], data: &Path) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.args(args)
            .arg("--config")
            .arg(self.home().join("weir.toml"))
            .arg("--data-dir")
            .arg(data)
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join("cfg"))
            .env("XDG_DATA_HOME", self.home().join("xdg-data"))
            .env("WEIR_LOG", "weir=warn");
        for v in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
            "NO_PROXY",
            "no_proxy",
            "NODE_EXTRA_CA_CERTS",
            "SSL_CERT_FILE",
        ] {
            c.env_remove(v);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `weir serve` for this install, once it printed its address.
    fn serve(&self) -> Running {
        let mut child = self
            .cmd(&["serve"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.contains(&self.proxy()), "{first}");
        Running(child)
    }
}

/// A `weir serve` child, stopped (SIGTERM, then waited for) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[cfg(unix)]
#[test]
fn env_if_running_prints_only_while_weir_answers() {
    let i = Install::new();
    let out = i.run(&["env", "--if-running"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "", "Weir is not running: nothing to eval");

    let running = i.serve();
    let out = i.run(&["env", "--if-running"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("export HTTPS_PROXY={}\n", i.proxy())),
        "{text}"
    );
    assert!(
        text.contains(&format!("export http_proxy={}\n", i.proxy())),
        "{text}"
    );
    // Running: doctor names no tool as pointed at a stopped Weir.
    let doctor = stdout(&i.run(&["doctor"]));
    assert!(
        doctor.contains(&format!("✓ Weir answers on {}", i.proxy())),
        "{doctor}"
    );
    assert!(!doctor.contains("Weir is not running"), "{doctor}");

    drop(running);
    let out = i.run(&["env", "--if-running", "--shell", "fish"]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), ""));

    // Something else on the port is not Weir: nothing either.
    let other = std::net::TcpListener::bind(("127.0.0.1", i.port)).unwrap();
    let t = std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut s, _)) = other.accept() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
        }
    });
    let out = i.run(&["env", "--if-running"]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), ""));
    t.join().unwrap();
}

/// `weir serve` whose stdout nobody reads any more (a supervisor that read the address and went
/// away, `weir serve | head -1`): it keeps serving, and a SIGTERM still stops it cleanly. Its
/// stdout here is a pipe whose read end is closed before it starts, so every line it prints
/// meets a broken pipe.
#[cfg(unix)]
#[test]
fn serve_keeps_serving_when_nobody_reads_its_stdout() {
    let i = Install::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = i
        .cmd(&["serve"])
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let mut answered = false;
    for _ in 0..100 {
        if stdout(&i.run(&["env", "--if-running"])).contains("export HTTPS_PROXY=") {
            answered = true;
            break;
        }
        assert_eq!(running.0.try_wait().unwrap(), None, "weir serve exited");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(answered, "weir serve never answered its health check");
    Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()
        .unwrap();
    let status = running.0.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "a clean stop, not a panic: {status:?}"
    );
}

/// With a keychain (scripts/with-keychain.sh; skipped without one): `--if-running` checks
/// that the Weir answering is *this install's* (its health check names the install id kept in
/// this install's keychain), so another install's Weir on the port does not count.
#[cfg(unix)]
#[test]
fn env_if_running_wants_this_installs_weir() {
    use weir::secrets::{Account, Namespace};
    let i = Install::new();
    let (a, b) = (i.home().join("data-a"), i.home().join("data-b"));
    let kb = Namespace::for_data_dir(&b).keychain();
    if kb.probe().is_err() {
        eprintln!("skipped: no keychain (run under scripts/with-keychain.sh)");
        return;
    }
    kb.set(Account::InstallId.as_str(), "another-install")
        .unwrap();
    let mut child = i
        .cmd_with_keychain(&["serve"], &a)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains(&i.proxy()));
    let _running = Running(child);
    for _ in lines.by_ref().take(1) {}

    let out = i
        .cmd_with_keychain(&["env", "--if-running"], &a)
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(&format!("export HTTPS_PROXY={}", i.proxy())),
        "this install's Weir: {out:?}"
    );
    let out = i
        .cmd_with_keychain(&["env", "--if-running"], &b)
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), ""),
        "another install's Weir"
    );
    let _ = kb.delete(Account::InstallId.as_str());
    let _ = Namespace::for_data_dir(&a)
        .keychain()
        .delete(Account::InstallId.as_str());
}

#[test]
fn env_unset_prints_the_commands_that_take_weirs_variables_out() {
    let i = Install::new();
    let out = i
        .cmd(&["env", "--unset"])
        .env("HTTPS_PROXY", i.proxy())
        .env("https_proxy", format!("{}/", i.proxy()))
        .env("HTTP_PROXY", "http://proxy.corp.example:3128")
        .env("NO_PROXY", "localhost,127.0.0.1,::1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "unset HTTPS_PROXY\nunset https_proxy\nunset NO_PROXY\n",
        "the company proxy stays"
    );
    let out = i
        .cmd(&["env", "--unset", "--shell", "fish"])
        .env("http_proxy", i.proxy())
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "set -e http_proxy\n");
    // Nothing of Weir's set: nothing printed.
    assert_eq!(stdout(&i.run(&["env", "--unset"])), "");
    // `--unset` and `--if-running` do not go together.
    assert_eq!(
        i.run(&["env", "--unset", "--if-running"]).status.code(),
        Some(2)
    );
}

#[test]
fn setup_vscode_undo_takes_the_proxy_back_out_keeping_comments() {
    let i = Install::new();
    let path = i.home().join("settings.json");
    let original = "// My VS Code settings\n{\n  // big font, please\n  \"editor.fontSize\": 16, /* was 14 */\n  \"files.autoSave\": \"afterDelay\",\n}\n";
    std::fs::write(&path, original).unwrap();
    let p = path.to_str().unwrap();

    let out = i.run(&["setup", "vscode", "--apply", "--settings", p]);
    assert!(out.status.success(), "{out:?}");
    let applied = std::fs::read_to_string(&path).unwrap();
    assert!(
        applied.contains(&format!("\"http.proxy\": \"{}\"", i.proxy())),
        "{applied}"
    );

    let out = i.run(&["setup", "vscode", "--undo", "--settings", p]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("took Weir's proxy settings out"),
        "{}",
        stdout(&out)
    );
    let undone = std::fs::read_to_string(&path).unwrap();
    for kept in [
        "// My VS Code settings",
        "// big font, please",
        "/* was 14 */",
        "\"editor.fontSize\": 16",
        "\"files.autoSave\": \"afterDelay\"",
    ] {
        assert!(undone.contains(kept), "{kept:?} kept:\n{undone}");
    }
    for gone in ["http.proxy", "http.proxySupport", "http.proxyStrictSSL"] {
        assert!(!undone.contains(gone), "{gone} taken out:\n{undone}");
    }
    let bak = std::fs::read_to_string(i.home().join("settings.json.bak")).unwrap();
    assert_eq!(
        bak, applied,
        "the version with Weir's settings is kept as .bak"
    );

    // Again: nothing to take out, the file is untouched.
    let out = i.run(&["setup", "vscode", "--undo", "--settings", p]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("nothing changed"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), undone);

    // A company proxy in settings.json is not Weir's to remove.
    std::fs::write(
        &path,
        "{ \"http.proxy\": \"http://proxy.corp.example:3128\" }",
    )
    .unwrap();
    i.run(&["setup", "vscode", "--undo", "--settings", p]);
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("proxy.corp.example"));
}

#[test]
fn doctor_names_every_tool_still_pointed_at_a_stopped_weir() {
    let i = Install::new();
    // VS Code (its default settings path under XDG_CONFIG_HOME) and git point at Weir.
    let vs = i.vscode_settings();
    std::fs::create_dir_all(vs.parent().unwrap()).unwrap();
    std::fs::write(&vs, "{\n  // mine\n}\n").unwrap();
    assert!(i
        .run(&[
            "setup",
            "vscode",
            "--apply",
            "--settings",
            vs.to_str().unwrap()
        ])
        .status
        .success());
    let git = Command::new("git")
        .args(["config", "--global", "http.proxy", &i.proxy()])
        .env("HOME", i.home())
        .env("XDG_CONFIG_HOME", i.home().join("cfg"))
        .status();
    let have_git = git.is_ok_and(|s| s.success());

    let out = i
        .cmd(&["doctor"])
        .env("HTTPS_PROXY", i.proxy())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("✗ nothing answers on 127.0.0.1:{}", i.port)),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "✗ HTTPS_PROXY in this environment is {}, but Weir is not running",
            i.proxy()
        )),
        "{text}"
    );
    assert!(text.contains("eval \"$(weir env --unset)\""), "{text}");
    assert!(
        text.contains(&format!(
            "✗ VS Code's http.proxy in {} is {}, but Weir is not running",
            vs.display(),
            i.proxy()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "weir setup vscode --undo --settings {}",
            vs.display()
        )),
        "{text}"
    );
    if have_git {
        assert!(
            text.contains(&format!(
                "✗ git's global http.proxy is {}, but Weir is not running",
                i.proxy()
            )),
            "{text}"
        );
        assert!(
            text.contains("git config --global --unset http.proxy"),
            "{text}"
        );
    }

    // Taken out: doctor no longer names them.
    i.run(&[
        "setup",
        "vscode",
        "--undo",
        "--settings",
        vs.to_str().unwrap(),
    ]);
    let text = stdout(&i.run(&["doctor"]));
    assert!(!text.contains("VS Code's http.proxy"), "{text}");
    assert!(!text.contains("HTTPS_PROXY in this environment"), "{text}");
}
