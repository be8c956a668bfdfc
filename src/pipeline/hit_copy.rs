//! A fresh hit's answer made as a copy of the last one this thread made for the same stored
//! entry, with only its two per-request fields (`Age`, `X-Request-Id`) written again.
//!
//! Why: a hit's answer is the stored fields, then `Age`, `Cache-Status`, `X-Request-Id` and
//! `Weir-Policy`, each inserted into the map one by one (a hash and a probe each, and the
//! map's room reserved): ~1.9k of a hit's ~16.7k instructions (callgrind, 64 connections,
//! BENCHMARKS.md session 22). A client that polls asks for the same entry again and again, so
//! the map its last answer had is kept per thread, and the next answer is that map cloned (its
//! index and fields copied whole, no hashing) with the two values that change put in place.
//!
//! The copy is the same answer, field for field: the kept map is the one the insertions made
//! ([`super::respond::FreshHit::finished`]), so names, values, order and duplicates are theirs;
//! only `Age` (from the entry and the instant the hit was judged at, as before) and the
//! request id are written again, at the places the insertions put them (each the only value
//! of its name). A kept answer is for one
//! entry (the same `Arc`, held weakly so its address cannot be reused while it is kept) and
//! one `Weir-Policy` rule value; anything else is made by the insertions as before.
//!
//! The kept values and body are this thread's own copies (a body only up to [`MAX_BODY`]):
//! the stored ones are shared by every worker, and each answer's clone and drop of them was a
//! count written by both cores in turn (a cache line moved between them per hit); a copy's
//! count is written by this thread only. Memory: at most [`SLOTS`] answers per worker thread,
//! each its headers and a body of at most [`MAX_BODY`] bytes.

use super::headers::REQUEST_ID;
use crate::body::Body;
use crate::cache::Stored;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response};
use std::cell::RefCell;
use std::sync::{Arc, Weak};

/// Entries whose answers a thread keeps (a client that polls two or three lists in turn
/// still finds its answer).
const SLOTS: usize = 4;
/// Bodies up to this size are copied into the kept answer; larger ones are shared as before.
const MAX_BODY: usize = 16 * 1024;

/// One kept answer.
struct Kept {
    entry: Weak<Stored>,
    rule: Option<HeaderValue>,
    /// The connection's keep-alive hint the answer ends with (`None`: it has none, and is
    /// fitted to its connection as any answer is).
    hint: Option<&'static str>,
    /// `None` until the same entry (and rule) is answered a second time: an entry answered
    /// once costs a note, not a copy.
    answer: Option<Answer>,
}

struct Answer {
    headers: HeaderMap,
    body: Bytes,
    /// Positions of `Age` and `X-Request-Id` among the map's values (iteration order; each
    /// the only value of its name).
    age_at: usize,
    rid_at: usize,
}

#[derive(Default)]
struct Slots {
    kept: [Option<Kept>; SLOTS],
    /// The slot the next new entry replaces.
    next: usize,
}

thread_local! {
    static SLOTS_HERE: RefCell<Slots> = RefCell::default();
}

/// Whether `kept` is `entry`'s answer under `rule`, ending with the keep-alive `hint`.
fn is_for(
    kept: &Kept,
    entry: &Arc<Stored>,
    rule: Option<&HeaderValue>,
    hint: Option<&'static str>,
) -> bool {
    // The weak hold keeps the address from being reused: the same address is the same entry.
    std::ptr::eq(kept.entry.as_ptr(), Arc::as_ptr(entry))
        && same(kept.rule.as_ref(), rule)
        && kept.hint == hint
}

fn same(a: Option<&HeaderValue>, b: Option<&HeaderValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        // The same static text (the usual rule and hint) is the same bytes.
        (Some(a), Some(b)) => {
            let (a, b) = (a.as_bytes(), b.as_bytes());
            std::ptr::eq(a, b) || a == b
        }
        _ => false,
    }
}

/// The answer kept for `entry` and `rule`, copied, with `age` and `rid` in place; `rid` back
/// when this thread keeps none (the caller makes the answer, then [`keep`]s it).
pub(super) fn copy(
    entry: &Arc<Stored>,
    rule: Option<&HeaderValue>,
    age: HeaderValue,
    rid: HeaderValue,
) -> Result<Response<Body>, HeaderValue> {
    // Taken: a copy ends with it (a kept answer is made with the hint its connection gives).
    let hint = crate::server::take_keep_alive_hint();
    let made = SLOTS_HERE.try_with(|slots| {
        let slots = slots.try_borrow().ok()?;
        let kept = slots
            .kept
            .iter()
            .flatten()
            .find(|k| is_for(k, entry, rule, hint))?;
        let answer = kept.answer.as_ref()?;
        Some((
            answer.headers.clone(),
            answer.body.clone(),
            answer.age_at,
            answer.rid_at,
        ))
    });
    let Ok(Some((mut headers, body, age_at, rid_at))) = made else {
        crate::server::give_back_keep_alive_hint(hint);
        return Err(rid);
    };
    // Put in place by position: a walk over the values is cheaper than a lookup by name for
    // each (hashing the name: 2 x ~170 instructions against ~200 for the walk, callgrind).
    let (mut age, mut rid) = (Some(age), Some(rid));
    // The walk ends with the later of the two: the fields after them are left unread.
    let last = age_at.max(rid_at);
    for (i, v) in headers.values_mut().enumerate().take(last + 1) {
        if i == age_at {
            if let Some(a) = age.take() {
                *v = a;
            }
        } else if i == rid_at {
            if let Some(r) = rid.take() {
                *v = r;
            }
        }
    }
    let mut resp = Response::new(crate::body::full(body));
    *resp.status_mut() = entry.status;
    // The map `Response::new` made is empty and owns no memory: swapped out and forgotten
    // rather than dropped (as `Stored::to_response_in` does).
    debug_assert_eq!(resp.headers().capacity(), 0);
    std::mem::forget(std::mem::replace(resp.headers_mut(), headers));
    Ok(resp)
}

/// Notes `resp`, the answer just made for `entry` under `rule`: the second time in a row the
/// same entry and rule are answered here, the answer is kept for [`copy`].
pub(super) fn keep(entry: &Arc<Stored>, rule: Option<&HeaderValue>, resp: &Response<Body>) {
    // Looked at, not taken: this answer is fitted to its connection as any other.
    let hint = crate::server::take_keep_alive_hint();
    let fits = hint.is_none()
        || (resp.status() != http::StatusCode::SWITCHING_PROTOCOLS
            && resp.extensions().is_empty()
            && !resp.headers().contains_key(header::CONNECTION));
    crate::server::give_back_keep_alive_hint(hint);
    if !fits {
        return;
    }
    let _ = SLOTS_HERE.try_with(|slots| {
        let Ok(mut slots) = slots.try_borrow_mut() else {
            return;
        };
        if let Some(kept) = slots
            .kept
            .iter_mut()
            .flatten()
            .find(|k| is_for(k, entry, rule, hint))
        {
            if kept.answer.is_none() {
                kept.answer = Answer::of(entry, resp.headers(), hint);
            }
            return;
        }
        let at = slots.next;
        slots.next = (at + 1) % SLOTS;
        slots.kept[at] = Some(Kept {
            entry: Arc::downgrade(entry),
            rule: rule.cloned(),
            hint,
            answer: None,
        });
    });
}

impl Answer {
    /// The answer to keep from `headers`, the map the insertions made; `None` when it has no
    /// single `Age` and `X-Request-Id` to write again (every fresh hit's has).
    fn of(entry: &Stored, headers: &HeaderMap, hint: Option<&'static str>) -> Option<Answer> {
        let (mut age_at, mut rid_at) = (None, None);
        for (i, (name, _)) in headers.iter().enumerate() {
            let at = match name {
                n if n == header::AGE => &mut age_at,
                n if n == REQUEST_ID => &mut rid_at,
                _ => continue,
            };
            if at.replace(i).is_some() {
                return None;
            }
        }
        let (age_at, rid_at) = (age_at?, rid_at?);
        // Appended in the map's own order (a name's values together, names in first-seen
        // order): the copy iterates, and so is written, as the map does.
        // Room for `Keep-Alive` (and one more: an HTTP/2 or HTTP/1.0 answer gets no hint).
        let mut own = HeaderMap::with_capacity(headers.len() + 2);
        for (name, value) in headers {
            if is_weirs(name) {
                own.append(name.clone(), value.clone());
                continue;
            }
            let name = HeaderName::from_bytes(name.as_str().as_bytes()).unwrap_or(name.clone());
            let mut copy = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(value.as_bytes()))
                .unwrap_or_else(|_| value.clone());
            copy.set_sensitive(value.is_sensitive());
            own.append(name, copy);
        }
        // Last, as `server::fit_to_connection` appends it.
        if let Some(hint) = hint {
            own.append(crate::server::KEEP_ALIVE, HeaderValue::from_static(hint));
        }
        let body = match entry.body.len() <= MAX_BODY {
            true => Bytes::copy_from_slice(&entry.body),
            false => entry.body.clone(),
        };
        Some(Answer {
            headers: own,
            body,
            age_at,
            rid_at,
        })
    }
}

/// Fields Weir writes with values that cost nothing to clone (static text) or that each copy
/// replaces: kept as they are rather than copied.
fn is_weirs(name: &HeaderName) -> bool {
    name == header::AGE
        || name == REQUEST_ID
        || name == super::headers::CACHE_STATUS
        || name == super::policy::HEADER_NAME
}

#[cfg(test)]
mod tests {
    use super::super::respond::{finish, FreshHit};
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Duration;
    use tokio::time::Instant;

    fn entry(fields: &[(&'static str, &'static str)]) -> Arc<Stored> {
        let now = Instant::now();
        let mut headers = HeaderMap::new();
        for (n, v) in fields {
            // Values as an upstream's parsed answer holds them (shared bytes, not static).
            let v = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(v.as_bytes())).unwrap();
            headers.append(HeaderName::from_static(n), v);
        }
        Arc::new(Stored {
            status: http::StatusCode::OK,
            headers,
            body: Bytes::from_static(b"[{\"id\":1}]"),
            stored_at: now - Duration::from_secs(3),
            fresh_until: now + Duration::from_secs(600),
            revalidate_until: now + Duration::from_secs(600),
            stale_if_error_until: now + Duration::from_secs(600),
        })
    }

    type Fields = Vec<(HeaderName, HeaderValue, bool)>;

    async fn parts(resp: Response<Body>) -> (http::StatusCode, Fields, Bytes) {
        let status = resp.status();
        let fields = resp
            .headers()
            .iter()
            .map(|(n, v)| (n.clone(), v.clone(), v.is_sensitive()))
            .collect();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, fields, body)
    }

    /// What a connection does around a handler ([`crate::server::connection`]): offers its
    /// keep-alive hint to an HTTP/1.1 request's handler, and fits the answer unless the
    /// handler took the hint.
    fn answered(
        version: http::Version,
        hint: &HeaderValue,
        handler: impl FnOnce() -> Response<Body>,
    ) -> (Response<Body>, bool) {
        if version == http::Version::HTTP_11 {
            crate::server::give_back_keep_alive_hint(crate::server::keep_alive_text(hint));
        }
        let mut resp = handler();
        let taken =
            version == http::Version::HTTP_11 && crate::server::take_keep_alive_hint().is_none();
        if !taken {
            crate::server::fit_to_connection(version, &mut resp, hint);
        }
        (resp, taken)
    }

    /// Every answer of a run of hits on one entry — made, noted, then copied — is, field for
    /// field (names, values, order, duplicates, the never-indexed flag) and in status and
    /// body, the answer the insertions make and the connection fits, for stored fields with
    /// duplicates, a stored `Age` or `Weir-Policy`, with and without a rule, over HTTP/1.1,
    /// HTTP/1.0 and HTTP/2; and the third is a copy.
    #[tokio::test]
    async fn a_copied_answer_is_the_answer_the_insertions_make() {
        let hint = crate::server::keep_alive_value(Duration::from_secs(30));
        let stored_sets: [&[(&str, &str)]; 4] = [
            &[
                ("content-type", "application/json"),
                ("date", "Mon, 07 Dec 2026 07:19:28 GMT"),
            ],
            &[
                ("vary", "accept"),
                ("x-github-request-id", "AB:CD"),
                ("vary", "authorization"),
                ("etag", "\"v1\""),
            ],
            &[("age", "100"), ("content-type", "application/json")],
            &[("weir-policy", "stored"), ("link", "<x>; rel=\"next\"")],
        ];
        let versions = [
            http::Version::HTTP_11,
            http::Version::HTTP_10,
            http::Version::HTTP_2,
        ];
        let mut n = 0u32;
        for fields in stored_sets {
            for rule in [None, Some(HeaderValue::from_static("default list=pass"))] {
                for version in versions {
                    let e = entry(fields);
                    for round in 0..4 {
                        n += 1;
                        let rid = HeaderValue::from_str(&format!("{n:032x}")).unwrap();
                        // A later round is judged later: its `Age` differs.
                        let now = Instant::now() + Duration::from_secs(round * 7);
                        let hit = || FreshHit {
                            entry: e.clone(),
                            room: HeaderMap::new(),
                            now,
                        };
                        let (made, taken) =
                            answered(version, &hint, || hit().finished(rid.clone(), rule.clone()));
                        let (want, _) = answered(version, &hint, || {
                            finish(Ok(hit().response()), rid.clone(), rule.clone(), "http://w")
                        });
                        let label = format!("{fields:?} {rule:?} {version:?} round {round}");
                        assert_eq!(parts(made).await, parts(want).await, "{label}");
                        // Made, noted, kept, then copied (with the hint, on HTTP/1.1).
                        let copied = version == http::Version::HTTP_11 && round >= 2;
                        assert_eq!(taken, copied, "{label}");
                    }
                }
            }
        }
    }

    /// Another entry, even with the same fields, or another rule, is never answered with a
    /// kept copy of a different one's answer.
    #[tokio::test]
    async fn a_copy_is_only_of_the_same_entry_and_rule() {
        let hint = crate::server::keep_alive_value(Duration::from_secs(30));
        let fields: &[(&str, &str)] = &[("content-type", "application/json")];
        let a = entry(fields);
        let mut b_stored = entry(fields);
        Arc::get_mut(&mut b_stored).unwrap().body = Bytes::from_static(b"[]");
        let now = Instant::now();
        let rid = HeaderValue::from_static("00000000000000000000000000000001");
        let hit = |e: &Arc<Stored>| FreshHit {
            entry: e.clone(),
            room: HeaderMap::new(),
            now,
        };
        for _ in 0..3 {
            let _ = answered(http::Version::HTTP_11, &hint, || {
                hit(&a).finished(rid.clone(), None)
            });
        }
        let (resp, taken) = answered(http::Version::HTTP_11, &hint, || {
            hit(&b_stored).finished(rid.clone(), None)
        });
        assert!(!taken);
        assert_eq!(parts(resp).await.2, Bytes::from_static(b"[]"));
        let rule = Some(HeaderValue::from_static("other"));
        let (resp, taken) = answered(http::Version::HTTP_11, &hint, || {
            hit(&a).finished(rid.clone(), rule.clone())
        });
        assert!(!taken);
        let (_, fields, _) = parts(resp).await;
        let policy = fields
            .iter()
            .find(|(n, _, _)| n == super::super::policy::HEADER_NAME);
        assert_eq!(policy.map(|(_, v, _)| v.as_bytes()), Some(&b"other"[..]));
    }
}
