//! Every kind of request moves the status counters it should, each by exactly what it did, and
//! nothing else: one request of each path (miss, fresh hit, a client's `304`, joined flight,
//! stale rescue, a log follower, managed pass-through, create under a rule, unmanaged host,
//! CONNECT, a refusal at the front door, the control API) through a real engine in front of a
//! loopback upstream.
//! A guard for the recording phase (`src/pipeline/record.rs`): it passed before the counters
//! moved there, and must pass after.

mod common;
use common::{Upstream, Weir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every per-request counter of the status, flattened: `up0`'s per-class counters
/// (`list.client_requests`, …), the unmanaged and refused requests, tunnels, surfaces and the
/// policy's decisions.
fn counters(s: &Value) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (class, c) in s["upstreams"][0]["classes"].as_object().unwrap() {
        for (name, v) in c.as_object().unwrap() {
            m.insert(format!("{class}.{name}"), v.as_u64().unwrap());
        }
    }
    for k in ["passthrough_requests", "rejected", "tunnels"] {
        m.insert(k.to_string(), s[k].as_u64().unwrap());
    }
    for (k, v) in s["surfaces"].as_object().unwrap() {
        m.insert(format!("surfaces.{k}"), v.as_u64().unwrap());
    }
    m.insert(
        "decisions".to_string(),
        s["policy"]["decisions"].as_u64().unwrap(),
    );
    m
}

/// What moved between two readings, and by how much.
fn moved(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d != 0).then(|| (k.clone(), d))
        })
        .collect()
}

fn expect(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

struct Probe<'a> {
    weir: &'a Weir,
    last: BTreeMap<String, u64>,
}

impl Probe<'_> {
    /// Asserts what moved since the last reading (the counters are written before the answer
    /// is sent, so nothing has to be waited for).
    async fn moved(&mut self, what: &str, want: &[(&str, u64)]) {
        let now = counters(&self.weir.status().await);
        let got = moved(&self.last, &now);
        assert_eq!(got, expect(want), "{what}");
        self.last = now;
    }

    /// [`Probe::moved`] for a path whose upstream exchanges depend on the retry layer: the
    /// exchange counters (`upstream_requests`, `errors`) must have moved, by any amount.
    async fn moved_with_exchanges(&mut self, what: &str, want: &[(&str, u64)], class: &str) {
        let now = counters(&self.weir.status().await);
        let mut got = moved(&self.last, &now);
        for k in ["upstream_requests", "errors"] {
            let n = got.remove(&format!("{class}.{k}"));
            assert!(n.is_some_and(|n| n >= 1), "{what}: {class}.{k} moved");
        }
        assert_eq!(got, expect(want), "{what}");
        self.last = now;
    }
}

#[tokio::test]
async fn each_kind_of_request_moves_its_counters_once() {
    let up = Upstream::start().await;
    let other = Upstream::start().await;
    up.set(|b| b.extra_headers = vec![("etag".into(), "\"v1\"".into())]);
    let config = "[classes.view]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\nstale_if_error = \"24h\"\n\
                  [classes.stream]\nfresh_ttl = \"0s\"\nstale_while_revalidate = \"0s\"\n\
                  [queue]\ncredentials = \"memory\"\n\
                  [breaker]\nminimum_calls = 1000\nconsecutive_failures = 0\n\
                  [retry]\nbase = \"1ms\"\ncap = \"5ms\"\n\
                  [limits]\nmax_header_bytes = 1024\n\
                  [[policy]]\nrepo = \"octo/*\"\ncreate = \"queue\"\n";
    let weir =
        Weir::start_with_top("allow_private_targets = true\n", &[&up.origin()], config).await;
    let c = weir.client("alice");
    let mut p = Probe {
        weir: &weir,
        last: counters(&weir.status().await),
    };
    let list = format!("{}/agents/sessions", up.origin());

    let r = c.get(&list).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; fwd=miss; stored");
    p.moved(
        "list miss",
        &[
            ("list.client_requests", 1),
            ("list.upstream_requests", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;

    let r = c.get(&list).send().await.unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; hit");
    p.moved(
        "list fresh hit",
        &[
            ("list.client_requests", 1),
            ("list.cache_hits_fresh", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;

    let r = c
        .get(&list)
        .header("if-none-match", "\"v1\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
    p.moved(
        "a client's conditional GET",
        &[
            ("list.client_requests", 1),
            ("list.cache_hits_fresh", 1),
            ("list.not_modified", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;

    // Answers carry no validator from here on (a log whose body changes under the same ETag
    // would be taken as unchanged).
    up.set(|b| b.extra_headers.clear());

    // Two requests for one key while the upstream is slow: one leads, one joins.
    // The second is sent once the first is at the upstream (held there 2 s), so it joins.
    up.set(|b| b.delay = Duration::from_secs(2));
    let path = "/agents/sessions/nwo/octo/lab";
    let joined = format!("{}{path}", up.origin());
    let before = up.count(path);
    let (a, b) = tokio::join!(c.get(&joined).send(), async {
        assert!(
            common::eventually(500, || up.count(path) > before).await,
            "the leader reached the upstream"
        );
        c.get(&joined).send().await
    });
    assert_eq!(a.unwrap().status().as_u16(), 200);
    assert_eq!(b.unwrap().status().as_u16(), 200);
    up.set(|b| b.delay = Duration::ZERO);
    p.moved(
        "a joined flight",
        &[
            ("list.client_requests", 2),
            ("list.upstream_requests", 1),
            ("list.coalesced", 1),
            ("surfaces.other", 2),
        ],
    )
    .await;

    // A view is stale at once; the failing upstream's answer is beaten by the copy.
    let view = format!("{}/agents/sessions/abc123", up.origin());
    assert_eq!(c.get(&view).send().await.unwrap().status().as_u16(), 200);
    p.moved(
        "view miss",
        &[
            ("view.client_requests", 1),
            ("view.upstream_requests", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;
    up.set(|b| b.status = 500);
    let r = c.get(&view).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["cache-status"]
        .to_str()
        .unwrap()
        .contains("fwd=stale"));
    up.set(|b| b.status = 200);
    p.moved_with_exchanges(
        "stale rescue",
        &[
            ("view.client_requests", 1),
            ("view.cache_hits_stale", 1),
            ("surfaces.other", 1),
        ],
        "view",
    )
    .await;

    // A log follower is never given a shorter log than it had.
    let log = format!("{}/agents/sessions/s1/logs", up.origin());
    let path = "/agents/sessions/s1/logs".to_string();
    up.set(|b| b.path_bodies = vec![(path.clone(), "line 1\nline 2\n".into())]);
    assert_eq!(
        c.get(&log).send().await.unwrap().text().await.unwrap(),
        "line 1\nline 2\n"
    );
    p.moved(
        "log miss",
        &[
            ("stream.client_requests", 1),
            ("stream.upstream_requests", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;
    // A shorter log later: the follower still gets the longer one (the cache keeps it; the
    // recording's `kept_longer` is for a copy under another key, which this run has not).
    up.set(|b| b.path_bodies = vec![(path, "line 1\n".into())]);
    let r = c.get(&log).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "line 1\nline 2\n");
    up.set(|b| b.path_bodies.clear());
    p.moved(
        "a shorter log",
        &[
            ("stream.client_requests", 1),
            ("stream.upstream_requests", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;

    let r = c
        .get(format!("{}/repos/octo/lab", up.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    p.moved(
        "managed pass-through",
        &[
            ("other.client_requests", 1),
            ("other.upstream_requests", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;

    let r = c
        .post(format!("{}/agents/swe/v1/jobs/octo/lab", up.origin()))
        .body(r#"{"problem_statement":"one","event_type":"weir-test"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["weir-policy"], "user:1 create=queue");
    p.moved(
        "a create a rule decided",
        &[
            ("create.client_requests", 1),
            ("create.upstream_requests", 1),
            ("decisions", 1),
            ("surfaces.other", 1),
        ],
    )
    .await;

    let r = c
        .get(format!("{}/elsewhere", other.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    p.moved(
        "unmanaged host",
        &[("passthrough_requests", 1), ("surfaces.other", 1)],
    )
    .await;

    // A blind tunnel: counted as a tunnel where it opens, and its request's surface.
    let mut s = tokio::net::TcpStream::connect(weir.handle.local_addr())
        .await
        .unwrap();
    let target = other.addr;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    drop(s);
    p.moved("CONNECT", &[("tunnels", 1), ("surfaces.other", 1)])
        .await;

    // A refusal at the front door (the header-size cap): refused, nothing else.
    let r = c
        .get(&list)
        .header("x-big", "x".repeat(2000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 431);
    p.moved("refused at the front door", &[("rejected", 1)])
        .await;

    // The control API moves nothing (the status reads above are control API requests too).
    let r = reqwest::get(format!("{}/_weir/api/health", weir.proxy_url()))
        .await
        .unwrap();
    assert!(r.status().is_success());
    p.moved("control API", &[]).await;
}
