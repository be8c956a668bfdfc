//! Durations Weir adds to `Instant::now()` are bounded, so nothing overflows: config durations
//! above ten years are refused (file, line, key), and an upstream token with an absurd lifetime
//! is cached for a bounded time instead of crashing the fetch.

mod common;
use common::{Upstream, Weir};

#[test]
fn config_durations_above_ten_years_are_refused_with_file_and_line() {
    let ok = "[classes.list]\nstale_if_error = \"5years\"\n";
    assert!(weir::config::parse_str(ok, "weir.toml").is_ok());
    for (text, key) in [
        (
            "[classes.list]\nstale_if_error = \"11years\"\n",
            "stale_if_error",
        ),
        ("[breaker]\nopen_wait = \"500years\"\n", "open_wait"),
        ("[queue]\nmax_age = \"584000000years\"\n", "max_age"),
    ] {
        let e = weir::config::parse_str(text, "weir.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("weir.toml:2:"), "{e}");
        assert!(e.contains(key) && e.contains("10 years"), "{e}");
    }
}

#[tokio::test]
async fn a_token_with_an_absurd_lifetime_is_served_not_crashed_on() {
    let up = Upstream::start().await;
    up.set(|b| {
        b.body = Some(format!(
            r#"{{"token":"t","expires_at":{max},"refresh_in":{max}}}"#,
            max = u64::MAX
        ))
    });
    let weir = Weir::start(&[&up.origin()], "").await;
    let url = format!("{}/copilot_internal/v2/token", up.origin());
    let c = weir.client("a");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-status"], "weir; hit");
    assert_eq!(up.total(), 1);
}
