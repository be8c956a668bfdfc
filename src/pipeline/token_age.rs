//! A Copilot token answer served from the cache says how long ago it was fetched: its
//! `refresh_in` (seconds from the moment the answer was made) is reduced by the copy's age,
//! never below 0. `expires_at` is absolute (unix seconds) and stays as it came.
//!
//! Why: VS Code computes a token's expiry as `now + refresh_in + 60`
//! (microsoft/vscode-copilot-chat `src/platform/authentication/node/copilotTokenManager.ts`,
//! commit 31acd00a). A copy of an answer with `refresh_in: 1500` served unchanged 1440 s after
//! it was fetched would make VS Code trust the token until 1560 s from now, 20 minutes past its
//! real `expires_at` (1800 s after the fetch). With the age taken off, the expiry a client
//! computes is never later than the one it would have computed from the fresh answer.

use crate::cache::Stored;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The largest token answer Weir decodes to rewrite (a Copilot token answer is a few KB).
const MAX_DECODED: u64 = 1 << 20;

/// `e` as it should be served at `now`: the same entry when it is younger than a second or not
/// a token answer Weir can read, else a copy whose body has `refresh_in` reduced by the age.
pub(crate) fn aged(e: Arc<Stored>, now: Instant) -> Arc<Stored> {
    let age = e.age(now);
    if age < Duration::from_secs(1) || !e.is_success() {
        return e;
    }
    match rewrite(&e.headers, &e.body, age.as_secs()) {
        Some((headers, body)) => Arc::new(Stored {
            status: e.status,
            headers,
            body,
            stored_at: e.stored_at,
            fresh_until: e.fresh_until,
            revalidate_until: e.revalidate_until,
            stale_if_error_until: e.stale_if_error_until,
        }),
        None => e,
    }
}

/// `body` with its `Content-Encoding` (none, gzip or deflate) undone; `None` for another
/// encoding or a body that does not decode.
pub(crate) fn decoded_body(headers: &HeaderMap, body: &[u8]) -> Option<Vec<u8>> {
    decode(coding(headers)?, body)
}

/// The body's encoding as far as Weir can undo it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Coding {
    Identity,
    Gzip,
    Deflate,
}

fn coding(headers: &HeaderMap) -> Option<Coding> {
    let mut codings = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity");
    let first = codings.next();
    if codings.next().is_some() {
        return None;
    }
    match first.as_deref() {
        None => Some(Coding::Identity),
        Some("gzip") | Some("x-gzip") => Some(Coding::Gzip),
        Some("deflate") => Some(Coding::Deflate),
        // br, zstd: not decoded here; the copy is served as it was stored.
        Some(_) => None,
    }
}

fn decode(c: Coding, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let r: Box<dyn Read + '_> = match c {
        Coding::Identity => return Some(body.to_vec()),
        Coding::Gzip => Box::new(flate2::read::GzDecoder::new(body)),
        Coding::Deflate => Box::new(flate2::read::ZlibDecoder::new(body)),
    };
    r.take(MAX_DECODED).read_to_end(&mut out).ok()?;
    Some(out)
}

fn encode(c: Coding, body: &[u8]) -> Option<Vec<u8>> {
    match c {
        Coding::Identity => Some(body.to_vec()),
        Coding::Gzip => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            w.write_all(body).ok()?;
            w.finish().ok()
        }
        Coding::Deflate => {
            let mut w = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            w.write_all(body).ok()?;
            w.finish().ok()
        }
    }
}

/// The headers and body with `refresh_in` reduced by `age_secs`; `None` when the body is not a
/// JSON object with a numeric `refresh_in` (nothing to change).
pub(super) fn rewrite(
    headers: &HeaderMap,
    body: &[u8],
    age_secs: u64,
) -> Option<(HeaderMap, Bytes)> {
    let c = coding(headers)?;
    let plain = decode(c, body)?;
    let mut v: serde_json::Value = serde_json::from_slice(&plain).ok()?;
    let o = v.as_object_mut()?;
    let refresh = o.get("refresh_in")?;
    // Whole seconds as sent; a fractional or negative figure is read as its floor (>= 0).
    let secs = refresh
        .as_u64()
        .or_else(|| refresh.as_f64().map(|f| f.max(0.0) as u64))?;
    o.insert("refresh_in".into(), secs.saturating_sub(age_secs).into());
    let out = encode(c, &serde_json::to_vec(&v).ok()?)?;
    let mut headers = headers.clone();
    // The body changed: validators and a stored length name the old one.
    headers.remove(header::ETAG);
    if headers.contains_key(header::CONTENT_LENGTH) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
    }
    Some((headers, Bytes::from(out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn stored(headers: HeaderMap, body: Vec<u8>, at: Instant) -> Arc<Stored> {
        Arc::new(Stored {
            status: StatusCode::OK,
            headers,
            body: Bytes::from(body),
            stored_at: at,
            fresh_until: at + Duration::from_secs(1440),
            revalidate_until: at + Duration::from_secs(1440),
            stale_if_error_until: at + Duration::from_secs(1740),
        })
    }

    fn refresh_in(e: &Stored) -> serde_json::Value {
        let plain = decode(coding(&e.headers).unwrap(), &e.body).unwrap();
        serde_json::from_slice::<serde_json::Value>(&plain).unwrap()["refresh_in"].clone()
    }

    #[tokio::test(start_paused = true)]
    async fn refresh_in_loses_the_age_and_expires_at_stays() {
        let t0 = Instant::now();
        let body = br#"{"token":"tid=x","expires_at":1800001800,"refresh_in":1500,"endpoints":{"api":"https://api.individual.githubcopilot.com"}}"#;
        let e = stored(HeaderMap::new(), body.to_vec(), t0);
        assert!(
            Arc::ptr_eq(&aged(e.clone(), t0), &e),
            "a new copy is served as it is"
        );
        let later = aged(e.clone(), t0 + Duration::from_secs(1440));
        assert_eq!(refresh_in(&later), 60);
        let v: serde_json::Value = serde_json::from_slice(&later.body).unwrap();
        assert_eq!(v["expires_at"], 1800001800u64);
        assert_eq!(v["token"], "tid=x");
        assert_eq!(
            v["endpoints"]["api"],
            "https://api.individual.githubcopilot.com"
        );
        // VS Code's expiry (now + refresh_in + 60) is never past the token's own.
        let vscode_expiry_after_fetch = 1440 + 60 + 60;
        assert!(vscode_expiry_after_fetch <= 1800);
        let late = aged(e, t0 + Duration::from_secs(1700));
        assert_eq!(refresh_in(&late), 0, "never below 0");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gzip_answer_is_rewritten_and_stays_gzip() {
        let t0 = Instant::now();
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let body = encode(Coding::Gzip, br#"{"refresh_in":1500,"expires_at":1}"#).unwrap();
        let later = aged(stored(h, body, t0), t0 + Duration::from_secs(100));
        assert_eq!(later.headers[header::CONTENT_ENCODING], "gzip");
        assert_eq!(refresh_in(&later), 1400);
    }

    #[tokio::test(start_paused = true)]
    async fn anything_else_is_served_as_stored() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(100);
        for body in [
            &b"not json"[..],
            b"[1]",
            br#"{"refresh_in":"soon"}"#,
            br#"{"x":1}"#,
        ] {
            let e = stored(HeaderMap::new(), body.to_vec(), t0);
            assert!(Arc::ptr_eq(&aged(e.clone(), later), &e));
        }
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        let e = stored(h, br#"{"refresh_in":1500}"#.to_vec(), t0);
        assert!(Arc::ptr_eq(&aged(e.clone(), later), &e));
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let e = stored(h, b"not gzip".to_vec(), t0);
        assert!(Arc::ptr_eq(&aged(e.clone(), later), &e));
    }
}
