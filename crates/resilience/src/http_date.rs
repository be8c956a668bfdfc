//! HTTP-dates (RFC 9110 §5.6.7) on the `time` crate, Weir's one date library: the preferred
//! IMF-fixdate and, as recipients must, the obsolete RFC 850 and asctime forms. Always GMT.

use std::time::SystemTime;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::PrimitiveDateTime;

/// `Sun, 06 Nov 1994 08:49:37 GMT`
const IMF_FIXDATE: &[BorrowedFormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);
/// `Sunday, 06-Nov-94 08:49:37 GMT`, its two-digit year already widened to four.
const RFC850: &[BorrowedFormatItem<'static>] =
    format_description!("[weekday], [day]-[month repr:short]-[year] [hour]:[minute]:[second] GMT");
/// `Sun Nov  6 08:49:37 1994`
const ASCTIME: &[BorrowedFormatItem<'static>] = format_description!(
    "[weekday repr:short] [month repr:short] [day padding:space] [hour]:[minute]:[second] [year]"
);

/// The instant an HTTP-date names, or `None` when `text` is not one.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let parsed = PrimitiveDateTime::parse(text, IMF_FIXDATE)
        .or_else(|_| PrimitiveDateTime::parse(text, ASCTIME))
        .ok()
        .or_else(|| PrimitiveDateTime::parse(&widen_rfc850_year(text)?, RFC850).ok())?;
    Some(parsed.assume_utc().into())
}

/// `Sunday, 06-Nov-94 …` as `Sunday, 06-Nov-1994 …`: years below 70 are 20xx, others 19xx.
fn widen_rfc850_year(text: &str) -> Option<String> {
    let (weekday, rest) = text.split_once(", ")?;
    let yy: u16 = rest.get(7..9)?.parse().ok()?;
    let century = if yy < 70 { 20 } else { 19 };
    Some(format!(
        "{weekday}, {}{century}{}",
        rest.get(..7)?,
        rest.get(7..)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn reads_all_three_forms_and_refuses_garbage() {
        let at = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(at));
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(at));
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(at));
        assert_eq!(
            parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_445_412_480))
        );
        for bad in [
            "",
            "120",
            "Sun, 06 Nov 1994 08:49:37 +0100",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-9 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }
}
