//! Server wait hints: `Retry-After` (RFC 9110 §10.2.3) and GitHub's `x-ratelimit-reset`,
//! turned into a [`Duration`] measured from a caller-supplied wall-clock `now`.
//!
//! Every parser returns `None` on garbage and never panics. Waits longer than [`MAX_WAIT`]
//! are clamped to it: a proxy that sleeps for a day because of a typo'd header (or a server
//! clock that is years off) is worse than one that asks again after an hour, and GitHub's own
//! primary rate-limit window is one hour, so no honest hint exceeds it. Times in the past
//! give [`Duration::ZERO`] ("you may go now").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

/// The longest wait any hint can produce; longer values are clamped to this.
pub const MAX_WAIT: Duration = Duration::from_secs(60 * 60);

/// Parses a `Retry-After` value: either delta-seconds (`"120"`) or an HTTP-date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`).
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Some(secs) = parse_delta_seconds(text) {
        return Some(clamp(secs));
    }
    let at = crate::http_date::parse_http_date(text)?;
    Some(until(at, now))
}

/// Parses GitHub's `x-ratelimit-reset` (UTC epoch seconds) into the wait from `now`.
pub fn parse_ratelimit_reset(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    let epoch = parse_delta_seconds(text)?;
    // An epoch too large for SystemTime is as absurd as any other far-future value.
    match UNIX_EPOCH.checked_add(Duration::from_secs(epoch)) {
        Some(at) => Some(until(at, now)),
        None => Some(MAX_WAIT),
    }
}

/// The wait a response asks for, following GitHub's guidance: `Retry-After` wins; otherwise,
/// when `x-ratelimit-remaining` is `0`, wait until `x-ratelimit-reset`. `None` when the
/// response names no wait (or names it unreadably).
pub fn wait_hint(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(value) = headers.get(http::header::RETRY_AFTER) {
        if let Some(wait) = parse_retry_after(value, now) {
            return Some(wait);
        }
    }
    let exhausted = headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "0");
    if exhausted {
        return headers
            .get("x-ratelimit-reset")
            .and_then(|v| parse_ratelimit_reset(v, now));
    }
    None
}

/// `1*DIGIT` as a count of seconds; a digit string too long for `u64` saturates (it is then
/// clamped like any other huge value) rather than being rejected.
fn parse_delta_seconds(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse::<u64>().unwrap_or(u64::MAX))
}

fn clamp(secs: u64) -> Duration {
    Duration::from_secs(secs).min(MAX_WAIT)
}

fn until(at: SystemTime, now: SystemTime) -> Duration {
    at.duration_since(now)
        .unwrap_or(Duration::ZERO)
        .min(MAX_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        // 2015-10-21T07:28:00Z
        UNIX_EPOCH + Duration::from_secs(1_445_412_480)
    }

    fn ra(text: &str) -> Option<Duration> {
        parse_retry_after(&HeaderValue::from_str(text).unwrap(), now())
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(ra("120"), Some(Duration::from_secs(120)));
        assert_eq!(ra(" 0 "), Some(Duration::ZERO));
        assert_eq!(ra("7200"), Some(MAX_WAIT));
        assert_eq!(ra("99999999999999999999999"), Some(MAX_WAIT));
    }

    #[test]
    fn http_date() {
        assert_eq!(
            ra("Wed, 21 Oct 2015 07:28:30 GMT"),
            Some(Duration::from_secs(30))
        );
        // In the past: go now.
        assert_eq!(ra("Wed, 21 Oct 2015 07:00:00 GMT"), Some(Duration::ZERO));
        // Far future: clamped.
        assert_eq!(ra("Fri, 01 Jan 2100 00:00:00 GMT"), Some(MAX_WAIT));
    }

    #[test]
    fn garbage_is_none() {
        for bad in ["", "-5", "1.5", "soon", "12s", "Wed, 99 Foo 2015"] {
            assert_eq!(ra(bad), None, "{bad:?}");
        }
        let opaque = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
        assert_eq!(parse_retry_after(&opaque, now()), None);
    }

    #[test]
    fn ratelimit_reset() {
        let reset = |v: &str| parse_ratelimit_reset(&HeaderValue::from_str(v).unwrap(), now());
        assert_eq!(reset("1445412540"), Some(Duration::from_secs(60)));
        assert_eq!(reset("1000"), Some(Duration::ZERO));
        assert_eq!(reset("99999999999999"), Some(MAX_WAIT));
        assert_eq!(reset("18446744073709551615"), Some(MAX_WAIT));
        assert_eq!(reset("abc"), None);
    }

    #[test]
    fn wait_hint_prefers_retry_after() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        h.insert("x-ratelimit-reset", HeaderValue::from_static("1445412540"));
        assert_eq!(wait_hint(&h, now()), Some(Duration::from_secs(60)));
        h.insert("retry-after", HeaderValue::from_static("5"));
        assert_eq!(wait_hint(&h, now()), Some(Duration::from_secs(5)));
        // Unreadable Retry-After falls back to the reset header.
        h.insert("retry-after", HeaderValue::from_static("later"));
        assert_eq!(wait_hint(&h, now()), Some(Duration::from_secs(60)));
        // Reset without exhaustion is not a wait request.
        h.remove("retry-after");
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("10"));
        assert_eq!(wait_hint(&h, now()), None);
    }
}
