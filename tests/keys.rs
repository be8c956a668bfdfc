//! Cache keys spell query names and values one way: the same list asked in gh's encoding
//! (Go's `url.Values.Encode`: `sort=last_updated_at%2Cdesc`) and in a JavaScript client's
//! (`sort=last_updated_at,desc`), in any parameter order, is one upstream call. Counted at a
//! real loopback upstream.

mod common;
use common::{Upstream, Weir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_list_in_two_encodings_is_one_upstream_call() {
    let up = Upstream::start().await;
    up.set(|b| b.body = Some(r#"{"sessions":[{"id":"s1"}]}"#.into()));
    let weir = Weir::start(&[&up.origin()], "").await;
    let c = weir.client("alice");
    let gh = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at%2Cdesc";
    let spellings = [
        gh,
        "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at,desc",
        "/agents/sessions?sort=last_updated_at%2cdesc&page_size=50&page_number=1",
        "/agents/sessions?page_size=%350&page_number=1&sort=last_updated_at,desc",
    ];
    let mut statuses = Vec::new();
    for pq in spellings {
        let r = c.get(format!("{}{pq}", up.origin())).send().await.unwrap();
        assert_eq!(r.status(), 200);
        statuses.push(r.headers()["cache-status"].to_str().unwrap().to_string());
    }
    assert_eq!(
        statuses,
        [
            "weir; fwd=miss; stored",
            "weir; hit",
            "weir; hit",
            "weir; hit"
        ]
    );
    assert_eq!(up.total(), 1);
    assert_eq!(up.count(gh), 1, "the first spelling went upstream as sent");
    // A different value is a different list.
    let other = "/agents/sessions?page_number=1&page_size=50&sort=last_updated_at,asc";
    let r = c
        .get(format!("{}{other}", up.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-status"], "weir; fwd=miss; stored");
    assert_eq!(up.total(), 2);
}
