//! A fresh hit's answer made as a copy of the last one this thread made for the same stored
//! entry, with only its two per-request fields (`Age`, `X-Request-Id`) written again.
//!
//! Why: a hit's answer is the stored fields, then `Age`, `Cache-Status`, `X-Request-Id` and
//! `Weir-Policy`, each inserted into the map one by one (a hash and a probe each, and the
//! map's room reserved): ~1.9k of a hit's ~16.7k instructions (callgrind, 64 connections,
//! BENCHMARKS.md session 22). A client that polls asks for the same entry again and again, so
//! the map its last answer had is kept per thread, and the next answer is that map cloned (its
//! index and fields copied whole, no hashing) with the two values that change put in place by
//! position.
//!
//! The copy is the same answer, field for field: the kept map is the one the insertions made
//! ([`super::respond::FreshHit::finished`]), so names, values, order and duplicates are theirs;
//! only `Age` (from the entry and the instant the hit was judged at, as before) and the
//! request id are written, at the places the insertions put them. A kept answer is for one
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
    /// `None` until the same entry (and rule) is answered a second time: an entry answered
    /// once costs a note, not a copy.
    answer: Option<Answer>,
}

struct Answer {
    headers: HeaderMap,
    body: Bytes,
    /// Positions of `Age` and `X-Request-Id` among the map's values (iteration order).
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

/// Whether `kept` is `entry`'s answer under `rule`.
fn is_for(kept: &Kept, entry: &Arc<Stored>, rule: Option<&HeaderValue>) -> bool {
    // The weak hold keeps the address from being reused: the same address is the same entry.
    std::ptr::eq(kept.entry.as_ptr(), Arc::as_ptr(entry))
        && match (&kept.rule, rule) {
            (None, None) => true,
            (Some(a), Some(b)) => a.as_bytes() == b.as_bytes(),
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
    let made = SLOTS_HERE.try_with(|slots| {
        let slots = slots.try_borrow().ok()?;
        let kept = slots.kept.iter().flatten().find(|k| is_for(k, entry, rule))?;
        let answer = kept.answer.as_ref()?;
        Some((answer.headers.clone(), answer.body.clone(), answer.age_at, answer.rid_at))
    });
    let Ok(Some((mut headers, body, age_at, rid_at))) = made else {
        return Err(rid);
    };
    let (mut age, mut rid) = (Some(age), Some(rid));
    for (i, v) in headers.values_mut().enumerate() {
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
    let _ = SLOTS_HERE.try_with(|slots| {
        let Ok(mut slots) = slots.try_borrow_mut() else {
            return;
        };
        if let Some(kept) = slots
            .kept
            .iter_mut()
            .flatten()
            .find(|k| is_for(k, entry, rule))
        {
            if kept.answer.is_none() {
                kept.answer = Answer::of(entry, resp.headers());
            }
            return;
        }
        let at = slots.next;
        slots.next = (at + 1) % SLOTS;
        slots.kept[at] = Some(Kept {
            entry: Arc::downgrade(entry),
            rule: rule.cloned(),
            answer: None,
        });
    });
}

impl Answer {
    /// The answer to keep from `headers`, the map the insertions made; `None` when it has no
    /// single `Age` and `X-Request-Id` to write again (every fresh hit's has).
    fn of(entry: &Stored, headers: &HeaderMap) -> Option<Answer> {
        let (mut age_at, mut rid_at) = (None, None);
        for (i, (name, _)) in headers.iter().enumerate() {
            if name == header::AGE {
                age_at = match age_at {
                    None => Some(i),
                    Some(_) => return None,
                };
            } else if name == REQUEST_ID {
                rid_at = match rid_at {
                    None => Some(i),
                    Some(_) => return None,
                };
            }
        }
        // Appended in the map's own order (a name's values together, names in first-seen
        // order): the copy iterates, and so is written, as the map does.
        // Room for the field the connection adds (`Keep-Alive`, or `Connection: close`): a
        // full map grows (rehashes) at its next insertion.
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
        let body = match entry.body.len() <= MAX_BODY {
            true => Bytes::copy_from_slice(&entry.body),
            false => entry.body.clone(),
        };
        Some(Answer {
            headers: own,
            body,
            age_at: age_at?,
            rid_at: rid_at?,
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
