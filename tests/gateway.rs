#![cfg(feature = "gateway")]
//! The team gateway (`weir serve --gateway`) as real processes: its doors (TLS only,
//! allow-list, admin listener with its token), and replicas sharing the create queue in a real
//! PostgreSQL (started by the test with `initdb` + `pg_ctl`): migrations from empty, a database
//! that goes down, and the acceptance run — 100 creates queued during an outage, a replica
//! killed with `kill -9` mid-replay, exactly 100 creates upstream.

#[path = "common/gateway.rs"]
mod gw;
#[path = "common/pg.rs"]
mod pg;
#[path = "common/tls.rs"]
mod tls;

use gw::{client_trusting, eventually, send, CountingUpstream, GatewayFiles, Replica, CREATE_PATH};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Create `i`, from one of five users.
async fn create(
    r: &Replica,
    files: &GatewayFiles,
    up: &CountingUpstream,
    i: usize,
) -> Result<gw::Answer, String> {
    gw::create(r, files, up, i, &format!("token user-{}", i % 5)).await
}

async fn counts(db: &tokio_postgres::Client) -> std::collections::BTreeMap<String, i64> {
    db.query(
        "SELECT state, COUNT(*) FROM weir_queue_items GROUP BY state",
        &[],
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
    .collect()
}

fn shared_queue(pg: &pg::Postgres) -> String {
    format!(
        "allow = [\"127.0.0.0/8\"]\npostgres_url = \"{}\"\nsecret_key_file = \"gateway-key\"\nlease = \"8s\"",
        pg.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_tls_only_allow_list_and_admin_listener() {
    let up = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    // Loopback clients allowed; the queue is this replica's own SQLite file (no PostgreSQL).
    let open = Replica::start(&files.config(up.addr, "allow = [\"127.0.0.0/8\", \"::1\"]"));

    // Plain HTTP to either listener: refused with a problem saying to use TLS.
    for addr in [open.addr, open.admin] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /_weir/api/status HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text).await;
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(text.contains("application/problem+json"), "{text}");
        assert!(text.contains("\"kind\":\"tls_required\""), "{text}");
    }

    // A create through the gateway reaches the upstream with the caller's own token.
    let a = create(&open, &files, &up, 1).await.unwrap();
    assert_eq!(a.status, 201, "{:?}", a.body);
    assert_eq!(up.created()[0].authorization, "token user-1");

    // The clients' listener refuses control calls, with or without the admin token.
    for headers in [
        vec![],
        vec![("authorization", "Bearer admin-token-0123456789abcdef")],
    ] {
        let a = send(
            open.addr,
            &files.cert_der,
            "GET",
            "/_weir/api/status",
            &headers,
            "",
        )
        .await
        .unwrap();
        assert_eq!(a.status, 403, "{:?}", a.body);
        assert_eq!(a.json()["kind"], "admin_only");
    }
    // The admin listener wants its token…
    for bad in [
        vec![],
        vec![("authorization", "Bearer wrong-token-0000000000")],
    ] {
        let a = send(
            open.admin,
            &files.cert_der,
            "GET",
            "/_weir/api/status",
            &bad,
            "",
        )
        .await
        .unwrap();
        assert_eq!(a.status, 401, "{:?}", a.body);
        assert_eq!(a.json()["kind"], "unauthorized");
    }
    // …and with it serves the control API, mutating calls included.
    let bearer = format!("Bearer {}", files.admin_token);
    let auth = [("authorization", bearer.as_str())];
    let a = send(
        open.admin,
        &files.cert_der,
        "GET",
        "/_weir/api/status",
        &auth,
        "",
    )
    .await
    .unwrap();
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(a.json()["queue"]["backend"], "sqlite");
    let g = &a.json()["gateway"];
    assert_eq!(g["listen"], open.addr.to_string());
    assert_eq!(g["admin_listen"], open.admin.to_string());
    assert_eq!(g["allow"], serde_json::json!(["127.0.0.0/8", "::1/128"]));
    assert_eq!(
        g["replica"].as_str().unwrap().rsplit('/').next(),
        Some(open.pid().to_string().as_str())
    );
    assert_eq!(g["shared_queue"], false);
    let a = send(
        open.admin,
        &files.cert_der,
        "GET",
        "/_weir/api/queue",
        &auth,
        "",
    )
    .await
    .unwrap();
    assert_eq!(a.status, 200, "{:?}", a.body);
    drop(open);

    // Replicas can share one interception CA from files (for CONNECTs to managed https hosts).
    let ca = weir_tls::LocalCa::generate(
        &["api.example.test".to_string()],
        weir_tls::OffsetDateTime::now_utc(),
    )
    .unwrap();
    std::fs::write(files.dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
    std::fs::write(files.dir.path().join("ca-key.pem"), ca.key_pem()).unwrap();
    let config = files.config(
        up.addr,
        "allow = [\"127.0.0.0/8\"]\nintercept_ca_cert_file = \"ca.pem\"\nintercept_ca_key_file = \"ca-key.pem\"\n\n[[upstream]]\nname = \"gh\"\norigin = \"https://api.example.test\"",
    );
    let with_ca = Replica::start(&config);
    let line = with_ca.banner.last().unwrap();
    assert!(
        line.contains("intercepted") && line.contains(&ca.fingerprint_sha256()),
        "{:?}",
        with_ca.banner
    );
    drop(with_ca);

    // A client outside the allow-list gets a 403 problem and never reaches the upstream.
    let closed = Replica::start(&files.config(up.addr, "allow = [\"10.0.0.0/8\"]"));
    let a = create(&closed, &files, &up, 2).await.unwrap();
    assert_eq!(a.status, 403, "{:?}", a.body);
    assert_eq!(
        a.headers["content-type"], "application/problem+json",
        "{:?}",
        a.headers
    );
    assert_eq!(a.json()["kind"], "forbidden_client");
    assert!(a.json()["detail"].as_str().unwrap().contains("127.0.0.1"));
    assert_eq!(
        up.created().len(),
        1,
        "the refused create never left the gateway"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_queue_migrates_from_empty_and_survives_the_database_going_down() {
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let up = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let config = files.config(up.addr, &shared_queue(&pg));
    let db = pg.client().await;
    let tables = "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'weir_%'";
    assert_eq!(db.query_one(tables, &[]).await.unwrap().get::<_, i64>(0), 0);

    // From empty: every migration, once, even with two replicas starting.
    let a = Replica::start(&config);
    let b = Replica::start(&config);
    let versions: Vec<i32> = db
        .query(
            "SELECT version FROM weir_schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6]);
    // Items, credentials, signals, hand-off offers (and the migrations' own table).
    assert_eq!(db.query_one(tables, &[]).await.unwrap().get::<_, i64>(0), 5);

    // Queued during an outage; the credential is sealed, never stored as written.
    up.set(|s| s.outage = true);
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = create(&a, &files, &up, i).await.unwrap();
        assert_eq!(r.status, 201, "{:?}", r.body);
        ids.push(r.json()["weir"]["queue_id"].as_i64().unwrap());
    }
    // The same create through the other replica is the same queued item (one identity key for
    // all replicas, one live dedupe key in the database).
    let again = create(&b, &files, &up, 1).await.unwrap();
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_eq!(again.json()["weir"]["queue_id"].as_i64(), Some(ids[1]));
    assert_eq!(counts(&db).await.values().sum::<i64>(), 3);
    drop(b);
    let sealed: Vec<Vec<u8>> = db
        .query("SELECT sealed FROM weir_queue_credentials", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!sealed.is_empty());
    for s in &sealed {
        assert!(
            !s.windows(10).any(|w| w == b"token user"),
            "a credential was stored in the clear"
        );
    }

    // The database goes down: a create that must be queued gets the queue's 503 problem.
    pg.stop_server();
    let r = create(&a, &files, &up, 10).await.unwrap();
    assert_eq!(r.status, 503, "{:?}", r.body);
    let p = r.json();
    assert_eq!(p["kind"], "queue_unavailable", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("unreachable"), "{p}");
    // The status says so too (it said `available: true`, `error: null`, with no counts).
    let bearer = format!("Bearer {}", files.admin_token);
    let s = send(
        a.admin,
        &files.cert_der,
        "GET",
        "/_weir/api/status",
        &[("authorization", bearer.as_str())],
        "",
    )
    .await
    .unwrap()
    .json();
    assert_eq!(s["queue"]["available"], false, "{}", s["queue"]);
    assert!(
        s["queue"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("unreachable")),
        "{}",
        s["queue"]
    );

    // Back up: nothing already queued was lost; the upstream heals and gets exactly those.
    pg.start_server();
    let db = pg.client().await;
    // (One may be `replaying`: the replica was sending it when the database went away.)
    let c = counts(&db).await;
    let live: i64 = ["queued", "replaying", "in_doubt"]
        .iter()
        .map(|s| c.get(*s).copied().unwrap_or(0))
        .sum();
    assert_eq!(live, 3, "{c:?}");
    up.set(|s| s.outage = false);
    let done = eventually(300, || async {
        counts(&db).await.get("done").copied().unwrap_or(0) == 3
    })
    .await;
    assert!(done, "{:?}\n{}", counts(&db).await, a.log());
    let mut made: Vec<String> = up.created().into_iter().map(|c| c.statement).collect();
    made.sort();
    assert_eq!(made, ["task 0", "task 1", "task 2"]);

    // A read-only database (a standby, or read-only by setting): the same 503, saying so.
    for sql in [
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "SELECT pg_reload_conf()",
    ] {
        db.batch_execute(sql).await.unwrap();
    }
    up.set(|s| s.outage = true);
    // The replica's session reads the reloaded setting when it next idles: until then a create
    // may still be queued; once it applies, creates get the 503 naming the cause.
    let mut said_read_only = false;
    for i in 20..60 {
        let r = create(&a, &files, &up, i).await.unwrap();
        if r.status == 503 {
            let p = r.json();
            assert_eq!(p["kind"], "queue_unavailable", "{p}");
            said_read_only = p["detail"].as_str().unwrap().contains("read-only");
            break;
        }
        assert_eq!(r.status, 201, "{:?}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(said_read_only, "{}", a.log());
    assert_eq!(
        counts(&db).await.get("done").copied(),
        Some(3),
        "nothing lost"
    );
}

/// PostgreSQL frozen (every server process `SIGSTOP`ped: TCP is accepted, nothing answers)
/// during an upstream outage: creates that must be queued are each answered within the
/// client's bound with the queue's 503 problem saying the database is not answering (before
/// the fix they waited a statement or connect timeout each, in turn, behind one another: the
/// fifth about 20 s), nothing already queued is lost, and once the database answers again
/// creates are queued and every queued one is made upstream exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_database_answers_creates_in_time_and_loses_nothing() {
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let up = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let a = Replica::start(&files.config(up.addr, &shared_queue(&pg)));
    up.set(|s| s.outage = true);
    let r = create(&a, &files, &up, 0).await.unwrap();
    assert_eq!(r.status, 201, "{:?}", r.body);

    let pids = pg.pids();
    assert!(pg.signal("STOP", &pids) > 1, "postmaster and backends");
    // Five at once, each bounded by a client's patience (12 s).
    let answers = futures::future::join_all((1..=5).map(|i| {
        let (a, files, up) = (&a, &files, &up);
        async move {
            tokio::time::timeout(Duration::from_secs(12), create(a, files, up, i))
                .await
                .map_err(|_| format!("create {i}: no answer within 12 s"))
                .and_then(|r| r)
        }
    }))
    .await;
    pg.signal("CONT", &pids);
    for r in &answers {
        let r = r.as_ref().unwrap_or_else(|e| panic!("{e}\n{}", a.log()));
        assert_eq!(r.status, 503, "{:?}", r.body);
        let p = r.json();
        assert_eq!(p["kind"], "queue_unavailable", "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains("unreachable")
                && (detail.contains("timed out") || detail.contains("not answering")),
            "{p}"
        );
    }

    // Answering again: a create is queued again (after the hold), nothing was lost, and the
    // upstream, healed, gets exactly the queued ones.
    let db = pg.client().await;
    let mut queued_again = false;
    for _ in 0..40 {
        let r = create(&a, &files, &up, 6).await.unwrap();
        if r.status == 201 {
            queued_again = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(queued_again, "{}", a.log());
    up.set(|s| s.outage = false);
    let done = eventually(300, || async {
        counts(&db).await.get("done").copied().unwrap_or(0) == 2
    })
    .await;
    assert!(done, "{:?}\n{}", counts(&db).await, a.log());
    let mut made: Vec<String> = up.created().into_iter().map(|c| c.statement).collect();
    made.sort();
    assert_eq!(made, ["task 0", "task 6"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_lose_and_double_nothing_when_one_is_killed_mid_replay() {
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let up = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let config = files.config(up.addr, &shared_queue(&pg));
    let mut replicas: Vec<Replica> = (0..3).map(|_| Replica::start(&config)).collect();
    let db = pg.client().await;

    // The outage: 100 creates, spread over the replicas as a load balancer would, all queued.
    up.set(|s| s.outage = true);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let r = &replicas[i % 3];
        let (addr, cert, up_addr) = (r.addr, files.cert_der.clone(), up.addr);
        tasks.push(tokio::spawn(async move {
            let token = format!("token user-{}", i % 5);
            let body = serde_json::json!({"problem_statement": format!("task {i}")}).to_string();
            send(
                addr,
                &cert,
                "POST",
                &format!("http://{up_addr}{CREATE_PATH}"),
                &[
                    ("authorization", token.as_str()),
                    ("content-type", "application/json"),
                ],
                &body,
            )
            .await
        }));
    }
    for t in tasks {
        let a = t.await.unwrap().unwrap();
        assert_eq!(a.status, 201, "{:?}", a.body);
    }
    assert_eq!(up.created().len(), 0);
    let live: i64 = counts(&db).await.values().sum();
    assert_eq!(live, 100);

    // The upstream heals; its 40th create never answers, and that replica is killed.
    up.set(|s| {
        s.hold_at = Some(40);
        s.outage = false;
    });
    assert!(
        eventually(600, || async { up.held().is_some() }).await,
        "replay never reached 40 creates"
    );
    let held = up.held().unwrap();
    let row = db
        .query_one(
            "SELECT state, lease_owner FROM weir_queue_items WHERE problem_statement = $1",
            &[&held],
        )
        .await
        .unwrap();
    let (state, owner): (String, String) = (row.get(0), row.get(1));
    assert_eq!(state, "replaying");
    let pid: u32 = owner.rsplit('/').next().unwrap().parse().unwrap();
    let victim = replicas
        .iter()
        .position(|r| r.pid() == pid)
        .expect("the lease names a replica");
    replicas[victim].kill9();

    // After recovery: every item done, exactly 100 sessions, each once, with its own token.
    let all_done = eventually(600, || async {
        counts(&db).await.get("done").copied().unwrap_or(0) == 100
    })
    .await;
    let logs: Vec<String> = replicas.iter().map(|r| r.log()).collect();
    assert!(
        all_done,
        "{:?}\n{}",
        counts(&db).await,
        logs.join("\n----\n")
    );
    let created = up.created();
    assert_eq!(created.len(), 100, "0 lost, 0 doubled");
    let mut statements: Vec<&str> = created.iter().map(|c| c.statement.as_str()).collect();
    statements.sort();
    statements.dedup();
    assert_eq!(statements.len(), 100, "every task exactly once");
    for c in &created {
        let i: usize = c.statement["task ".len()..].parse().unwrap();
        assert_eq!(
            c.authorization,
            format!("token user-{}", i % 5),
            "forwarded as it was"
        );
    }
    // The killed replica's create was found upstream by the in-doubt lookup, not sent again.
    let result: String = db
        .query_one(
            "SELECT result FROM weir_queue_items WHERE problem_statement = $1",
            &[&held],
        )
        .await
        .unwrap()
        .get(0);
    assert!(result.contains("found_by_lookup"), "{result}");
    assert!(up.state.lock().unwrap().lookups >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_that_opens_on_one_replica_holds_the_others_back() {
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    let up = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let config = files.config_with_open_wait(up.addr, "60s", &shared_queue(&pg));
    let a = Replica::start(&config);
    let b = Replica::start(&config);
    let bearer = format!("Bearer {}", files.admin_token);
    let b_status = || async {
        send(
            b.admin,
            &files.cert_der,
            "GET",
            "/_weir/api/status",
            &[("authorization", bearer.as_str())],
            "",
        )
        .await
        .unwrap()
        .json()
    };
    assert!(b_status().await["upstreams"][0]["cooldown_remaining_s"].is_null());

    // The outage as replica A sees it: 20 failing creates (queued) open A's breaker.
    up.set(|s| s.outage = true);
    for i in 0..20 {
        let r = create(&a, &files, &up, i).await.unwrap();
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    // B learns it through PostgreSQL, without a failing call of its own.
    let held = eventually(100, || async {
        b_status().await["upstreams"][0]["cooldown_remaining_s"]
            .as_f64()
            .is_some_and(|s| s > 1.0)
    })
    .await;
    assert!(held, "{}\n{}", b_status().await, b.log());
    let refused_before = up.state.lock().unwrap().refused;
    let r = create(&b, &files, &up, 100).await.unwrap();
    assert_eq!(r.status, 201, "queued, not sent: {:?}", r.body);
    assert_eq!(
        up.state.lock().unwrap().refused,
        refused_before,
        "B sent nothing to the failing upstream"
    );
}

/// TLS to the gateway, then `CONNECT host:443` on it: the open tunnel.
async fn tunnel_through(
    gateway: std::net::SocketAddr,
    gateway_cert: &[u8],
    host: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(gateway).await.unwrap();
    let mut outer = tokio_rustls::TlsConnector::from(client_trusting(gateway_cert.to_vec().into()))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .unwrap();
    outer
        .write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nhost: {host}:443\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            outer.read(&mut byte).await.unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    outer
}

/// Opens a CONNECT tunnel through the gateway (TLS to the gateway, then TLS to `host` inside
/// it, trusting `inner_root`), sends `GET path` and returns the status and `Cache-Status`.
async fn get_through_tunnel(
    gateway: std::net::SocketAddr,
    gateway_cert: &[u8],
    inner_root: rustls::pki_types::CertificateDer<'static>,
    host: &str,
    path: &str,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let outer = tunnel_through(gateway, gateway_cert, host).await;
    let inner = tokio_rustls::TlsConnector::from(client_trusting(inner_root))
        .connect(host.to_string().try_into().unwrap(), outer)
        .await
        .expect("the gateway presents a leaf from the shared interception CA");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(inner))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri(path)
        .header("host", host)
        .header("authorization", "token dev-1")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let cache = resp
        .headers()
        .get("cache-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let _ = resp.into_body().collect().await;
    (status, cache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_the_gateway_is_served_with_the_shared_interception_ca() {
    let up_ca = tls::TestCa::new();
    let tls_up = tls::TlsUpstream::start(&up_ca, tls::HOST).await;
    let counting = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let ca = weir_tls::LocalCa::generate(
        &[tls::HOST.to_string()],
        weir_tls::OffsetDateTime::now_utc(),
    )
    .unwrap();
    std::fs::write(files.dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
    std::fs::write(files.dir.path().join("ca-key.pem"), ca.key_pem()).unwrap();
    let config = files.config(
        counting.addr,
        &format!(
            "allow = [\"127.0.0.0/8\"]\nintercept_ca_cert_file = \"ca.pem\"\nintercept_ca_key_file = \"ca-key.pem\"\n\n{}",
            tls::upstream_toml(&tls_up, &up_ca)
        ),
    );
    let r = Replica::start(&config);
    let path = "/agents/sessions";
    let first = get_through_tunnel(
        r.addr,
        &files.cert_der,
        ca.cert_der().clone(),
        tls::HOST,
        path,
    )
    .await;
    let second = get_through_tunnel(
        r.addr,
        &files.cert_der,
        ca.cert_der().clone(),
        tls::HOST,
        path,
    )
    .await;
    assert_eq!(first.0, 200, "{}", r.log());
    assert_eq!(second.0, 200);
    // The gateway's policies apply inside the tunnel: the second list is its cache's answer.
    assert!(second.1.contains("hit"), "{second:?}");
    assert_eq!(tls_up.count(path), 1);

    // A client that closes after the gateway's certificate, with no alert (what Node does when
    // it does not trust the CA), is told to trust the CA file `[gateway]` names, not the
    // replica's own data dir's (which holds no CA in this mode).
    hinted_after_a_close(&r, &files, &files.dir.path().join("ca.pem")).await;
}

/// A gateway that intercepts with the replica's own CA (no `intercept_ca_cert_file`: the one in
/// its keychain) is still the team's: its start-up line and the hint for a client that closed
/// after its certificate name the replica's CA file, and do not offer `weir ca install`, which
/// on a client installs that client's own CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_its_own_ca_hands_that_file_out() {
    let bus = std::env::var("DBUS_SESSION_BUS_ADDRESS")
        .expect("a session bus with a keychain: run under scripts/with-keychain.sh");
    let up_ca = tls::TestCa::new();
    let tls_up = tls::TlsUpstream::start(&up_ca, tls::HOST).await;
    let counting = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let config = files.config(
        counting.addr,
        &format!(
            "allow = [\"127.0.0.0/8\"]\n\n{}",
            tls::upstream_toml(&tls_up, &up_ca)
        ),
    );
    let r = Replica::start_env(&config, &[("DBUS_SESSION_BUS_ADDRESS".into(), bus)]);
    let ca_file = r.data.path().join("d/ca/weir-ca.pem");
    let said = r
        .banner
        .iter()
        .find(|l| l.starts_with("weir: HTTPS to"))
        .unwrap();
    assert!(
        said.contains("intercepted with the gateway's CA")
            && said.contains(&ca_file.display().to_string())
            && !said.contains("weir ca install"),
        "{said}"
    );
    hinted_after_a_close(&r, &files, &ca_file).await;
}

/// Through the gateway `r`, a client closes after the intercepted host's certificate with no
/// alert (what Node does when it does not trust the CA): the hint it logs names `ca_file` as
/// the gateway's CA, and does not offer `weir ca install`.
async fn hinted_after_a_close(r: &Replica, files: &GatewayFiles, ca_file: &std::path::Path) {
    let mut inner = tunnel_through(r.addr, &files.cert_der, tls::HOST).await;
    let name = rustls::pki_types::ServerName::try_from(tls::HOST.to_string()).unwrap();
    let mut hello = Vec::new();
    // (The client never reads the gateway's certificate: what it trusts does not matter.)
    rustls::ClientConnection::new(client_trusting(files.cert_der.clone().into()), name)
        .unwrap()
        .write_tls(&mut hello)
        .unwrap();
    inner.write_all(&hello).await.unwrap();
    let mut answer = [0u8; 64];
    assert!(
        inner.read(&mut answer).await.unwrap() > 0,
        "the gateway answered the hello"
    );
    drop(inner);
    let named = format!("NODE_EXTRA_CA_CERTS={}", ca_file.display());
    assert!(
        eventually(200, || async { r.log().contains(&named) }).await,
        "the hint names the CA's file ({named}):\n{}",
        r.log()
    );
    let log = r.log();
    let hint = log.lines().find(|l| l.contains(&named)).unwrap();
    assert!(
        !hint.contains("weir ca install") && hint.contains("team gateway's CA"),
        "{hint}"
    );
}

/// Not a check: how long 1 and 3 replicas take to drain 100 queued creates once the upstream
/// heals (figures in BENCHMARKS.md). `cargo test -p weir --test gateway -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn bench_shared_queue_drain() {
    let Some(pg) = pg::Postgres::start() else {
        return;
    };
    for n in [1usize, 3] {
        let up = CountingUpstream::start().await;
        let files = GatewayFiles::new();
        let config = files.config(up.addr, &shared_queue(&pg));
        let db = pg.client().await;
        db.batch_execute("DELETE FROM weir_queue_items; DELETE FROM weir_queue_credentials")
            .await
            .ok();
        let replicas: Vec<Replica> = (0..n).map(|_| Replica::start(&config)).collect();
        up.set(|s| s.outage = true);
        let started = std::time::Instant::now();
        for i in 0..100 {
            let a = create(&replicas[i % n], &files, &up, i).await.unwrap();
            assert_eq!(a.status, 201);
        }
        let queued = started.elapsed();
        up.set(|s| s.outage = false);
        let healed = std::time::Instant::now();
        assert!(
            eventually(1500, || async {
                counts(&db).await.get("done").copied().unwrap_or(0) == 100
            })
            .await
        );
        let drained = healed.elapsed();
        assert_eq!(up.created().len(), 100);
        println!(
            "replicas={n} queue_100_creates={:.2}s drain_after_heal={:.2}s lookups={}",
            queued.as_secs_f64(),
            drained.as_secs_f64(),
            up.state.lock().unwrap().lookups
        );
    }
}

#[test]
fn a_replica_that_cannot_start_says_why() {
    let up: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let files = GatewayFiles::new();
    let run = gw::run_to_exit;
    // No [gateway] table: a usage error (2) naming what is missing.
    let bare = files.dir.path().join("bare.toml");
    std::fs::write(&bare, "watch_github_status = false\n").unwrap();
    let (code, err) = run(&bare);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("[gateway] table"), "{err}");
    // A key file that is not there: named with its key and path, before any port opens.
    std::fs::remove_file(files.dir.path().join("key.pem")).unwrap();
    let (code, err) = run(&files.config(up, "allow = [\"127.0.0.1\"]"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("gateway.tls_key_file") && err.contains("key.pem"),
        "{err}"
    );
    // A developer's local agent on a gateway: refused before any port opens, with the fix.
    let files = GatewayFiles::new();
    let agent = "allow = [\"127.0.0.1\"]\n[local_agent]\ncommand = [\"true\"]";
    let (code, err) = run(&files.config(up, agent));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("runs no developer's local agent") && err.contains("remove the [local_agent]"),
        "{err}"
    );
    // A shared queue whose database cannot be reached: the replica does not start (1).
    let files = GatewayFiles::new();
    let unreachable = "allow = [\"127.0.0.1\"]\npostgres_url = \"postgresql://weir@127.0.0.1:1/weir\"\nsecret_key_file = \"gateway-key\"\nlease = \"8s\"";
    let (code, err) = run(&files.config(up, unreachable));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("unreachable") && err.contains("127.0.0.1:1"),
        "{err}"
    );
}

/// The gateway's listener keeps the plain listener's limits: a client that finishes its TLS
/// handshake and then sends nothing, and an HTTP/2 connection left idle after its request,
/// are closed after `header_read_timeout` (each held a gateway slot for as long as it stayed
/// connected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_or_idle_gateway_connection_is_closed_after_the_header_limit() {
    let up = CountingUpstream::start().await;
    let files = GatewayFiles::new();
    let config = files.config(
        up.addr,
        "allow = [\"127.0.0.0/8\"]\n\n[limits]\nheader_read_timeout = \"500ms\"",
    );
    let r = Replica::start(&config);
    let bound = Duration::from_secs(20);

    // HTTP/2 (ALPN h2): one request answered, then idle.
    let mut cfg = (*client_trusting(files.cert_der.clone().into())).clone();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
    let conn = tokio::spawn(conn);
    let status = tls::h2_get(&mut client, &format!("https://{}/_weir/api/health", r.addr)).await;
    assert!(status < 500, "{status}");
    tokio::time::timeout(bound, conn)
        .await
        .expect("the gateway closes an idle HTTP/2 connection")
        .unwrap()
        .ok();
    tls::assert_told_goaway(client).await;

    // TLS done, then silence.
    let tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
    let mut silent =
        tokio_rustls::TlsConnector::from(client_trusting(files.cert_der.clone().into()))
            .connect("127.0.0.1".try_into().unwrap(), tcp)
            .await
            .unwrap();
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(bound, silent.read(&mut buf))
        .await
        .expect("closed by the gateway, not by the test's bound")
        .unwrap_or(0);
    assert_eq!(n, 0, "{}", String::from_utf8_lossy(&buf[..n]));
}
