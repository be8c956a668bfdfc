use weir_lab::client::LabClient;
use weir_lab::upstream::{Upstream, UpstreamSpec};
use weir_lab::weir_ctl::{Caching, LabWeir};
#[tokio::main]
async fn main() {
    let up = Upstream::start(UpstreamSpec::with_latency(1200)).await.unwrap();
    let weir = LabWeir::start(&up.origin(), Caching::Default, "").await.unwrap();
    let client = LabClient::via_proxy(weir.addr());
    let url = format!("{}/agents/sessions", up.origin());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (client, url) = (client.clone(), url.clone());
        tasks.spawn(async move { match client.get(&url, "x").await { Ok(a) => format!("{} {:?} {}", a.status, a.headers.get("cache-status"), String::from_utf8_lossy(&a.body[..a.body.len().min(200)])), Err(e) => format!("err {e:?}") } });
    }
    let mut m = std::collections::BTreeMap::new();
    while let Some(Ok(s)) = tasks.join_next().await { *m.entry(s).or_insert(0) += 1; }
    for (k, v) in m { println!("{v} × {k}"); }
}
