//! RFC 3339 timestamps for JSON (UTC, milliseconds), on the `time` crate: Weir's one date
//! library (rcgen and x509-parser already build it; `weir-status` and `weir-resilience` use it
//! too). Durations in the config are a different thing and stay with `humantime`.

use serde::Serializer;
use std::time::SystemTime;
use time::format_description::well_known::Rfc3339;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// `1970-01-01T00:00:00.000Z`: always UTC, always milliseconds, so the JSON is fixed-width.
const MILLIS_UTC: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
/// Milliseconds since the Unix epoch (0 for a clock before it): the queue's and the account
/// store's timestamps.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn rfc3339(t: SystemTime) -> String {
    OffsetDateTime::from(t)
        .format(MILLIS_UTC)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_string())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` (a space instead of the `T` is accepted, as
/// RFC 3339 allows) into unix milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let parsed = OffsetDateTime::parse(s, &Rfc3339).or_else(|e| {
        match (s.get(..10), s.get(10..).and_then(|r| r.strip_prefix(' '))) {
            (Some(date), Some(time)) => OffsetDateTime::parse(&format!("{date}T{time}"), &Rfc3339),
            _ => Err(e),
        }
    });
    let t = parsed.ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `#[serde(serialize_with = "crate::time_fmt::serialize")]` for a `SystemTime`.
pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        assert_eq!(rfc3339(t), "2026-11-30T00:53:20.123Z");
        assert_eq!(
            parse_rfc3339_ms("2026-11-30T00:53:20.123Z"),
            Some(1_796_000_000_123)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-30T01:53:20+01:00"),
            Some(1_796_000_000_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-30 00:53:20.5Z"),
            Some(1_796_000_000_500)
        );
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        assert_eq!(parse_rfc3339_ms("2026-13-30T00:53:20Z"), None);
    }
}
