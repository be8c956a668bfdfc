//! Phase 4 for the cacheable classes (`list`, `view`, `token`): the per-identity cache,
//! stale-while-revalidate, and coalescing of identical in-flight requests into one detached
//! upstream fetch. List and view answers are keyed by the credential's account sharing
//! identity when the sharing rule allows it (`crate::accounts`), token answers always by the
//! credential; smaller list pages are cut from a larger page of the same list
//! ([`super::page_subset`]). A `stream` GET whose answers are complete documents comes here
//! too, keyed like `view` ([`super::stream`]).
//!
//! A stale copy's refresh is conditional on its validators, and a `304` makes the copy fresh
//! again ([`super::conditional`]). A log (`stream` document) never goes back in the cache: a
//! shorter fresh answer keeps the longer copy's bytes.
//!
//! What is kept: never `Set-Cookie` (a shared answer must not hand one caller's session to
//! another); and for anonymous requests (no credential, so every anonymous caller shares one
//! identity) nothing marked `Cache-Control: private` or `no-store`.

use super::context::{Answer, Call, Ctx, Step};
use super::headers::strip_hop_by_hop;
use super::page_subset::Family;
use super::record::{Event, Outcome};
use super::shape::{self, Shaped};
use super::task_events::{self, Member};
use super::{page_subset, rescue, respond};
use crate::accounts::Accounts;
use crate::body::Body;
use crate::cache::{Cache, CacheKey, Durability, Freshness, Paced, Stored};
use crate::coalesce::{Coalescer, Role};
use crate::config::{ClassSettings, Route, RouteClass, Settings, UpstreamIndex};
use crate::identity::Identity;
use crate::problem::{Problem, ProblemKind};
use crate::upstream::{AttemptPolicy, Replayable, Upstreams};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use http::{header, HeaderMap, Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// What the cache phase (and [`super::stream`], [`super::held`], [`super::page_subset`]) may
/// touch: the cache and its coalescer, the page families, the streaming keys, the upstreams
/// and the accounts that decide the sharing identity.
#[derive(Clone, Copy)]
pub(super) struct CacheHandles<'a> {
    pub cache: &'a Cache,
    pub coalescer: &'a Coalescer<Refreshed, Problem>,
    pub page_families: &'a page_subset::Families,
    pub streamed: &'a super::stream::Streamed,
    pub upstreams: &'a Arc<Upstreams>,
    pub accounts: &'a Arc<Accounts>,
    /// The Task API's tasks and the events pages their followers ask ([`task_events`]).
    pub task_groups: &'a task_events::Groups,
}

impl CacheHandles<'_> {
    /// Owned copies for a detached fetch, which outlives the request that started it.
    fn flight(&self) -> Flight {
        Flight {
            cache: self.cache.clone(),
            coalescer: self.coalescer.clone(),
            page_families: self.page_families.clone(),
            streamed: self.streamed.clone(),
            upstreams: self.upstreams.clone(),
            accounts: self.accounts.clone(),
            task_groups: self.task_groups.clone(),
        }
    }
}

/// [`CacheHandles`] owned by a detached fetch (each field is a shared handle: cloning it
/// clones a pointer, not the data).
struct Flight {
    cache: Cache,
    coalescer: Coalescer<Refreshed, Problem>,
    page_families: page_subset::Families,
    streamed: super::stream::Streamed,
    upstreams: Arc<Upstreams>,
    accounts: Arc<Accounts>,
    task_groups: task_events::Groups,
}

impl Flight {
    fn handles(&self) -> CacheHandles<'_> {
        CacheHandles {
            cache: &self.cache,
            coalescer: &self.coalescer,
            page_families: &self.page_families,
            streamed: &self.streamed,
            upstreams: &self.upstreams,
            accounts: &self.accounts,
            task_groups: &self.task_groups,
        }
    }
}

/// Whether upstream `up` is strained now, and what paces its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strain {
    None,
    /// The breaker is `degraded`, or the last refreshes through the cache were slow or failed
    /// (`crate::cache::pace`): each key is refreshed once per `degraded_refresh`.
    Paced,
    /// The breaker is `open` or `half_open`: it paces the calls itself. It refuses a refresh
    /// locally while open (no upstream call), and once half-open needs refreshes as its probes:
    /// held for `degraded_refresh` instead, a key would learn the upstream healed minutes late,
    /// and a log follower would see the outage's copy all that while (#29).
    Breaker,
}

fn strain_of(h: CacheHandles<'_>, up: UpstreamIndex) -> Strain {
    use weir_resilience::State;
    match h.upstreams.get(up).gate.breaker.state() {
        State::Open | State::HalfOpen => Strain::Breaker,
        State::Degraded => Strain::Paced,
        State::Closed if h.cache.pace().last_refresh_strained(up) => Strain::Paced,
        State::Closed => Strain::None,
    }
}

/// What the fetch task needs to repeat the request, owned so it can outlive the client.
#[derive(Clone)]
struct FetchSpec {
    /// The settings of the request that started the fetch: the whole flight runs under them.
    settings: Arc<Settings>,
    up: UpstreamIndex,
    class: RouteClass,
    /// Whose breaker the fetch counts against (the request's route family).
    breaker_family: crate::config::Family,
    key: CacheKey,
    uri: Uri,
    headers: HeaderMap,
    scope: Option<Identity>,
    /// The page-size family this fetch belongs to, and its size.
    page: Option<(CacheKey, u32)>,
    /// The stale copy in hand: it may answer if this fetch fails (so the upstream's hint is
    /// never waited out), and its validators make the fetch conditional.
    stale: Option<Arc<Stored>>,
    /// A Task API task or events page: a changed task copy is stored only after its events
    /// pages ([`task_events`]).
    group: Option<Member>,
}

impl FetchSpec {
    fn route(&self) -> Route {
        Route {
            class: self.class,
            family: self.breaker_family,
        }
    }
}

/// What a cache flight ends with: the entry its waiters get, and whether the upstream
/// revalidated the copy in hand (`304 Not Modified`) instead of sending it again.
pub(crate) struct Refreshed {
    pub entry: Arc<Stored>,
    pub not_modified: bool,
}

/// What the cache decided for one request: answered, joining a flight, or leading one.
pub(super) enum Lookup<'a> {
    Answered(Answer),
    Joins(BoxFuture<'a, Answer>),
    /// A stale copy in hand, waiting (at most `revalidate_wait`) for its refresh. Not
    /// admitted, like the stale hit it replaces: the refresh is one per key, coalesced.
    Revalidates(BoxFuture<'a, Answer>),
    Fetch {
        stale: Option<Arc<Stored>>,
        go: BoxFuture<'a, Answer>,
    },
}

impl<'a> Lookup<'a> {
    /// The answer, for a request already admitted (see [`Step`]).
    pub async fn finish(self) -> Answer {
        match self {
            Lookup::Answered(r) => r,
            Lookup::Joins(go) | Lookup::Revalidates(go) | Lookup::Fetch { go, .. } => go.await,
        }
    }
}

impl<'a> From<Lookup<'a>> for Step<'a> {
    fn from(l: Lookup<'a>) -> Step<'a> {
        match l {
            Lookup::Answered(r) => Step::Answered(r),
            Lookup::Joins(go) | Lookup::Revalidates(go) => Step::Joins(go),
            Lookup::Fetch { stale, go } => Step::Upstream(Call::Fetch { stale, go }),
        }
    }
}

/// The cache/coalesce phase for `list`, `view` and `token` GETs.
pub(super) fn serve<'a>(h: CacheHandles<'a>, ctx: &'a Ctx<'_>, req: Request<Incoming>) -> Step<'a> {
    let (parts, _body) = req.into_parts();
    serve_head(h, ctx, parts)
}

/// A fresh hit for a `list`, `view` or `token` GET, answered before any future is made
/// (`super::handle`): what [`serve`] answers when the request's own key holds a fresh copy,
/// the answer written into the request's header map (taken). `None`, with nothing done, for
/// everything else, which [`serve`] then handles: a list page (its page family may answer), a
/// Task API task or events page (followed), a copy kept under the credential's own key only
/// (adopted), a stale or missing copy.
pub(super) fn fresh_hit(
    h: CacheHandles<'_>,
    ctx: &Ctx<'_>,
    req: &mut Request<Incoming>,
) -> Option<respond::FreshHit> {
    let (up, class) = (ctx.up, ctx.class);
    let uri = req.uri();
    if class == RouteClass::List && uri.query().is_some() && page_subset::Page::of(uri).is_some() {
        return None;
    }
    let keyed = keyed_identity_of(h, ctx, req.method(), uri.path());
    if task_events::member(ctx.family, class, up, &keyed, uri.path()).is_some() {
        return None;
    }
    // The target as `Keyed::lookup` spells it (`path_and_query`, or `/`), split where the
    // `Uri` already knows its query starts.
    let target = match uri.path_and_query() {
        Some(pq) => {
            let s = pq.as_str();
            match pq.query() {
                Some(q) => (&s[..s.len() - q.len() - 1], Some(q)),
                None => (s, None),
            }
        }
        None => ("/", None),
    };
    let key = CacheKey::of_target(
        &h.upstreams.get(up).settings,
        &Method::GET,
        target,
        &keyed,
        req.headers(),
        &ctx.settings.key_headers,
    );
    // One clock read: the store's memo and the freshness below judge at the same instant.
    let now = Instant::now();
    let entry = h.cache.get_at(&key, now)?;
    let cs = ctx.settings.classes.get(class).for_family(ctx.family);
    let entry = retime(entry, class, &cs);
    if entry.freshness(now) != Freshness::Fresh {
        return None;
    }
    ctx.seen.saw(Event::FreshHit);
    let room = std::mem::take(req.headers_mut());
    Some(respond::FreshHit { entry, room, now })
}

/// The same, for a request already taken apart (its body, if any, is not part of the key).
pub(super) fn serve_head<'a>(
    h: CacheHandles<'a>,
    ctx: &'a Ctx<'_>,
    parts: http::request::Parts,
) -> Step<'a> {
    let (up, class) = (ctx.up, ctx.class);
    let keyed = keyed_identity(h, ctx, &parts);
    let page = (class == RouteClass::List)
        .then(|| page_subset::Page::of(&parts.uri))
        .flatten();
    let Some(page) = page else {
        let r = Keyed { keyed, page: None };
        return r.lookup(h, ctx, parts.uri, parts.headers).into();
    };
    let family = page.family(
        &h.upstreams.get(up).settings,
        &keyed,
        &parts.headers,
        &ctx.settings.key_headers,
    );
    let larger = match h.page_families.get(&family) {
        Some(Family::Largest(m)) if m > page.size => Some(m),
        Some(Family::Largest(_)) | None => {
            // Announced before the fetch, so smaller sizes asked meanwhile join this one.
            h.page_families.insert(family, Family::Largest(page.size));
            None
        }
        Some(Family::Unshaped) => None,
    };
    let own = Keyed {
        keyed,
        page: Some((family, page.size)),
    };
    let Some(m) = larger else {
        return own.lookup(h, ctx, parts.uri, parts.headers).into();
    };
    // The page of size `m` that holds this request's first item (see `page_subset`).
    let at = page.within(m);
    let Some(uri) = page_subset::with_page(&parts.uri, at.number, m) else {
        return own.lookup(h, ctx, parts.uri, parts.headers).into();
    };
    let n = page.size;
    let larger = match at.inside {
        true => Keyed {
            keyed,
            page: Some((family, m)),
        }
        .lookup(h, ctx, uri, parts.headers.clone()),
        // A straddling range is only cut from a fresh page in hand: never a fetch of its own.
        false => {
            match page_subset::fresh_page(
                h,
                &ctx.settings,
                up,
                &keyed,
                &uri,
                &parts.headers,
                ctx.seen,
            ) {
                Some(resp) => Lookup::Answered(Ok(resp)),
                None => return own.lookup(h, ctx, parts.uri, parts.headers).into(),
            }
        }
    };
    // The larger page is cut to this request's range; if it cannot be had or cut (its fetch
    // marks an unknown shape), the request goes its own way.
    match larger {
        // In hand: cut now (a cached answer's body is already whole, so this never waits).
        Lookup::Answered(Ok(resp)) => {
            match page_subset::narrow(resp, at, n, m).now_or_never().flatten() {
                Some(cut) => Step::Answered(Ok(cut)),
                None => own.lookup(h, ctx, parts.uri, parts.headers).into(),
            }
        }
        Lookup::Answered(Err(_)) => own.lookup(h, ctx, parts.uri, parts.headers).into(),
        // A stale larger page waiting for its refresh: not admitted (as when it was answered
        // at once). The fallback runs only when the page cannot be cut, which marks its family
        // unshaped, so it happens once per family.
        Lookup::Revalidates(go) => Step::Joins(cut_or_own(go, (at, n, m), own, h, ctx, parts)),
        // A wait for the larger page is admitted like a fetch: its fallback may reach the
        // upstream.
        Lookup::Joins(go) | Lookup::Fetch { go, .. } => Step::Upstream(Call::Fetch {
            stale: None,
            go: cut_or_own(go, (at, n, m), own, h, ctx, parts),
        }),
    }
}

/// The larger page's answer once it comes, cut to this request's range (`page_subset::narrow`
/// of page `at`, `n` of `m` items), or this request's own lookup when it cannot be cut.
fn cut_or_own<'a>(
    larger: BoxFuture<'a, Answer>,
    (at, n, m): (page_subset::Within, u32, u32),
    own: Keyed,
    h: CacheHandles<'a>,
    ctx: &'a Ctx<'_>,
    parts: http::request::Parts,
) -> BoxFuture<'a, Answer> {
    Box::pin(async move {
        if let Ok(resp) = larger.await {
            if let Some(cut) = page_subset::narrow(resp, at, n, m).await {
                return Ok(cut);
            }
        }
        own.lookup(h, ctx, parts.uri, parts.headers).finish().await
    })
}

/// One request under one cache key.
struct Keyed {
    /// The identity in the key: the credential's, or its account's sharing identity.
    keyed: Identity,
    /// The page-size family and the size this key asks for (list page 1 only).
    page: Option<(CacheKey, u32)>,
}

impl Keyed {
    fn lookup<'a>(
        self,
        h: CacheHandles<'a>,
        ctx: &'a Ctx<'_>,
        uri: Uri,
        headers: HeaderMap,
    ) -> Lookup<'a> {
        let Keyed { keyed, page } = self;
        let (up, class, who) = (ctx.up, ctx.class, ctx.who);
        let settings = &ctx.settings;
        let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let upstream = &h.upstreams.get(up).settings;
        let key = CacheKey::new(
            upstream,
            &Method::GET,
            pq,
            &keyed,
            &headers,
            &settings.key_headers,
        );
        let seen = ctx.seen;
        let group = task_events::member(ctx.family, class, up, &keyed, uri.path());
        if let Some(Member::Events(g)) = &group {
            let page = task_events::Page {
                key,
                uri: uri.clone(),
                headers: headers.clone(),
            };
            h.task_groups.follow(g, page);
        }
        let spec = |ctx: &Ctx<'_>, key, uri: &Uri, headers: &HeaderMap, page| FetchSpec {
            group: group.clone(),
            ..spec(ctx, key, uri, headers, page)
        };

        let cached = h.cache.get(&key).or_else(|| {
            // Just resolved to a sharing identity: the answer this credential fetched under its
            // own key, while still fresh, is the class's answer too (same access) — kept for it
            // instead of asking again.
            if keyed == who.identity {
                return None;
            }
            let own = CacheKey::new(
                upstream,
                &Method::GET,
                pq,
                &who.identity,
                &headers,
                &settings.key_headers,
            );
            let e = h
                .cache
                .get(&own)
                .filter(|e| e.freshness(Instant::now()) == Freshness::Fresh)?;
            h.cache.insert(key, e.clone(), durability(class));
            Some(e)
        });
        // The class's knobs, as this route's family reads them (`ClassSettings::for_family`).
        let cs = settings.classes.get(class).for_family(ctx.family);
        let cached = cached.map(|e| retime(e, class, &cs));
        if let Some(entry) = &cached {
            // Degradation-aware freshness first: while the upstream struggles, a stale copy
            // answers and this key is refreshed at most once per `degraded_refresh`.
            let now = Instant::now();
            let stale_but_servable = matches!(
                entry.freshness(now),
                Freshness::Revalidate | Freshness::OnlyOnError
            );
            // Asked once (it takes the pace's lock), and only for a stale copy.
            let strain = match stale_but_servable {
                true => strain_of(h, up),
                false => Strain::None,
            };
            if stale_but_servable && class != RouteClass::Token {
                let strained = strain != Strain::None;
                let paced = h.cache.pace().decide(
                    key,
                    up,
                    strained,
                    cs.degraded_refresh,
                    cs.fresh_ttl,
                    now,
                );
                // An open or half-open breaker paces the refresh itself (see `Strain`).
                let paced = match (paced, strain) {
                    (Paced::Hold, Strain::Breaker) => Paced::Due,
                    (p, _) => p,
                };
                match paced {
                    Paced::Hold => {
                        seen.saw(Event::StaleHit);
                        return Lookup::Answered(Ok(respond::cached(
                            entry,
                            "weir; hit; detail=degraded",
                        )));
                    }
                    Paced::Due => {
                        seen.saw(Event::StaleHit);
                        let mut spec = spec(ctx, key, &uri, &headers, page);
                        spec.stale = Some(entry.clone());
                        let p = h.flight();
                        h.coalescer.start_if_idle(key, move || fetch(p, spec));
                        return Lookup::Answered(Ok(respond::cached(
                            entry,
                            "weir; hit; fwd=stale; detail=degraded",
                        )));
                    }
                    Paced::Normal => {}
                }
            }
            match entry.freshness(now) {
                Freshness::Fresh => {
                    seen.saw(Event::FreshHit);
                    // The request's header map is not needed any more: the answer is written
                    // into it (emptied), its memory reused rather than freed and allocated.
                    return Lookup::Answered(Ok(respond::cached_static(
                        entry,
                        respond::FRESH_HIT,
                        headers,
                        now,
                    )));
                }
                Freshness::Revalidate => {
                    let mut spec = spec(ctx, key, &uri, &headers, page);
                    spec.stale = Some(entry.clone());
                    let p = h.flight();
                    // A strained upstream is not waited for (the pace above held or let this
                    // key through; a young key under strain lands here too).
                    let wait = match strain {
                        Strain::None => cs.revalidate_wait,
                        Strain::Paced | Strain::Breaker => Duration::ZERO,
                    };
                    if wait.is_zero() {
                        seen.saw(Event::StaleHit);
                        h.coalescer.start_if_idle(key, move || fetch(p, spec));
                        return Lookup::Answered(Ok(respond::cached(
                            entry,
                            "weir; hit; fwd=stale",
                        )));
                    }
                    let stale = entry.clone();
                    return Lookup::Revalidates(Box::pin(revalidate(
                        h, key, stale, headers, wait, seen, spec,
                    )));
                }
                Freshness::OnlyOnError | Freshness::Expired => {}
            }
        }
        let stale = move || {
            cached
                .clone()
                .filter(|e| e.freshness(Instant::now()) != Freshness::Expired)
        };
        // Only a request that would reach the upstream counts against the client's rate limit
        // (the driver applies it to `Fetch`): one that joins a running flight adds nothing.
        let joins = h.coalescer.is_running(&key);
        let stale_now = stale();
        let mut spec = spec(ctx, key, &uri, &headers, page);
        spec.stale = stale_now.clone();
        let go = Box::pin(async move {
            let p = h.flight();
            let (outcome, role) = h.coalescer.run(key, move || fetch(p, spec)).await;
            if role == Role::Follower {
                seen.saw(Event::Coalesced);
            }
            let fwd = if role == Role::Leader {
                "weir; fwd=miss"
            } else {
                "weir; fwd=miss; collapsed"
            };
            landed(h, key, class, outcome, stale(), &headers, fwd, seen)
        });
        match joins {
            true => Lookup::Joins(go),
            false => Lookup::Fetch {
                stale: stale_now,
                go,
            },
        }
    }
}

/// A stale copy's refresh, waited for up to `wait` (the class's `revalidate_wait`). The flight
/// is detached, so one that outlasts the wait still lands in the cache for the next request;
/// meanwhile the stale copy answers. A refresh that fails within the wait is covered the way a
/// miss's failure is (`rescue`), with the copy in hand.
async fn revalidate(
    h: CacheHandles<'_>,
    key: CacheKey,
    stale: Arc<Stored>,
    headers: HeaderMap,
    wait: Duration,
    seen: &Outcome,
    spec: FetchSpec,
) -> Answer {
    let (p, spec_class) = (h.flight(), spec.class);
    let flight = h.coalescer.run(key, move || fetch(p, spec));
    let Ok((outcome, role)) = tokio::time::timeout(wait, flight).await else {
        seen.saw(Event::StaleHit);
        return Ok(respond::cached(&stale, "weir; hit; fwd=stale"));
    };
    let fwd = match role {
        Role::Leader => "weir; fwd=stale",
        Role::Follower => {
            seen.saw(Event::Coalesced);
            "weir; fwd=stale; collapsed"
        }
    };
    let class = spec_class;
    landed(h, key, class, outcome, Some(stale), &headers, fwd, seen)
}

/// The answer a flight's outcome gives a request that had `stale` (if any) in hand: the fresh
/// answer (`fwd` names how it was had), or the copy when the upstream failed (`rescue`).
#[allow(clippy::too_many_arguments)] // each is one fact of the request; a struct would only rename them
fn landed(
    h: CacheHandles<'_>,
    key: CacheKey,
    class: RouteClass,
    outcome: Option<crate::coalesce::Outcome<Refreshed, Problem>>,
    stale: Option<Arc<Stored>>,
    headers: &HeaderMap,
    fwd: &str,
    seen: &Outcome,
) -> Answer {
    // A copy the upstream revalidated says so (RFC 9211 `fwd-status`).
    let fwd = match &outcome {
        Some(Ok(r)) if r.not_modified => std::borrow::Cow::Owned(format!("{fwd}; fwd-status=304")),
        _ => std::borrow::Cow::Borrowed(fwd),
    };
    let fwd = fwd.as_ref();
    match outcome.map(|o| o.map(|r| r.entry.clone())) {
        Some(Ok(fresh)) if fresh.is_success() && storable(headers, &fresh.headers) => {
            Ok(respond::cached(&fresh, &format!("{fwd}; stored")))
        }
        Some(Ok(fresh)) if fresh.is_success() => Ok(respond::cached(&fresh, fwd)),
        Some(Ok(failed)) => Ok(rescue::after_upstream_error(stale, seen, &failed, fwd)),
        // The answer became a stream: not a failure to cover with an old copy; the caller asks
        // again on its own (`super::stream`).
        Some(Err(problem)) if class == RouteClass::Stream && h.streamed.contains_key(&key) => {
            Err((*problem).clone())
        }
        Some(Err(problem)) => {
            rescue::stale_or(stale, seen, (*problem).clone(), problem.kind.as_str())
        }
        // The fetch task died without an outcome.
        None => rescue::stale_or(
            stale,
            seen,
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemKind::Internal,
                "the upstream fetch ended without an answer",
            ),
            "internal",
        ),
    }
}

/// The identity a request's answer is kept under ([`page_subset::keyed_identity`]), except
/// `GET /user` on `github-api`: it names the token's own scopes and OAuth app, so it is never
/// an account's shared answer (VS Code's copy would give gh's credential VS Code's scopes).
fn keyed_identity(h: CacheHandles<'_>, ctx: &Ctx<'_>, parts: &http::request::Parts) -> Identity {
    keyed_identity_of(h, ctx, &parts.method, parts.uri.path())
}

fn keyed_identity_of(h: CacheHandles<'_>, ctx: &Ctx<'_>, method: &Method, path: &str) -> Identity {
    if h.accounts.is_user_call(ctx.up, method, path) {
        ctx.who.identity
    } else {
        page_subset::keyed_identity(h.accounts, ctx.class, &ctx.who)
    }
}

/// The cache and coalescing key of a request (upstream, method, path and sorted query, the
/// caller's identity (or its account's sharing identity), the `key_headers`).
pub(super) fn key_for(
    h: CacheHandles<'_>,
    ctx: &Ctx<'_>,
    parts: &http::request::Parts,
) -> CacheKey {
    let keyed = keyed_identity(h, ctx, parts);
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    CacheKey::new(
        &h.upstreams.get(ctx.up).settings,
        &parts.method,
        pq,
        &keyed,
        &parts.headers,
        &ctx.settings.key_headers,
    )
}

/// Whether the cache holds an answer for this request: under its `key` ([`key_for`]), or, for a
/// credential just resolved to its account, under the credential's own key (which
/// [`serve_head`] adopts).
pub(super) fn has_copy(
    h: CacheHandles<'_>,
    ctx: &Ctx<'_>,
    parts: &http::request::Parts,
    key: &CacheKey,
) -> bool {
    if h.cache.get(key).is_some() {
        return true;
    }
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let own = CacheKey::new(
        &h.upstreams.get(ctx.up).settings,
        &parts.method,
        pq,
        &ctx.who.identity,
        &parts.headers,
        &ctx.settings.key_headers,
    );
    h.cache.get(&own).is_some()
}

fn spec(
    ctx: &Ctx<'_>,
    key: CacheKey,
    uri: &Uri,
    headers: &HeaderMap,
    page: Option<(CacheKey, u32)>,
) -> FetchSpec {
    let mut headers = headers.clone();
    strip_hop_by_hop(&mut headers);
    // The shared fetch must ask for the full, current representation: one waiter's
    // conditional or range request would otherwise hand a 304/206 to every other waiter.
    for h in [
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
        header::IF_RANGE,
        header::RANGE,
    ] {
        headers.remove(h);
    }
    FetchSpec {
        settings: ctx.settings.clone(),
        up: ctx.up,
        class: ctx.class,
        breaker_family: ctx.family,
        key,
        uri: uri.clone(),
        headers,
        scope: ctx.who.scope(),
        page,
        stale: None,
        group: None,
    }
}

/// What one upstream exchange for a cache key ended with.
pub(super) enum Fetched {
    /// A complete answer, stored when it may be (see [`keep`]); `true` when it is the copy in
    /// hand, revalidated by the upstream's `304`.
    Kept(Arc<Stored>, bool),
    /// A `stream` route's answer that is a true stream (see [`super::shape`]): never stored.
    Stream(Response<Body>),
}

/// The detached fetch task: one logical upstream request (retries and fallback inside the
/// resilience layer), stored in the cache on success. A `stream` answer that turns out to be a
/// true stream cannot be shared by the waiters: the key is marked as streaming and each of
/// them asks on its own ([`super::stream`]).
async fn fetch(f: Flight, spec: FetchSpec) -> Result<Arc<Refreshed>, Arc<Problem>> {
    match exchange(f.handles(), &spec).await {
        Ok(Fetched::Kept(entry, not_modified)) => {
            // A task whose turn moved (`task_events`): its new copy is stored after its events
            // pages are fetched again, and the waiters, whose poll's events may already have
            // been answered, get the copy in hand.
            let mut answer = entry.clone();
            if let Some(Member::Task(group)) = &spec.group {
                let moved = match (&spec.stale, not_modified) {
                    (Some(old), false) if entry.is_success() => {
                        task_events::turn_moved(&old.body, &entry.body)
                    }
                    _ => false,
                };
                if moved && f.task_groups.follows(group) {
                    events_after(&f, &spec, group).await?;
                    answer = spec.stale.clone().unwrap_or(answer);
                }
                put(f.handles(), &spec, &entry);
            }
            Ok(Arc::new(Refreshed {
                entry: answer,
                not_modified,
            }))
        }
        Ok(Fetched::Stream(_dropped)) => {
            f.streamed.insert(spec.key, ());
            Err(Arc::new(Problem::new(
                StatusCode::BAD_GATEWAY,
                ProblemKind::UpstreamProtocol,
                "the upstream answered this request with a stream, which is not shared; ask again",
            )))
        }
        Err(p) => Err(Arc::new(p)),
    }
}

/// Boxed: a task's flight runs its events pages' flights ([`events_after`]).
fn fetch_boxed(
    f: Flight,
    spec: FetchSpec,
) -> BoxFuture<'static, Result<Arc<Refreshed>, Arc<Problem>>> {
    Box::pin(fetch(f, spec))
}

/// Every events page followed for `group`, fetched again by a request sent after the task's
/// answer came (a flight already running may have been sent before it: it is waited out and
/// one more is run), and stored. Fails when one of them does (a 5xx, a 429, no answer): the
/// task's new copy is then not stored, and its waiters get the copy in hand.
async fn events_after(
    f: &Flight,
    task: &FetchSpec,
    group: &task_events::Group,
) -> Result<(), Arc<Problem>> {
    let pages = f.task_groups.pages(group);
    let runs = pages.into_iter().map(|page| async move {
        let spec = FetchSpec {
            settings: task.settings.clone(),
            up: task.up,
            class: RouteClass::View,
            breaker_family: task.breaker_family,
            key: page.key,
            uri: page.uri,
            headers: page.headers,
            scope: task.scope,
            page: None,
            stale: None,
            group: Some(Member::Events(group.clone())),
        };
        let run = |spec: FetchSpec| {
            let (g, mut spec) = (f.handles().flight(), spec);
            spec.stale = f.cache.get(&spec.key);
            f.coalescer.run(spec.key, move || fetch_boxed(g, spec))
        };
        let (mut outcome, role) = run(spec.clone()).await;
        if role == Role::Follower {
            outcome = run(spec).await.0;
        }
        match outcome {
            Some(Ok(r)) if !r.entry.status.is_server_error()
                && r.entry.status != StatusCode::TOO_MANY_REQUESTS =>
            {
                Ok(())
            }
            Some(Err(p)) => Err(p),
            _ => Err(Arc::new(Problem::new(
                StatusCode::BAD_GATEWAY,
                ProblemKind::ServerError,
                "the task's events could not be fetched again with it: the task's last copy answers",
            ))),
        }
    });
    futures_util::future::try_join_all(runs).await.map(|_| ())
}

/// One exchange for a `stream` GET asked with nothing usable in the cache, outside any flight
/// (a stream can go to one caller only): a document is stored like a `view` answer.
pub(super) async fn exchange_once(
    h: CacheHandles<'_>,
    ctx: &Ctx<'_>,
    parts: &http::request::Parts,
    key: CacheKey,
) -> Result<Fetched, Problem> {
    let spec = spec(ctx, key, &parts.uri, &parts.headers, None);
    exchange(h, &spec).await
}

async fn exchange(h: CacheHandles<'_>, spec: &FetchSpec) -> Result<Fetched, Problem> {
    // A stale copy's validators make the refresh conditional: a `304` costs no body (and, at
    // api.github.com, no rate limit).
    let headers = super::conditional::with_validators(&spec.headers, spec.stale.as_deref());
    let req = Replayable {
        method: &Method::GET,
        uri: &spec.uri,
        headers: &headers,
        body: Bytes::new(),
        identity: spec.scope,
    };
    let mut policy = AttemptPolicy::for_request(&Method::GET, true);
    if spec.stale.is_some() {
        policy = policy.with_answer_in_hand();
    }
    let started = Instant::now();
    if spec.class != RouteClass::Token {
        h.cache.pace().refreshing(spec.key, started);
    }
    let outcome = if spec.class == RouteClass::Stream {
        shaped(h, spec, &headers).await
    } else {
        h.upstreams
            .call_buffered(&spec.settings, spec.up, spec.route(), req, policy, None)
            .await
            .map(|a| (Shaped::Document(a.response), a.failed_attempts))
    };
    // Every refresh tells degradation-aware freshness how the upstream is doing: slow (the
    // breaker's absolute `slow_floor`), failing (5xx, 429, no answer, or a retry was needed)
    // or fine again. A stream says nothing: its time is the stream's, not the upstream's.
    let failed = match &outcome {
        Ok((Shaped::Document(r), failed_attempts)) => Some(
            *failed_attempts > 0
                || r.status().is_server_error()
                || r.status() == StatusCode::TOO_MANY_REQUESTS,
        ),
        Ok((Shaped::Stream(_), _)) => None,
        Err(_) => Some(true),
    };
    if let Some(failed) = failed {
        let slow_floor = spec.settings.resilience.breaker.slow_floor;
        h.cache
            .pace()
            .record_refresh(spec.up, started.elapsed(), failed, slow_floor);
    }
    match (outcome?, &spec.stale) {
        ((Shaped::Document(resp), _), Some(copy)) if resp.status() == StatusCode::NOT_MODIFIED => {
            let counters = h.upstreams.get(spec.up).counters.class(spec.class);
            counters.revalidated.fetch_add(1, Relaxed);
            Ok(Fetched::Kept(
                revalidated(h, spec, copy, resp.headers()),
                true,
            ))
        }
        ((Shaped::Document(resp), _), _) => Ok(Fetched::Kept(keep(h, spec, resp), false)),
        ((Shaped::Stream(resp), _), _) => Ok(Fetched::Stream(resp)),
    }
}

/// A `stream` GET sent streaming, then shaped by its answer ([`super::shape`]).
async fn shaped(
    h: CacheHandles<'_>,
    spec: &FetchSpec,
    headers: &HeaderMap,
) -> Result<(Shaped, u32), Problem> {
    let mut req = Request::new(crate::body::empty());
    *req.uri_mut() = spec.uri.clone();
    *req.headers_mut() = headers.clone();
    let a = h
        .upstreams
        .call_streaming(&spec.settings, spec.up, spec.route(), req, spec.scope)
        .await?;
    let cap = spec.settings.limits.max_body_bytes;
    match shape::read(a.response, cap, shape::DOCUMENT_WINDOW).await {
        Ok(s) => Ok((s, a.failed_attempts)),
        Err(e) => Err(Problem::new(
            StatusCode::BAD_GATEWAY,
            ProblemKind::UpstreamProtocol,
            format!("the upstream's answer broke off: {e}"),
        )),
    }
}

/// A complete answer as a cache entry, stored when it may be kept.
fn keep(h: CacheHandles<'_>, spec: &FetchSpec, resp: Response<Bytes>) -> Arc<Stored> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::CONTENT_LENGTH);
    // Never kept, never shared: the answer goes to every waiter and every later hit.
    parts.headers.remove(header::SET_COOKIE);
    let stored = timed(spec, parts.status, parts.headers, body);
    super::announce::observe(
        h.upstreams,
        &spec.settings,
        spec.up,
        spec.class,
        spec.scope,
        &stored,
    );
    // A log never goes back in the cache either: a fresh answer shorter than the copy kept
    // (a lagging replica) keeps the longer copy's bytes under the new times, so that a
    // restart (which loads the kept copy) cannot shrink it.
    let stored = match h.cache.get(&spec.key) {
        Some(old)
            if spec.class == RouteClass::Stream
                && stored.is_success()
                && old.is_success()
                && !crate::cache::extends(&stored, &old) =>
        {
            timed(spec, old.status, old.headers.clone(), old.body.clone())
        }
        _ => stored,
    };
    store(h, spec, &stored);
    stored
}

/// A complete answer as an entry of `spec`'s class, stored now.
fn timed(spec: &FetchSpec, status: StatusCode, headers: HeaderMap, body: Bytes) -> Arc<Stored> {
    let now = Instant::now();
    let cs = spec.settings.classes.get(spec.class);
    let (fresh, swr, sie) = lifetimes(spec.class, &cs.for_family(spec.breaker_family), &body);
    Arc::new(Stored {
        status,
        headers,
        body,
        stored_at: now,
        fresh_until: now + fresh,
        revalidate_until: now + fresh + swr,
        stale_if_error_until: now + fresh + swr.max(sie),
    })
}

/// The copy in hand, revalidated by the upstream's `304`: fresh again from now, with the
/// header fields the `304` carries in place of the stored ones (RFC 9111 §4.3.4, §3.2: all
/// but `Content-Length`; a `Set-Cookie` is never kept), and stored like a new answer.
fn revalidated(
    h: CacheHandles<'_>,
    spec: &FetchSpec,
    copy: &Stored,
    not_modified: &HeaderMap,
) -> Arc<Stored> {
    let mut update = not_modified.clone();
    strip_hop_by_hop(&mut update);
    for n in [header::CONTENT_LENGTH, header::SET_COOKIE] {
        update.remove(n);
    }
    let mut headers = copy.headers.clone();
    for name in update.keys() {
        headers.remove(name);
    }
    for (name, value) in &update {
        headers.append(name.clone(), value.clone());
    }
    let stored = timed(spec, copy.status, headers, copy.body.clone());
    store(h, spec, &stored);
    stored
}

/// Stores `stored` under `spec`'s key when it may be kept; a task's copy waits for its
/// events pages ([`fetch`], [`task_events`]).
fn store(h: CacheHandles<'_>, spec: &FetchSpec, stored: &Arc<Stored>) {
    if !matches!(spec.group, Some(Member::Task(_))) {
        put(h, spec, stored);
    }
}

fn put(h: CacheHandles<'_>, spec: &FetchSpec, stored: &Arc<Stored>) {
    if stored.is_success() && storable(&spec.headers, &stored.headers) {
        // A learned host's answers are kept like a configured upstream's: keys hash the
        // upstream's name (`learned:HOST`), so a copy read back after a restart answers for
        // the same host once a token answer names it again.
        h.cache
            .insert(spec.key, stored.clone(), durability(spec.class));
        // A document again: the key's next requests may share it.
        h.streamed.invalidate(&spec.key);
        // Only a page 1 of the known shape can answer the smaller sizes of its family.
        if let Some((family, _)) = spec.page {
            if !page_subset::has_known_shape(&stored.body) {
                h.page_families.insert(family, Family::Unshaped);
            }
        }
    }
}

/// A stored list/view answer under the TTLs in force now, which may have changed since it was
/// stored: its windows are measured again from when it was stored. Tokens keep their own
/// lifetimes (they come from the token itself), and their `refresh_in` loses the copy's age.
fn retime(e: Arc<Stored>, class: RouteClass, s: &ClassSettings) -> Arc<Stored> {
    if class == RouteClass::Token {
        return super::token_age::aged(e, Instant::now());
    }
    let fresh_until = e.stored_at + s.fresh_ttl;
    let revalidate_until = fresh_until + s.stale_while_revalidate;
    let stale_if_error_until = fresh_until + s.stale_while_revalidate.max(s.stale_if_error);
    if (fresh_until, revalidate_until, stale_if_error_until)
        == (e.fresh_until, e.revalidate_until, e.stale_if_error_until)
    {
        return e;
    }
    Arc::new(Stored {
        status: e.status,
        headers: e.headers.clone(),
        body: e.body.clone(),
        stored_at: e.stored_at,
        fresh_until,
        revalidate_until,
        stale_if_error_until,
    })
}

/// List and view answers and `stream` documents (a session's log) may be kept on disk
/// (sealed); a token never leaves memory. A log costs a write at each refresh, but a restart
/// during an outage must still answer `gh … --follow`, which ends at the first failed poll,
/// with the log it had: never a shorter one.
fn durability(class: RouteClass) -> Durability {
    match class {
        RouteClass::List | RouteClass::View | RouteClass::Stream => Durability::Persist,
        _ => Durability::MemoryOnly,
    }
}

/// A token is never kept longer than this, whatever it says (Copilot tokens live ~30 min).
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// (fresh, stale-while-revalidate, stale-if-error) for a response of `class`.
pub(super) fn lifetimes(
    class: RouteClass,
    s: &ClassSettings,
    body: &[u8],
) -> (Duration, Duration, Duration) {
    if class != RouteClass::Token {
        return (s.fresh_ttl, s.stale_while_revalidate, s.stale_if_error);
    }
    // A Copilot token says when to refresh (`refresh_in`, seconds) and when it dies
    // (`expires_at`, unix seconds). Fresh until the earlier of the two minus the margin; usable
    // on upstream failure until it expires.
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let until_expiry = v
        .get("expires_at")
        .and_then(|e| e.as_u64())
        .map(|e| Duration::from_secs(e.saturating_sub(now)));
    let refresh = v
        .get("refresh_in")
        .and_then(|r| r.as_u64())
        .map(Duration::from_secs);
    // The upstream's numbers are input: bounded, so `Instant + d` cannot overflow.
    let until_expiry = until_expiry.map(|e| e.min(MAX_TOKEN_LIFETIME));
    let due = match (refresh, until_expiry) {
        (Some(r), Some(e)) => r.min(e),
        (Some(r), None) => r,
        (None, Some(e)) => e,
        (None, None) => s.fresh_ttl,
    }
    .min(MAX_TOKEN_LIFETIME);
    let fresh = due.saturating_sub(s.token_margin);
    let usable = until_expiry
        .map(|e| e.saturating_sub(s.token_margin))
        .unwrap_or(fresh);
    (fresh, Duration::ZERO, usable.saturating_sub(fresh))
}

/// Whether an answer may be kept: per identity always (the key is the credential's hash), but
/// for an anonymous request (one identity shared by every anonymous caller) not when the
/// upstream said `private` or `no-store`.
fn storable(request: &HeaderMap, response: &HeaderMap) -> bool {
    if crate::identity::has_credential(request) {
        return true;
    }
    !response
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.split('=').next().unwrap_or("").trim())
        .any(|d| d.eq_ignore_ascii_case("private") || d.eq_ignore_ascii_case("no-store"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lifetimes_follow_refresh_in() {
        let s = ClassSettings::defaults(RouteClass::Token);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let body = format!(
            r#"{{"token":"t","expires_at":{},"refresh_in":1500}}"#,
            now + 1800
        );
        let (fresh, swr, sie) = lifetimes(RouteClass::Token, &s, body.as_bytes());
        // Fresh until 5 minutes before `refresh_in` (VS Code's own threshold: docs/hosts.md).
        assert_eq!(fresh, Duration::from_secs(1200));
        assert_eq!(swr, Duration::ZERO);
        // Usable on error until 5 minutes before expiry (±1 s for the clock tick).
        assert!((299..=300).contains(&sie.as_secs()), "{sie:?}");
    }

    /// VS Code (`copilotTokenManager.ts`) fetches a new token, and the user answer beside it,
    /// when `now + refresh_in + 60 < now + 5 min`. No copy Weir serves as fresh may look due
    /// to it, or it fetches again on every use (#29, item 8).
    #[test]
    fn no_fresh_token_copy_looks_due_to_vscode() {
        let s = ClassSettings::defaults(RouteClass::Token);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        for refresh_in in [600u64, 1500, 3000] {
            let body = format!(
                r#"{{"token":"t","expires_at":{},"refresh_in":{refresh_in}}}"#,
                now + refresh_in + 300
            );
            let (fresh, _, _) = lifetimes(RouteClass::Token, &s, body.as_bytes());
            for age in 0..fresh.as_secs() {
                let served = refresh_in - age;
                assert!(
                    served + 60 >= 300,
                    "refresh_in {refresh_in}: a copy {age} s old says {served}, due to VS Code"
                );
            }
        }
    }

    #[test]
    fn absurd_token_lifetimes_are_bounded() {
        let s = ClassSettings::defaults(RouteClass::Token);
        let body = format!(r#"{{"expires_at":{m},"refresh_in":{m}}}"#, m = u64::MAX);
        let (fresh, swr, sie) = lifetimes(RouteClass::Token, &s, body.as_bytes());
        assert!(fresh + swr + sie <= MAX_TOKEN_LIFETIME);
        let _ = Instant::now() + fresh + swr.max(sie);
    }
}
