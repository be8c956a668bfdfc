//! The control API answers only to Weir's own Host names, sends no CORS headers, needs the
//! secret for changes, and bad input gets problem+json.

mod common;
use common::{with_secret, Upstream, Weir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn raw(weir: &Weir, request: &str) -> String {
    let mut s = TcpStream::connect(weir.handle.local_addr()).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn status_answers_own_host_and_refuses_a_foreign_one() {
    let weir = Weir::start(&[], "").await;
    let port = weir.handle.local_addr().port();
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let r = raw(
            &weir,
            &format!("GET /_weir/api/status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 200"), "{host}: {r}");
        assert!(r.contains("\"upstreams\""));
        assert!(
            !r.to_ascii_lowercase().contains("access-control-allow"),
            "no CORS headers ever"
        );
    }
    // DNS rebinding: the page's own name in Host.
    let r = raw(&weir, &format!("GET /_weir/api/status HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n")).await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(
        r.contains("application/problem+json") && r.contains("forbidden_host"),
        "{r}"
    );
    assert!(!r.contains("\"upstreams\""));
    // Right host, wrong port (another local service's name).
    let r = raw(
        &weir,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
}

#[tokio::test]
async fn foreign_origin_and_missing_secret_are_refused() {
    let weir = Weir::start(&[], "").await;
    let base = weir.proxy_url();
    let c = reqwest::Client::new();
    let r = c
        .get(format!("{base}/_weir/api/status"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = c
        .post(format!("{base}/_weir/api/pause"))
        .body(r#"{"paused":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert!(!weir.handle.is_paused());
    let r = with_secret(
        c.post(format!("{base}/_weir/api/pause"))
            .body(r#"{"paused":true}"#),
        weir.handle.control_secret(),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(weir.handle.is_paused());
}

#[tokio::test]
async fn metrics_and_problem_pages_are_served() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    weir.client("a")
        .get(format!("{}/agents/sessions", up.origin()))
        .send()
        .await
        .unwrap();
    let m = reqwest::get(format!("{}/metrics", weir.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains("weir_client_requests_total{upstream=\"up0\",class=\"list\"} 1"),
        "{m}"
    );
    assert!(m.contains("weir_upstream_requests_total{upstream=\"up0\",class=\"list\"} 1"));
    let page = reqwest::get(format!("{}/_weir/problems/breaker_open", weir.proxy_url()))
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("circuit breaker"));
}

#[tokio::test]
async fn oversized_headers_get_431_problem_json() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "[limits]\nmax_header_bytes = 4096\n").await;
    let big = "x".repeat(6000);
    let r = weir
        .client("a")
        .get(format!("{}/agents/sessions", up.origin()))
        .header("x-big", big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 431);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "header_too_large");
    assert_eq!(p["status"], 431);
    assert!(p["type"]
        .as_str()
        .unwrap()
        .ends_with("/_weir/problems/header_too_large"));
    assert!(p["request_id"].is_string());
    assert_eq!(up.total(), 0, "nothing reached the upstream");
    // The control API is behind the same front door: the same cap, the same problem.
    let r = reqwest::Client::new()
        .get(format!("{}/_weir/api/status", weir.proxy_url()))
        .header("x-big", "x".repeat(6000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 431);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["kind"], "header_too_large");
}

#[tokio::test]
async fn surfaces_are_counted_from_user_agent() {
    let up = Upstream::start().await;
    let weir = Weir::start(&[&up.origin()], "").await;
    let c = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(weir.proxy_url()).unwrap())
        .build()
        .unwrap();
    for ua in [
        "GitHubCopilotChat/0.22",
        "gh/2.63.0",
        "Mozilla/5.0 Chrome",
        "curl/8",
    ] {
        c.get(format!("{}/agents/sessions", up.origin()))
            .header("user-agent", ua)
            .send()
            .await
            .unwrap();
    }
    let s = weir.status().await;
    for k in ["vscode", "gh_cli", "browser", "other"] {
        assert_eq!(s["surfaces"][k], 1, "{k}");
    }
}

#[tokio::test]
async fn settings_are_saved_to_the_config_file_validated_and_backed_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        "# my comment\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n",
    )
    .unwrap();
    let settings = weir::config::load_file(&file).unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.config_file = Some(file.clone());
    let h = weir::start(opts).await.unwrap();
    let url = format!("{}/_weir/api/settings", h.base_url());
    let c = reqwest::Client::new();
    let got: serde_json::Value = with_secret(c.get(&url), h.control_secret())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["config_file"], file.display().to_string());
    let patch = r#"{"classes":{"list":{"fresh_ttl":"30s"}}}"#;
    assert_eq!(c.put(&url).body(patch).send().await.unwrap().status(), 401);
    let r = with_secret(c.put(&url).body(patch), h.control_secret()).await;
    assert_eq!(r.status(), 200);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# my comment\n"), "{text}");
    let saved = weir::config::load_file(&file).unwrap();
    assert_eq!(
        saved.classes.get(weir::config::RouteClass::List).fresh_ttl,
        std::time::Duration::from_secs(30)
    );
    assert!(dir.path().join("config.toml.bak").exists());
    // An invalid change is refused with the validator's file:line message and nothing written.
    let bad = r#"{"classes":{"list":{"fresh_ttl":"forever"}}}"#;
    let r = with_secret(c.put(&url).body(bad), h.control_secret()).await;
    assert_eq!(r.status(), 422);
    let p: serde_json::Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("fresh_ttl"), "{p}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    h.shutdown().await;
}

#[tokio::test]
async fn queue_and_settings_reads_need_the_secret() {
    let weir = Weir::start(&[], "[queue]\ncredentials = \"memory\"\n").await;
    let base = weir.proxy_url();
    let c = reqwest::Client::new();
    for path in [
        "/_weir/api/queue",
        "/_weir/api/queue/1",
        "/_weir/api/settings",
    ] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    for (path, want) in [
        ("/_weir/api/queue", 200),
        ("/_weir/api/queue/1", 404),
        ("/_weir/api/settings", 200),
    ] {
        let r = with_secret(c.get(format!("{base}{path}")), weir.handle.control_secret()).await;
        assert_eq!(r.status(), want, "{path}");
    }
}

#[tokio::test]
async fn settings_can_never_change_where_credentials_go() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let text = "default_upstreams = false\nlisten = \"127.0.0.1:0\"\nwatch_github_status = false\n[[upstream]]\nname = \"copilot-api\"\norigin = \"https://api.githubcopilot.com\"\n";
    std::fs::write(&file, text).unwrap();
    let settings = weir::config::load_file(&file).unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.config_file = Some(file.clone());
    let h = weir::start(opts).await.unwrap();
    let url = format!("{}/_weir/api/settings", h.base_url());
    let c = reqwest::Client::new();
    let refused = [
        r#"{"upstreams":[{"name":"copilot-api","origin":"https://evil.example"}]}"#,
        r#"{"upstreams":[{"name":"copilot-api","origin":"https://api.githubcopilot.com","fallback":"https://evil.example"}]}"#,
        r#"{"upstreams":[{"name":"copilot-api","origin":"https://api.githubcopilot.com"},{"name":"x","origin":"https://evil.example"}]}"#,
        r#"{"upstreams":[]}"#,
        r#"{"connect_to":{"api.githubcopilot.com:443":"203.0.113.9:443"}}"#,
        r#"{"upstream_proxy":"http://evil.example:8080"}"#,
        r#"{"fallback":"https://evil.example"}"#,
    ];
    for patch in refused {
        let r = with_secret(c.put(&url).body(patch), h.control_secret()).await;
        assert_eq!(r.status(), 422, "{patch}");
        let p: serde_json::Value = r.json().await.unwrap();
        assert!(
            p["detail"].as_str().unwrap().contains("config file"),
            "{patch}: {p}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "nothing written"
    );
    // The same upstreams (as the dashboard sends them back) and other knobs are fine.
    let ok = r#"{"upstreams":[{"name":"copilot-api","origin":"https://api.githubcopilot.com","fallback":null}],"classes":{"list":{"fresh_ttl":"30s"}}}"#;
    let r = with_secret(c.put(&url).body(ok), h.control_secret()).await;
    assert_eq!(r.status(), 200);
    h.shutdown().await;
}

/// Upstream names are identity (the stored token, queued credentials and `/user` lookups are
/// keyed by name): the settings API refuses a rename, and two names swapped between origins
/// (which compares equal origin by origin, position by position), and writes nothing.
#[tokio::test]
async fn settings_refuse_renames_and_swapped_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let text = "listen = \"127.0.0.1:0\"\nwatch_github_status = false\ndefault_upstreams = false\n\
[[upstream]]\nname = \"copilot-api\"\norigin = \"https://api.githubcopilot.com\"\n\
[[upstream]]\nname = \"github-api\"\norigin = \"https://api.github.com\"\n";
    std::fs::write(&file, text).unwrap();
    let settings = weir::config::load_file(&file).unwrap();
    let mut opts = weir::EngineOptions::new(settings, dir.path().join("data"));
    opts.config_file = Some(file.clone());
    let h = weir::start(opts).await.unwrap();
    let url = format!("{}/_weir/api/settings", h.base_url());
    let c = reqwest::Client::new();
    for patch in [
        r#"{"upstreams":[{"name":"github-api","origin":"https://api.githubcopilot.com"},{"name":"copilot-api","origin":"https://api.github.com"}]}"#,
        r#"{"upstreams":[{"name":"renamed","origin":"https://api.githubcopilot.com"},{"name":"github-api","origin":"https://api.github.com"}]}"#,
    ] {
        let r = with_secret(c.put(&url).body(patch), h.control_secret()).await;
        assert_eq!(r.status(), 422, "{patch}");
        let p: serde_json::Value = r.json().await.unwrap();
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains("upstreams[0].name") && detail.contains("config file"),
            "{patch}: {p}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "nothing written"
    );
    let names: Vec<String> = h
        .status()
        .await
        .upstreams
        .iter()
        .map(|u| u.name.clone())
        .collect();
    assert_eq!(names, ["copilot-api", "github-api"]);
    // The same upstreams sent back are fine.
    let ok = r#"{"upstreams":[{"name":"copilot-api","origin":"https://api.githubcopilot.com"},{"name":"github-api","origin":"https://api.github.com"}],"classes":{"list":{"fresh_ttl":"30s"}}}"#;
    let r = with_secret(c.put(&url).body(ok), h.control_secret()).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    h.shutdown().await;
}
