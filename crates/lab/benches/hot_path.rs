//! Criterion benches of the per-request work on Weir's hot path: route classification, cache
//! key and identity hashing, and rendering a problem+json answer.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderName, Method, StatusCode};
use weir::bench_api::{upstream_named, CacheKey, IdentityKey, Problem};
use weir::config::{classify, default_routes};
use weir::ProblemKind;

fn classification(c: &mut Criterion) {
    let routes = default_routes();
    let mut g = c.benchmark_group("classify");
    for (name, method, path) in [
        ("list", Method::GET, "/agents/sessions"),
        ("view", Method::GET, "/agents/swe/v1/jobs/octo/lab/1234"),
        ("token", Method::GET, "/copilot_internal/v2/token"),
        (
            "other (no match)",
            Method::GET,
            "/repos/octo/lab/pulls/7/files",
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| classify(black_box(&routes), black_box(&method), black_box(path)))
        });
    }
    g.finish();
}

fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        "token gho_0123456789abcdefghijABCDEFGHIJ0123"
            .parse()
            .unwrap(),
    );
    h.insert(http::header::ACCEPT, "application/json".parse().unwrap());
    h.insert(
        http::header::USER_AGENT,
        "Visual Studio Code/1.105.0".parse().unwrap(),
    );
    h.insert("x-github-api-version", "2022-11-28".parse().unwrap());
    h
}

fn keys(c: &mut Criterion) {
    let key = IdentityKey::new([7; 32]);
    let h = headers();
    let key_headers: Vec<HeaderName> = ["accept", "accept-encoding", "x-github-api-version"]
        .into_iter()
        .map(HeaderName::from_static)
        .collect();
    let id = key.identify(&h);
    let up = upstream_named("copilot-api");
    c.bench_function("identity hash (Authorization)", |b| {
        b.iter(|| key.identify(black_box(&h)))
    });
    c.bench_function("cache key", |b| {
        b.iter(|| {
            CacheKey::new(
                &up,
                black_box(&Method::GET),
                black_box("/agents/sessions/nwo/octo/lab?sort=updated_at&page_size=50"),
                black_box(&id),
                black_box(&h),
                &key_headers,
            )
        })
    });
    c.bench_function("identity + cache key", |b| {
        b.iter(|| {
            let id = key.identify(black_box(&h));
            CacheKey::new(
                &up,
                &Method::GET,
                black_box("/agents/sessions"),
                &id,
                &h,
                &key_headers,
            )
        })
    });
}

fn problems(c: &mut Criterion) {
    c.bench_function("problem+json response", |b| {
        b.iter(|| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemKind::BreakerOpen,
                "the upstream copilot-api is failing; retry later",
            )
            .upstream("copilot-api")
            .retry_after(std::time::Duration::from_secs(5))
            .into_response(black_box(Some("req-0123456789")))
        })
    });
}

criterion_group!(benches, classification, keys, problems);
criterion_main!(benches);
