//! Resilience knobs in the config file: `[breaker]`, `[retry]`, `[bulkhead]`, `[rate_limit]`,
//! and per-class timeouts (`[classes.<class>]`). Validated into the crate's typed configs.

use super::load::Ctx;
use super::ConfigError;
use serde::Deserialize;
use std::time::Duration;
use toml::Spanned;
use weir_resilience::{BreakerConfig, BudgetConfig, BulkheadConfig, RateLimitConfig};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileBreaker {
    pub window: Option<Spanned<String>>,
    pub minimum_calls: Option<Spanned<i64>>,
    pub failure_rate_threshold: Option<Spanned<f64>>,
    pub slow_call_rate_threshold: Option<Spanned<f64>>,
    pub open_wait: Option<Spanned<String>>,
    pub open_wait_max: Option<Spanned<String>>,
    pub half_open_probes: Option<Spanned<i64>>,
    /// Spread open waits randomly (default true); tests turn it off.
    pub jitter: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRetry {
    pub base: Option<Spanned<String>>,
    pub cap: Option<Spanned<String>>,
    pub budget_ratio: Option<Spanned<f64>>,
    pub budget_min_per_sec: Option<Spanned<i64>>,
    pub budget_window: Option<Spanned<String>>,
    pub jitter: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileBulkhead {
    pub max_in_flight: Option<Spanned<i64>>,
    pub max_queue: Option<Spanned<i64>>,
    pub max_wait: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRateLimit {
    /// Requests a (surface, identity) may send towards an upstream back to back.
    pub burst: Option<Spanned<i64>>,
    /// Time for the bucket to refill completely.
    pub per: Option<Spanned<String>>,
    pub enabled: Option<bool>,
}

/// Validated resilience settings shared by all upstreams.
#[derive(Debug, Clone)]
pub struct ResilienceSettings {
    pub breaker: BreakerConfig,
    pub breaker_jitter: bool,
    pub retry_base: Duration,
    pub retry_cap: Duration,
    pub retry_jitter: bool,
    pub budget: BudgetConfig,
    pub bulkhead: BulkheadConfig,
    pub rate_limit: Option<RateLimitConfig>,
}

impl Default for ResilienceSettings {
    fn default() -> Self {
        ResilienceSettings {
            breaker: BreakerConfig::default(),
            breaker_jitter: true,
            retry_base: Duration::from_millis(100),
            retry_cap: Duration::from_secs(2),
            retry_jitter: true,
            budget: BudgetConfig::default(),
            bulkhead: BulkheadConfig {
                max_in_flight: 64,
                max_queue: 256,
                max_wait: Some(Duration::from_secs(10)),
            },
            rate_limit: Some(RateLimitConfig {
                policy: "client".into(),
                burst: 60,
                per: Duration::from_secs(10),
            }),
        }
    }
}

fn rate(cx: &Ctx, key: &str, v: &Option<Spanned<f64>>) -> Result<Option<f64>, ConfigError> {
    match v {
        Some(r) if !(*r.get_ref() > 0.0 && *r.get_ref() <= 1.0) => cx.err(
            key,
            r.span(),
            format!(
                "must be a fraction in (0, 1], e.g. 0.5 for 50%; got {}",
                r.get_ref()
            ),
        ),
        other => Ok(other.as_ref().map(|r| *r.get_ref())),
    }
}

pub fn validate(
    cx: &Ctx,
    b: &FileBreaker,
    r: &FileRetry,
    bh: &FileBulkhead,
    rl: &FileRateLimit,
) -> Result<ResilienceSettings, ConfigError> {
    let mut s = ResilienceSettings::default();
    let br = &mut s.breaker;
    if let Some(d) = cx.duration("breaker.window", &b.window)? {
        br.window = d;
    }
    if let Some(n) = cx.positive("breaker.minimum_calls", &b.minimum_calls, 1)? {
        br.minimum_calls = n as u32;
    }
    if let Some(x) = rate(
        cx,
        "breaker.failure_rate_threshold",
        &b.failure_rate_threshold,
    )? {
        br.failure_rate_threshold = x;
    }
    if let Some(x) = rate(
        cx,
        "breaker.slow_call_rate_threshold",
        &b.slow_call_rate_threshold,
    )? {
        br.slow_call_rate_threshold = x;
    }
    if let Some(d) = cx.duration("breaker.open_wait", &b.open_wait)? {
        br.open_base = d;
        br.open_max = br.open_max.max(d);
    }
    if let Some(d) = cx.duration("breaker.open_wait_max", &b.open_wait_max)? {
        if d < br.open_base {
            let span = b.open_wait_max.as_ref().map(|s| s.span()).unwrap_or(0..0);
            return cx.err(
                "breaker.open_wait_max",
                span,
                "must not be shorter than breaker.open_wait".into(),
            );
        }
        br.open_max = d;
    }
    if let Some(n) = cx.positive("breaker.half_open_probes", &b.half_open_probes, 1)? {
        br.half_open_probes = n as u32;
    }
    s.breaker_jitter = b.jitter.unwrap_or(true);

    if let Some(d) = cx.duration("retry.base", &r.base)? {
        s.retry_base = d;
    }
    if let Some(d) = cx.duration("retry.cap", &r.cap)? {
        s.retry_cap = d;
    }
    if let Some(x) = rate(cx, "retry.budget_ratio", &r.budget_ratio)? {
        s.budget.ratio = x;
    }
    if let Some(n) = cx.positive("retry.budget_min_per_sec", &r.budget_min_per_sec, 0)? {
        s.budget.min_retries_per_sec = n as u32;
    }
    if let Some(d) = cx.duration("retry.budget_window", &r.budget_window)? {
        s.budget.window = d;
    }
    s.retry_jitter = r.jitter.unwrap_or(true);

    if let Some(n) = cx.positive("bulkhead.max_in_flight", &bh.max_in_flight, 1)? {
        s.bulkhead.max_in_flight = n;
    }
    if let Some(n) = cx.positive("bulkhead.max_queue", &bh.max_queue, 0)? {
        s.bulkhead.max_queue = n;
    }
    if let Some(d) = cx.duration("bulkhead.max_wait", &bh.max_wait)? {
        s.bulkhead.max_wait = Some(d);
    }

    if rl.enabled == Some(false) {
        s.rate_limit = None;
    } else if let Some(cfg) = s.rate_limit.as_mut() {
        if let Some(n) = cx.positive("rate_limit.burst", &rl.burst, 1)? {
            cfg.burst = n as u32;
        }
        if let Some(d) = cx.duration("rate_limit.per", &rl.per)? {
            cfg.per = d;
        }
    }
    if let Err(e) = s.breaker.validate() {
        return cx.err("breaker", 0..0, e.to_string());
    }
    Ok(s)
}
