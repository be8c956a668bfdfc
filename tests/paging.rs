//! Paging on the real parameters, through a running Weir: a smaller page of a list is cut from
//! a fresh larger page of the same list (same filters, sort and key headers) whenever its items
//! lie inside that page, or that page was short (the end of the list), using `page_number` and
//! `page_size` only. The fake lists answer in the real shape (`{"sessions": [...]}`, no
//! `has_next_page`), and the requests are the clients' own query strings: gh's
//! (`page_number=1&page_size=50&sort=last_updated_at%2Cdesc`, cli/cli
//! `pkg/cmd/agent-task/capi/sessions.go`) and VS Code's
//! (`page_size=20&page_number=N&resource_state=draft,open&repo_nwo=o/r`,
//! microsoft/vscode-copilot-chat `src/platform/github/common/githubAPI.ts`). Counts are read
//! at the fake.

mod common;
use bytes::Bytes;
use common::Weir;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::{Arc, Mutex};

/// A real loopback agents API holding `total` sessions, newest first, paged like the real one:
/// page `page_number` of `page_size` (1 and 30 when absent), a short page at the end.
struct Lists {
    origin: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Lists {
    async fn start(total: usize) -> Lists {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let s = s.clone();
                        async move {
                            let pq = req.uri().path_and_query().unwrap().to_string();
                            s.lock().unwrap().push(pq);
                            let q: Vec<(String, String)> =
                                url_pairs(req.uri().query().unwrap_or(""));
                            let get = |k: &str, d: usize| {
                                q.iter()
                                    .find(|(n, _)| n == k)
                                    .and_then(|(_, v)| v.parse().ok())
                                    .unwrap_or(d)
                            };
                            let (n, size) = (get("page_number", 1), get("page_size", 30));
                            let start = (n - 1) * size;
                            let sessions: Vec<_> = (start..(start + size).min(total))
                                .map(|i| serde_json::json!({"id": format!("s{i}"), "state": "completed"}))
                                .collect();
                            let body = serde_json::json!({ "sessions": sessions }).to_string();
                            let mut r = http::Response::new(Full::new(Bytes::from(body)));
                            r.headers_mut()
                                .insert("content-type", "application/json".parse().unwrap());
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Lists { origin, seen }
    }

    fn calls(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// `name=value` pairs of a query, `%XX` decoded (enough for these tests' queries).
fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(n, v)| (n.to_string(), v.replace("%2C", ",").replace("%2F", "/")))
        .collect()
}

/// GETs `url` through Weir: (Cache-Status, the session ids).
async fn ids(c: &reqwest::Client, url: &str) -> (String, Vec<String>) {
    let r = c.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let cs = r.headers()["cache-status"].to_str().unwrap().to_string();
    let body = r.bytes().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["sessions"],
        "the real shape, nothing added: {v}"
    );
    let ids = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    (cs, ids)
}

fn range(a: usize, b: usize) -> Vec<String> {
    (a..b).map(|i| format!("s{i}")).collect()
}

const GH: &str = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghs_short_page_answers_every_smaller_page_of_the_list() {
    let lists = Lists::start(45).await;
    let weir = Weir::start(&[&lists.origin], "").await;
    let c = weir.client("alice");
    let (cs, got) = ids(&c, &format!("{}{GH}", lists.origin)).await;
    assert_eq!((cs.as_str(), got), ("weir; fwd=miss; stored", range(0, 45)));
    // The same list, 20 a page, its sort spelt with a plain `,`: pages 1 and 2 lie inside gh's
    // page; page 3 (items 40–59) runs past it, but gh's page was short, so it is the end.
    for (n, want) in [(1, range(0, 20)), (2, range(20, 40)), (3, range(40, 45))] {
        let url = format!(
            "{}/agents/sessions?page_size=20&page_number={n}&sort=last_updated_at,desc",
            lists.origin
        );
        let (cs, got) = ids(&c, &url).await;
        assert_eq!(cs, "weir; hit; subset-of=50", "page {n}");
        assert_eq!(got, want, "page {n}");
    }
    // (VS Code stops at that short page: it never asks page 4.)
    assert_eq!(lists.calls(), [GH], "one upstream call for the whole list");
    // Another sort, another identity, another API version: each its own.
    let other_sort = format!(
        "{}/agents/sessions?page_size=20&page_number=1&sort=created_at,desc",
        lists.origin
    );
    assert_eq!(ids(&c, &other_sort).await.0, "weir; fwd=miss; stored");
    let bob = weir.client("bob");
    let url = format!(
        "{}/agents/sessions?page_size=20&page_number=1&sort=last_updated_at,desc",
        lists.origin
    );
    assert_eq!(ids(&bob, &url).await.0, "weir; fwd=miss; stored");
    let r = c
        .get(&url)
        .header("x-github-api-version", "2026-01-09")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; fwd=miss; stored");
    assert_eq!(lists.calls().len(), 4);
}

/// VS Code's own walk of a repository's open sessions (20 a page until a short one), after a
/// larger page of the same list was asked for (a browser's 100).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vscodes_pages_come_from_a_larger_full_page_and_the_next_one() {
    let lists = Lists::start(130).await;
    let weir = Weir::start(&[&lists.origin], "").await;
    let c = weir.client("alice");
    let vscode = |n: u32| {
        format!(
            "{}/agents/sessions?page_size=20&page_number={n}&resource_state=draft,open&repo_nwo=o/r",
            lists.origin
        )
    };
    let big = format!(
        "{}/agents/sessions?page_number=1&page_size=100&repo_nwo=o%2Fr&resource_state=draft%2Copen",
        lists.origin
    );
    assert_eq!(ids(&c, &big).await.1, range(0, 100));
    // Pages 1–5 (items 0–99) lie inside the full page of 100.
    for n in 1..=5 {
        let (cs, got) = ids(&c, &vscode(n)).await;
        assert_eq!(cs, "weir; hit; subset-of=100", "page {n}");
        assert_eq!(got, range(20 * (n as usize - 1), 20 * n as usize));
    }
    assert_eq!(lists.calls().len(), 1);
    // Pages 6 and 7 (items 100–139) lie inside page 2 of 100: asked once, for both.
    let (cs, got) = ids(&c, &vscode(6)).await;
    assert_eq!(cs, "weir; fwd=miss; stored; subset-of=100");
    assert_eq!(got, range(100, 120));
    let (cs, got) = ids(&c, &vscode(7)).await;
    assert_eq!(cs, "weir; hit; subset-of=100");
    assert_eq!(got, range(120, 130), "the short page: VS Code stops here");
    let calls = lists.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls[1].contains("page_size=100") && calls[1].contains("page_number=2"),
        "{calls:?}"
    );
}

/// A range across two larger pages is cut only from a short one: from a full one it would need
/// the next page too, so it is asked as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_across_a_full_page_keeps_its_own_key() {
    let lists = Lists::start(120).await;
    let weir = Weir::start(&[&lists.origin], "").await;
    let c = weir.client("alice");
    assert_eq!(
        ids(&c, &format!("{}{GH}", lists.origin)).await.1,
        range(0, 50)
    );
    let straddling =
        "/agents/sessions?page_size=20&page_number=3&sort=last_updated_at,desc".to_string();
    let (cs, got) = ids(&c, &format!("{}{straddling}", lists.origin)).await;
    assert_eq!(cs, "weir; fwd=miss; stored");
    assert_eq!(got, range(40, 60));
    assert_eq!(lists.calls(), [GH.to_string(), straddling]);
}
