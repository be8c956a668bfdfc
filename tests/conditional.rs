//! Conditional revalidation (#29): the fake agents API answers every GET with a weak `ETag`
//! and a conditional GET that names it with `304` and no body, as api.github.com does. Weir
//! refreshes a stale copy with `If-None-Match`, and a `304` makes the copy fresh again
//! (`Cache-Status: …; fwd-status=304`); a changed answer comes whole. A client's own
//! conditional request is answered `304` from Weir's copy when its tag matches (weak
//! comparison), and never reaches a shared fetch, so a `304` is never stored as a body. The
//! `304`s are counted at the fake, in the status document and in `/metrics`.

#[path = "common/agents_answers.rs"]
mod agents_answers;
#[path = "common/agents_api.rs"]
mod agents_api;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/through_weir.rs"]
mod through_weir;
#[path = "common/tls.rs"]
mod tls;

use agents_api::{AgentsApi, HOSTS, PLAN_HOST};
use bytes::Bytes;
use std::time::Duration;
use tls::TlsWeir;

const NAMES: [&str; 5] = [
    "github-api",
    "copilot-api",
    "copilot-individual",
    "copilot-business",
    "copilot-enterprise",
];

/// Views and logs fresh for `fresh`; a stale copy waits (up to 5 s) for its refresh, so the
/// request after the TTL carries the refresh's outcome. Answers are kept per credential (the
/// fake gives each credential an account of its own; this keeps one key per credential).
fn classes(fresh: &str) -> String {
    format!(
        "[identity]\nshare = \"credential\"\n\
         [classes.view]\nfresh_ttl = \"{fresh}\"\nrevalidate_wait = \"5s\"\n\
         [classes.stream]\nfresh_ttl = \"{fresh}\"\nrevalidate_wait = \"5s\"\n"
    )
}

async fn weir(api: &AgentsApi, fresh: &str) -> TlsWeir {
    let mut t = String::from("watch_github_status = false\n");
    for (name, host) in NAMES.iter().zip(HOSTS) {
        t.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\norigin = \"https://{host}\"\nconnect_to = \"{}\"\nca_file = \"{}\"\n\n",
            api.addr,
            api.ca_pem.display()
        ));
    }
    t.push_str("[network]\ndetect_os = false\n");
    t.push_str(&classes(fresh));
    TlsWeir::start(&t).await
}

struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Got {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

async fn get(w: &TlsWeir, path: &str, token: &str, extra: &[(&str, &str)]) -> Got {
    let auth = format!("Bearer {token}");
    let mut headers = vec![("authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    let (status, headers, body) = through_weir::get(
        w.handle.local_addr(),
        w.ca.cert_der(),
        PLAN_HOST,
        path,
        &headers,
    )
    .await;
    Got {
        status,
        headers,
        body,
    }
}

/// The per-upstream totals of the status document for the plan host's upstream.
async fn totals(w: &TlsWeir) -> serde_json::Value {
    let s = w.status().await;
    s["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "copilot-individual")
        .unwrap()["totals"]
        .clone()
}

/// Requests for `path` at the fake that carried `If-None-Match`.
fn conditional_at_fake(api: &AgentsApi, path: &str) -> usize {
    api.log()
        .iter()
        .filter(|l| l.path_and_query == path && l.header("if-none-match").is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_is_revalidated_with_its_etag_and_a_304_refreshes_it() {
    let api = AgentsApi::start().await;
    let w = weir(&api, "1s").await;
    let id = api.first_session_id();
    let view = format!("/agents/sessions/{id}");
    let token = "gho_REVALIDATE0123456789";

    let first = get(&w, &view, token, &[]).await;
    assert_eq!(first.status, 200);
    let etag = first.header("etag").to_string();
    assert!(
        etag.starts_with("W/\""),
        "the fake's ETag reaches the client: {etag:?}"
    );
    assert_eq!(api.count("sessions.get"), 1);

    // Stale: the refresh asks with the copy's ETag; the fake answers 304, and the client gets
    // the stored body, fresh again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = get(&w, &view, token, &[]).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, first.body);
    assert_eq!(second.header("etag"), etag);
    assert_eq!(
        second.header("cache-status"),
        "weir; fwd=stale; fwd-status=304; stored"
    );
    assert_eq!(api.count("sessions.get"), 2);
    assert_eq!(conditional_at_fake(&api, &view), 1);
    assert_eq!(api.not_modified(), 1);
    // The revalidated copy is fresh: the next request is a hit, no call.
    let third = get(&w, &view, token, &[]).await;
    assert_eq!(
        (third.status, third.header("cache-status")),
        (200, "weir; hit")
    );
    assert_eq!(third.body, first.body);
    assert_eq!(api.count("sessions.get"), 2);

    // A log that changed: the conditional refresh gets the new log whole (a 200, no 304).
    let logs = format!("/agents/sessions/{id}/logs");
    let before = get(&w, &logs, token, &[]).await;
    api.append_log(&id, "data: {\"line\":1}\n\n");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let after = get(&w, &logs, token, &[]).await;
    assert_eq!(after.status, 200);
    assert_eq!(after.body, api.full_log(&id).as_bytes());
    assert!(after.body.len() > before.body.len());
    assert_eq!(after.header("cache-status"), "weir; fwd=stale; stored");
    assert_eq!(conditional_at_fake(&api, &logs), 1);
    assert_eq!(api.not_modified(), 1, "a changed log is no 304");

    // Counted: one upstream 304 (the view), in the status document and the metrics.
    let t = totals(&w).await;
    assert_eq!(t["revalidated"], 1, "{t}");
    assert_eq!(t["not_modified"], 0, "{t}");
    let metrics = reqwest::get(format!("{}/metrics", w.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains("weir_revalidated_total{upstream=\"copilot-individual\",class=\"view\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_conditional_request_is_answered_304_from_the_copy_and_never_stored() {
    let api = AgentsApi::start().await;
    let w = weir(&api, "10m").await;
    let id = api.first_session_id();
    let view = format!("/agents/sessions/{id}");
    let token = "gho_CONDITIONALCLIENT0123";

    // The client already holds the answer (its ETag, from an earlier direct call): its first
    // request through Weir is conditional. The shared fetch asks unconditionally, stores the
    // body, and the client gets 304 from that copy.
    let direct_etag = {
        let first = get(&w, &view, "gho_SOMEONEELSE000000001", &[]).await;
        first.header("etag").to_string()
    };
    let calls = api.count("sessions.get");
    let cond = get(&w, &view, token, &[("if-none-match", &direct_etag)]).await;
    assert_eq!(cond.status, 304, "{:?}", cond.headers);
    assert!(cond.body.is_empty());
    assert_eq!(cond.header("etag"), direct_etag);
    assert_eq!(
        api.count("sessions.get"),
        calls + 1,
        "fetched once, for the copy"
    );
    assert_eq!(
        conditional_at_fake(&api, &view),
        0,
        "never sent on to the upstream"
    );
    assert_eq!(api.not_modified(), 0);
    // What was stored is the body, not the 304: another client (same credential, no
    // condition) gets it whole from the cache.
    let plain = get(&w, &view, token, &[]).await;
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("cache-status"), "weir; hit");
    assert!(!plain.body.is_empty());
    assert_eq!(plain.header("etag"), direct_etag);

    // A cache hit: the strong spelling of the weak tag matches (weak comparison), and so does
    // a list naming it; another tag gets the body.
    let strong = direct_etag.trim_start_matches("W/").to_string();
    let listed = format!("\"other\", {strong}");
    for tag in [strong.as_str(), listed.as_str()] {
        let hit = get(&w, &view, token, &[("if-none-match", tag)]).await;
        assert_eq!(hit.status, 304, "{tag}");
        assert_eq!(hit.header("cache-status"), "weir; hit");
    }
    let other = get(&w, &view, token, &[("if-none-match", "\"other\"")]).await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body, plain.body);
    assert_eq!(api.count("sessions.get"), calls + 1, "all from the copy");

    let t = totals(&w).await;
    assert_eq!(t["not_modified"], 3, "{t}");
    assert_eq!(t["revalidated"], 0, "{t}");
    let metrics = reqwest::get(format!("{}/metrics", w.proxy_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains("weir_not_modified_total{upstream=\"copilot-individual\",class=\"view\"} 3"),
        "{metrics}"
    );
}
