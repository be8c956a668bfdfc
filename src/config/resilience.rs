//! Resilience knobs in the config file: `[breaker]`, `[retry]`, `[bulkhead]`, `[rate_limit]`,
//! and per-class timeouts (`[classes.<class>]`). Validated into the crate's typed configs.

use super::error::{ConfigError, Ctx};
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
    /// Opens after this many failures in a row (0 = off).
    pub consecutive_failures: Option<Spanned<i64>>,
    /// "Slow" = this × the class's recent median latency (0 = absolute `slow_call` only).
    pub slow_multiplier: Option<Spanned<f64>>,
    /// ...but never below this.
    pub slow_floor: Option<Spanned<String>>,
    /// Good calls per class the median is taken over.
    pub baseline_samples: Option<Spanned<i64>>,
    /// The relative rule applies once a class has this many.
    pub baseline_min_samples: Option<Spanned<i64>>,
    /// Degraded needs at least this many calls in the window.
    pub degraded_minimum_calls: Option<Spanned<i64>>,
    pub degraded_failure_rate: Option<Spanned<f64>>,
    pub degraded_slow_rate: Option<Spanned<f64>>,
    /// While a GitHub Status incident (or the team) says the upstream is in trouble.
    pub cautious_minimum_calls: Option<Spanned<i64>>,
    pub cautious_consecutive_failures: Option<Spanned<i64>>,
}

impl FileBreaker {
    /// Where `field` (a [`BreakerConfig`] field name) was written, for errors that involve
    /// two keys (the later check names the key it is about).
    fn span_of(&self, field: &str) -> std::ops::Range<usize> {
        fn sp<T>(v: &Option<Spanned<T>>) -> Option<std::ops::Range<usize>> {
            v.as_ref().map(|x| x.span())
        }
        let span = match field {
            "minimum_calls" => sp(&self.minimum_calls),
            "consecutive_failures" => sp(&self.consecutive_failures),
            "slow_multiplier" => sp(&self.slow_multiplier),
            "baseline_samples" => sp(&self.baseline_samples),
            "baseline_min_samples" => sp(&self.baseline_min_samples),
            "degraded_minimum_calls" => sp(&self.degraded_minimum_calls),
            "cautious_minimum_calls" => sp(&self.cautious_minimum_calls),
            "cautious_consecutive_failures" => sp(&self.cautious_consecutive_failures),
            _ => None,
        };
        span.unwrap_or(0..0)
    }
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
            // One developer's healthy traffic from one surface, at the rates in the clients'
            // code, is about 50 upstream calls a 10 s (VS Code: Mission Control events every
            // 500 ms and commands every 3 s, each live Task API turn's task and events pages
            // every 2 s past the cache, v1 session polls every 5 s); 200 leaves room for two
            // mirrored sessions and several turns, and still stops a 10× retry loop
            // (docs/reliability.md, "The client rate limit's default").
            rate_limit: Some(RateLimitConfig {
                policy: "client".into(),
                burst: 200,
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
    let count =
        |key: &str, v: &Option<Spanned<i64>>, min: i64| -> Result<Option<u32>, ConfigError> {
            match cx.positive(key, v, min)? {
                None => Ok(None),
                Some(n) => match u32::try_from(n) {
                    Ok(n) => Ok(Some(n)),
                    Err(_) => {
                        let span = v.as_ref().map(|x| x.span()).unwrap_or(0..0);
                        cx.err(key, span, format!("{n} is too large"))
                    }
                },
            }
        };
    if let Some(n) = count("breaker.consecutive_failures", &b.consecutive_failures, 0)? {
        br.consecutive_failures = n;
    }
    if let Some(m) = &b.slow_multiplier {
        let k = *m.get_ref();
        if !(k.is_finite() && (k == 0.0 || k >= 1.0)) {
            return cx.err(
                "breaker.slow_multiplier",
                m.span(),
                format!(
                    "must be 0 (off) or a number ≥ 1, e.g. 4 for \"4× the usual latency\"; got {k}"
                ),
            );
        }
        br.slow_multiplier = k;
    }
    if let Some(d) = cx.duration("breaker.slow_floor", &b.slow_floor)? {
        br.slow_floor = d;
    }
    if let Some(n) = count("breaker.baseline_samples", &b.baseline_samples, 1)? {
        br.baseline_samples = n;
        br.baseline_min_samples = br.baseline_min_samples.min(n);
    }
    if let Some(n) = count("breaker.baseline_min_samples", &b.baseline_min_samples, 1)? {
        br.baseline_min_samples = n;
    }
    if let Some(n) = count(
        "breaker.degraded_minimum_calls",
        &b.degraded_minimum_calls,
        1,
    )? {
        br.degraded_minimum_calls = n;
    }
    if let Some(x) = rate(
        cx,
        "breaker.degraded_failure_rate",
        &b.degraded_failure_rate,
    )? {
        br.degraded_failure_rate = x;
    }
    if let Some(x) = rate(cx, "breaker.degraded_slow_rate", &b.degraded_slow_rate)? {
        br.degraded_slow_rate = x;
    }
    // Caution may only lower thresholds: follow a lowered `minimum_calls` unless set.
    br.cautious_minimum_calls = br.cautious_minimum_calls.min(br.minimum_calls);
    if let Some(n) = count(
        "breaker.cautious_minimum_calls",
        &b.cautious_minimum_calls,
        1,
    )? {
        br.cautious_minimum_calls = n;
    }
    if br.consecutive_failures > 0 {
        br.cautious_consecutive_failures = br
            .cautious_consecutive_failures
            .min(br.consecutive_failures);
    }
    if let Some(n) = count(
        "breaker.cautious_consecutive_failures",
        &b.cautious_consecutive_failures,
        0,
    )? {
        br.cautious_consecutive_failures = n;
    }

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
        return cx.err(
            &format!("breaker.{}", e.field),
            b.span_of(e.field),
            e.problem.to_string(),
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use crate::config::parse_str;
    use std::time::Duration;

    #[test]
    fn breaker_keys_for_one_laptop_parse() {
        let s = parse_str(
            "[breaker]\nconsecutive_failures = 4\nslow_multiplier = 3.5\nslow_floor = \"800ms\"\n\
             degraded_minimum_calls = 6\ndegraded_failure_rate = 0.2\ndegraded_slow_rate = 0.4\n\
             cautious_minimum_calls = 3\ncautious_consecutive_failures = 2\n\
             baseline_samples = 32\nbaseline_min_samples = 8\n",
            "w.toml",
        )
        .unwrap();
        let b = &s.resilience.breaker;
        assert_eq!(b.consecutive_failures, 4);
        assert_eq!(b.slow_multiplier, 3.5);
        assert_eq!(b.slow_floor, Duration::from_millis(800));
        assert_eq!((b.degraded_minimum_calls, b.cautious_minimum_calls), (6, 3));
        assert_eq!((b.degraded_failure_rate, b.degraded_slow_rate), (0.2, 0.4));
        assert_eq!(b.cautious_consecutive_failures, 2);
        assert_eq!((b.baseline_samples, b.baseline_min_samples), (32, 8));
        // Lowering the normal thresholds lowers the cautious ones with them.
        let s = parse_str(
            "[breaker]\nminimum_calls = 3\nconsecutive_failures = 2\n",
            "w.toml",
        )
        .unwrap();
        let b = &s.resilience.breaker;
        assert_eq!(
            (b.cautious_minimum_calls, b.cautious_consecutive_failures),
            (3, 2)
        );
    }

    #[test]
    fn bad_breaker_keys_name_the_key_and_line() {
        for (text, want) in [
            (
                "[breaker]\n\nslow_multiplier = 0.5\n",
                "w.toml:3: key `breaker.slow_multiplier`",
            ),
            (
                "[breaker]\nconsecutive_failures = -1\n",
                "w.toml:2: key `breaker.consecutive_failures`",
            ),
            (
                "[breaker]\ndegraded_slow_rate = 1.5\n",
                "w.toml:2: key `breaker.degraded_slow_rate`",
            ),
            (
                "[breaker]\nminimum_calls = 10\ncautious_minimum_calls = 12\n",
                "w.toml:3: key `breaker.cautious_minimum_calls`",
            ),
            (
                "[breaker]\nconsecutive_failures = 4\n\ncautious_consecutive_failures = 6\n",
                "w.toml:4: key `breaker.cautious_consecutive_failures`",
            ),
            (
                "[breaker]\nslow_floor = \"soon\"\n",
                "w.toml:2: key `breaker.slow_floor`",
            ),
            (
                "[[upstream]]\nname = \"a\"\norigin = \"http://127.0.0.1:9\"\nstatus_components = [\"Copilot\", \"Pages\"]\n",
                "w.toml:4: key `upstream.status_components`: `Pages` is not a watched",
            ),
        ] {
            let e = parse_str(text, "w.toml").unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn status_components_default_by_origin() {
        let s = parse_str("", "w.toml").unwrap();
        let by_name: Vec<_> = s
            .upstreams
            .iter()
            .map(|u| (u.name.as_str(), u.status_components.clone()))
            .collect();
        assert_eq!(
            by_name,
            [
                ("copilot-api", vec!["Copilot".to_string()]),
                ("copilot-individual", vec!["Copilot".to_string()]),
                ("copilot-business", vec!["Copilot".to_string()]),
                ("copilot-enterprise", vec!["Copilot".to_string()]),
                ("github-api", vec!["API Requests".to_string()])
            ]
        );
        let s = parse_str(
            "default_upstreams = false\n[[upstream]]\nname = \"a\"\norigin = \"http://127.0.0.1:9\"\nstatus_components = [\"copilot\"]\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(s.upstreams[0].status_components, ["copilot"]);
    }
}
