//! The `create` class: each intended create happens exactly once.
//!
//! 1. Duplicates are suppressed: same identity + path + body (or the same `Idempotency-Key`)
//!    as a create in flight joins it; as one that succeeded within the window gets its answer.
//! 2. One attempt goes upstream (creates are not idempotent: never retried in the request;
//!    the fallback, if any, gets one try).
//! 3. If the upstream could not take it (breaker open, cooldown, retryable failure), the create
//!    is committed to SQLite — its credential to the keychain — before Weir answers. The
//!    answer (`[queue] answer`) is `201` with a job object in the upstream's shape
//!    (`status: "queued"`, provisional `job_id`/`session_id` that [`super::provisional`]
//!    answers for), or `202 Accepted`; both carry `Weir-Queued: {id}` and
//!    `Location: /_weir/api/queue/{id}`. Fatal and auth answers pass through.
//!    In cache-only mode and offline there is no attempt: the create is queued at once, and
//!    the replay worker holds it until the mode ends.
//! 4. The fallback policy ([`super::policy`]) can replace step 3: fail with a problem naming
//!    the rule, or offer the create to the local agent; and can skip the attempt altogether
//!    while a situation its rule names holds.

use super::context::Ctx;
use super::headers::strip_hop_by_hop;
use super::identity::Caller;
use super::policy::CreatePlan;
use super::state::Creates;
use crate::body::Body;
use crate::cache::{CacheKey, Stored};
use crate::coalesce::Role;
use crate::config::{QueueAnswer, Settings, UpstreamIndex, UpstreamSettings};
use crate::handoff::HandoffRequest;
use crate::mode::Hold;
use crate::policy::Action;
use crate::problem::{Problem, ProblemKind};
use crate::queue::enqueue::Create;
use crate::queue::provisional;
use crate::upstream::{AttemptPolicy, Replayable};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::sync::Arc;
use tokio::time::Instant;
use weir_resilience::{classify_response, Kind};

/// What the create path needs, owned by its detached task (each a shared handle; creates are
/// rare, so building one per create costs little): the dedupe state, the upstreams, the queue
/// and the hand-offs it rescues to, the accounts, the bus, the body budget and Weir's base URL
/// (named in queued answers).
#[derive(Clone)]
pub(super) struct CreateHandles {
    pub creates: Creates,
    pub upstreams: Arc<crate::upstream::Upstreams>,
    pub queue: Arc<crate::queue::QueueState>,
    pub handoffs: Arc<crate::handoff::Handoffs>,
    pub accounts: Arc<crate::accounts::Accounts>,
    pub bus: crate::events::Bus,
    pub body_budget: Arc<crate::body_budget::BodyBudget>,
    pub base_url: String,
}

pub(super) async fn serve(
    h: CreateHandles,
    ctx: &Ctx<'_>,
    req: Request<Incoming>,
    plan: CreatePlan,
) -> Result<Response<Body>, Problem> {
    let (up, who) = (ctx.up, ctx.who);
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let limit = ctx.settings.limits.max_body_bytes;
    let (body, _held) =
        crate::body_budget::collect(&h.body_budget, body, limit, "a create body").await?;
    let upstream = &h.upstreams.get(up).settings;
    let key = dedupe_key(upstream, &who, &parts.uri, &parts.headers, &body);
    let v1_key = v1_dedupe_key(up, &who, &parts.uri, &parts.headers, &body);
    if let Some(first) = h.creates.recent.get(&key) {
        return Ok(respond(&first, "duplicate-of-recent"));
    }
    let flights = h.creates.flights.clone();
    let task = CreateTask {
        h,
        settings: ctx.settings.clone(),
        up,
        route: ctx.route(),
        key: key.clone(),
        v1_key,
        identity: who.identity.hex(),
        scope: who.scope(),
        uri: parts.uri,
        headers: parts.headers,
        body,
        hold: ctx.hold,
        plan,
    };
    let (outcome, role) = flights
        .run(
            CacheKey::from_bytes(*blake3::hash(key.as_bytes()).as_bytes()),
            move || task.run(),
        )
        .await;
    let how = if role == Role::Leader {
        "first"
    } else {
        "duplicate-in-flight"
    };
    match outcome {
        Some(Ok(stored)) => Ok(respond(&stored, how)),
        Some(Err(p)) => Err((*p).clone()),
        None => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ProblemKind::Internal,
            "the create task ended without an answer",
        )),
    }
}

/// The first bytes hashed into a create's dedupe key: the layout's version. v2 names the
/// upstream; v1 (unmarked) began with the upstream's position as a little-endian u64, and these
/// eight bytes (`weir.cre`) read that way are far past any position, so no v1 input equals a
/// v2 input.
const DEDUPE_VERSION: &[u8] = b"weir.create/2\0";

/// The key two requests share when they are the same intended create: to the same upstream,
/// by its name (a position changes when `[[upstream]]` tables are reordered or a learned host
/// takes another slot, and queued items keep their key across restarts: issue #21), from the
/// same identity, with the same `Idempotency-Key` or else the same path, query and body.
///
/// Items queued before the upgrade to v2 keep their v1 key, which no request makes any more;
/// [`v1_dedupe_key`] is how the duplicate check still finds them.
fn dedupe_key(
    upstream: &UpstreamSettings,
    who: &Caller,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> String {
    let mut h = blake3::Hasher::new();
    h.update(DEDUPE_VERSION);
    h.update(&(upstream.name.len() as u64).to_le_bytes());
    h.update(upstream.name.as_bytes());
    dedupe_key_rest(h, who, uri, headers, body)
}

/// The key a build before v2 (before commit 2bba433) gave the same create: the upstream's
/// position instead of the version tag and its name, then the same bytes as [`dedupe_key`].
///
/// Only for the duplicate check ([`CreateTask::find_waiting`]): a create queued (or offered)
/// by such a build, still waiting when the new build starts, is found under this key, so the
/// same create sent again after the upgrade joins it instead of being queued a second time.
/// Nothing is stored under it any more. Such a row lives until it is sent, cancelled or
/// expired (`queue.max_age`, a day by default; an offer until it is answered or expires, and
/// a declined one goes back to the queue with its key), so the check stays while an upgrade
/// from those builds is possible; it costs one indexed lookup per create that is not a
/// duplicate. The position is today's: if the `[[upstream]]` tables were reordered across
/// the upgrade, the v1 key differs and the resend is not recognised (the #21 hazard itself).
fn v1_dedupe_key(
    up: UpstreamIndex,
    who: &Caller,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&(up.index() as u64).to_le_bytes());
    dedupe_key_rest(h, who, uri, headers, body)
}

/// What v1 and v2 keys hash after the upstream: the identity, then the `Idempotency-Key` or
/// else the length-prefixed path and query and the body.
fn dedupe_key_rest(
    mut h: blake3::Hasher,
    who: &Caller,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> String {
    h.update(who.identity.as_bytes());
    match headers.get("idempotency-key") {
        Some(k) => {
            h.update(b"idempotency-key\0");
            h.update(k.as_bytes());
        }
        None => {
            let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            h.update(&(pq.len() as u64).to_le_bytes());
            h.update(pq.as_bytes());
            h.update(body);
        }
    }
    h.finalize().to_hex().to_string()
}

fn respond(s: &Stored, how: &str) -> Response<Body> {
    let mut r = s.to_response();
    if let Ok(v) = HeaderValue::from_str(how) {
        r.headers_mut().insert("weir-create", v);
    }
    r
}

struct CreateTask {
    h: CreateHandles,
    /// The settings of the request that leads the create.
    settings: Arc<Settings>,
    up: UpstreamIndex,
    /// The request's route (class `create`, its breaker family).
    route: crate::config::Route,
    key: String,
    /// The same create's key in a build before v2 ([`v1_dedupe_key`]): looked up, never stored.
    v1_key: String,
    identity: String,
    scope: Option<crate::identity::Identity>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// Set in cache-only mode and offline: queue without an attempt.
    hold: Option<Hold>,
    /// What the fallback policy says to do when the create cannot reach the upstream.
    plan: CreatePlan,
}

impl CreateTask {
    /// One attempt (no retry: a create is not idempotent); on a failure the upstream may
    /// recover from, rescue by the durable queue.
    async fn run(self) -> Result<Arc<Stored>, Arc<Problem>> {
        let p = &self.h;
        if let Some(item) = self.find_waiting().await {
            let id = item.id;
            // Still offered to the local agent: say so, not "queued" (nothing is sent until
            // the offer is answered).
            if let Ok(v) = p.handoffs.get(id).await {
                if v.state == weir_store::State::Offered {
                    let reason = "an identical create is already offered to your local agent";
                    let rule = v.rule.clone().unwrap_or_default();
                    return Ok(offered(
                        p,
                        &v.id.to_string(),
                        &v.location,
                        reason,
                        &rule,
                        &rule,
                    ));
                }
            }
            // The same provisional job as the first answer: a client that asks again
            // follows the one create.
            return Ok(queued(
                p,
                &self.settings,
                &item,
                match item.state.is_live() {
                    true => "an identical create is already queued",
                    false => "an identical create was sent from the queue moments ago",
                },
            ));
        }
        let (reason, in_doubt) = match self.hold {
            Some(hold) => (held_reason(hold), false),
            None if self.plan.skip_attempt => (self.plan.skip_reason(), false),
            None => match self.attempt().await? {
                Attempt::Answered(stored) => return Ok(stored),
                Attempt::Queue { reason, in_doubt } => (reason, in_doubt),
            },
        };
        // Every agent create's body is JSON. One that is not would be refused by the upstream
        // when replayed, long after the client was told it was kept: refused now instead.
        // (In doubt it may have reached the upstream already, which answers for it.)
        if !in_doubt {
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&self.body) {
                return Err(Arc::new(Problem::new(
                    StatusCode::BAD_REQUEST,
                    ProblemKind::BadRequest,
                    format!("this create could not reach the upstream ({reason}), and Weir keeps only creates whose body is JSON, as every agents API takes: the body is not JSON ({e}). Send it again with a JSON body"),
                )));
            }
        }
        // Rescue, as the policy says: fail, offer to the local agent, or the durable queue.
        let name = &p.upstreams.get(self.up).settings.name;
        let mut reason = reason;
        let mut label = None;
        match self.plan.decision.action {
            Action::Fail => {
                let failed = self.plan.fail(&reason, name);
                return Err(Arc::new(match in_doubt {
                    true => failed.maybe_created(),
                    false => failed,
                }));
            }
            // A create that may already exist upstream is never handed to a second agent: the
            // queue looks it up before sending it again.
            Action::Local if in_doubt => {
                reason = format!("{reason}; policy rule {} chose a local agent, but the upstream may have received this create, so Weir queued it (the queue checks before sending again)", self.plan.decision.rule);
                label = Some(format!("{}->queue", self.plan.decision.header()));
            }
            // Only the developer's own creates reach the local agent (it runs as them).
            Action::Local => match self.developers_own().await {
                Err(why) => {
                    reason = format!("{reason}; policy rule {} chose a local agent, but this create is not the developer's own ({why}), so Weir queued it instead", self.plan.decision.rule);
                    label = Some(format!("{}->queue", self.plan.decision.header()));
                }
                Ok(()) => match self.offer(&reason).await {
                    Ok(stored) => return Ok(stored),
                    Err(e) => {
                        reason = format!("{reason}; policy rule {} chose a local agent, but the hand-off failed ({e}), so Weir queued it instead", self.plan.decision.rule);
                        label = Some(format!("{}->queue", self.plan.decision.header()));
                    }
                },
            },
            _ => {}
        }
        let create = Create {
            upstream: &p.upstreams.get(self.up).settings.name,
            key: &self.key,
            identity: self.identity.clone(),
            uri: &self.uri,
            headers: &self.headers,
            body: &self.body,
        };
        let caps = &self.settings.queue.caps;
        match p
            .queue
            .enqueue(&p.bus, create, &reason, in_doubt, caps)
            .await
        {
            Ok(item) => {
                let a = queued(p, &self.settings, &item, &reason);
                Ok(match label.and_then(|l| HeaderValue::from_str(&l).ok()) {
                    Some(v) => {
                        let mut headers = a.headers.clone();
                        headers.insert(super::policy::HEADER, v);
                        stored(a.status, headers, a.body.clone())
                    }
                    None => a,
                })
            }
            // No queue to look it up later: the client must know it may exist already.
            Err(problem) if in_doubt => Err(Arc::new(problem.maybe_created())),
            Err(problem) => Err(Arc::new(problem)),
        }
    }

    /// The item this create duplicates — live, or sent within the dedupe window — stored
    /// under its key, or (live only) under its v1 key by a build before the upgrade.
    async fn find_waiting(&self) -> Option<weir_store::Item> {
        let window = self.settings.queue.dedupe_window;
        match self.h.queue.find_joinable(&self.key, window).await {
            Some(item) => Some(item),
            None => self.h.queue.find_live(&self.v1_key).await,
        }
    }

    /// The one upstream attempt: an answer for the client, or why the create goes to the
    /// queue.
    async fn attempt(&self) -> Result<Attempt, Arc<Problem>> {
        let p = &self.h;
        let req = Replayable {
            method: &Method::POST,
            uri: &self.uri,
            headers: &self.headers,
            body: self.body.clone(),
            identity: self.scope,
        };
        let mut policy = AttemptPolicy::for_request(&Method::POST, true);
        // Only the built-in `fallback` action lets the create go to the fallback origin.
        policy.fallback = self.plan.fallback_origin;
        let attempt =
            p.upstreams
                .attempt_buffered(&self.settings, self.up, self.route, req, policy, None);
        Ok(match attempt.await {
            Ok(a) => {
                let (mut parts, body) = a.response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                parts.headers.remove(header::CONTENT_LENGTH);
                let kind = classify_response(parts.status, &parts.headers, &body);
                let stored = stored(parts.status, parts.headers, body);
                if kind.is_ok() {
                    p.creates.recent.insert(self.key.clone(), stored.clone());
                    return Ok(Attempt::Answered(stored));
                }
                if !(kind.is_retryable() || kind == Kind::RateLimited) {
                    // Fatal, auth, policy: the client must see the upstream's own answer.
                    return Ok(Attempt::Answered(stored));
                }
                // 429/503/529 are refusals: nothing was created. A 500/502/504 may come from a
                // gateway after the job was reserved, so that create is looked up first.
                let doubt = matches!(stored.status.as_u16(), 500 | 502 | 504);
                Attempt::Queue {
                    reason: format!("the upstream answered {} ({kind})", stored.status),
                    in_doubt: doubt,
                }
            }
            Err(e) if e.kind().is_queueable() => Attempt::Queue {
                reason: e.to_string(),
                in_doubt: e.maybe_sent(),
            },
            Err(e) => return Err(Arc::new(e.into())),
        })
    }
}

impl CreateTask {
    /// Whether this create's credential is the account of the token stored in Weir. Without
    /// a local agent there is nothing to guard (the offer says it is not configured).
    async fn developers_own(&self) -> Result<(), crate::handoff::NotOwn> {
        let p = &self.h;
        if self.settings.local_agent.is_none() {
            return Ok(());
        }
        // The stored token lives only in a persistent store (the token API refuses any other).
        let secrets = p
            .queue
            .open()
            .map(|q| &q.secrets)
            .filter(|s| s.kind().is_persistent());
        crate::handoff::owner::check(&p.accounts, &p.upstreams, secrets, &self.headers).await
    }

    /// Offers the create to the local agent (policy `local`): 202 with the offer's location.
    async fn offer(&self, reason: &str) -> Result<Arc<Stored>, crate::handoff::HandoffError> {
        let p = &self.h;
        let json: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        let text = |k: &str| json.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let req = HandoffRequest {
            upstream: p.upstreams.get(self.up).settings.name.clone(),
            repo: crate::policy::repo_of(self.uri.path()).unwrap_or_default(),
            problem_statement: text("problem_statement").unwrap_or_default(),
            base_branch: text("base_ref").or_else(|| text("base_branch")),
            rule: self.plan.decision.header(),
            // The request itself: a declined or expired offer goes back to the queue.
            create: Some(crate::handoff::CreateRequest {
                uri: self.uri.clone(),
                headers: self.headers.clone(),
                body: self.body.clone(),
                dedupe_key: self.key.clone(),
                identity: self.identity.clone(),
            }),
        };
        let offer = p.handoffs.offer_with(&self.settings, req).await?;
        let rule = self.plan.decision.header();
        Ok(offered(
            p,
            &offer.id,
            &offer.location,
            reason,
            &rule,
            &self.plan.decision.rule.to_string(),
        ))
    }
}

/// `202` for a create offered to the local agent: the offer's location, nothing run yet.
fn offered(
    p: &CreateHandles,
    id: &str,
    location: &str,
    reason: &str,
    header: &str,
    rule: &str,
) -> Arc<Stored> {
    let body = serde_json::json!({
        "status": "offered",
        "id": id,
        "location": location,
        "reason": reason,
        "rule": header,
        "detail": format!("The upstream could not take this create and policy rule {rule} hands it to your local agent. Nothing runs until you confirm the offer (tray, dashboard, or POST {}{location}/confirm).", p.base_url),
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, v);
    }
    stored(StatusCode::ACCEPTED, headers, Bytes::from(body.to_string()))
}

/// What the one attempt came to.
enum Attempt {
    /// The upstream's answer goes to the client (success, or a refusal it must see).
    Answered(Arc<Stored>),
    /// The upstream could not take it now.
    Queue { reason: String, in_doubt: bool },
}

/// Why a create was queued without an attempt.
fn held_reason(hold: Hold) -> String {
    match hold {
        Hold::CacheOnly => "Weir is in cache-only mode and sends nothing upstream; this create is sent once when you switch back (`weir mode automatic`)".into(),
        Hold::Offline => "Weir is offline (every managed upstream is unreachable); this create is sent once when a probe finds the network back".into(),
        // Never a create's hold (only lists are kept in the cache by policy).
        Hold::Policy => "a fallback policy rule held this create".into(),
    }
}

fn stored(status: StatusCode, headers: HeaderMap, body: Bytes) -> Arc<Stored> {
    let now = Instant::now();
    Arc::new(Stored {
        status,
        headers,
        body,
        stored_at: now,
        fresh_until: now,
        revalidate_until: now,
        stale_if_error_until: now,
    })
}

/// The answer for a create Weir queued, as `[queue] answer` says: the job object in the
/// upstream's shape (default), or `202` with the queue entry.
fn queued(
    p: &CreateHandles,
    settings: &Settings,
    item: &weir_store::Item,
    reason: &str,
) -> Arc<Stored> {
    // The job object is the jobs API's shape (`POST /agents/swe/v1/jobs/{o}/{r}`), known from
    // gh's and VS Code's types; the task object is the Task API's (`POST
    // {prefix}/repos/{o}/{r}/tasks`), known from `@vscode/copilot-api` 0.5.2's spec types and
    // VS Code's `TaskApiHttpClient`, which takes a `202` as "an empty response" and fails the
    // create. A create on any other route keeps the plain 202 rather than a guessed shape.
    let path = item.path_and_query.split('?').next().unwrap_or("");
    let is_task = provisional::is_task_create(path);
    if settings.queue.answer == QueueAnswer::Accepted
        || !(is_task || item.path_and_query.starts_with("/agents/swe/v1/jobs/"))
    {
        return accepted(p, item.id, reason);
    }
    let owner = crate::identity::Identity::from_hex(&item.identity)
        .and_then(|id| p.accounts.record(&id))
        .map(|r| provisional::Owner {
            user_id: r.account_id,
            login: r.login.clone(),
        });
    let made = if is_task {
        provisional::task(item, owner.as_ref())
    } else {
        provisional::job(item, owner.as_ref())
    };
    let Some(mut job) = made else {
        // Queued before provisional ids existed: only the queue entry can be named.
        return accepted(p, item.id, reason);
    };
    job["weir"]["reason"] = serde_json::json!(reason);
    job["weir"]["detail"] = serde_json::json!(format!(
        "Weir stored this create durably and will send it once when the upstream is healthy again. The ids in this answer are Weir's until then; Weir answers for them, and after the create is sent it serves the real objects under them. Follow it with GET {}/_weir/api/queue/{}, or `weir queue show {}`.",
        p.base_url, item.id, item.id
    ));
    let location = format!("/_weir/api/queue/{}", item.id);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(QUEUED_HEADER, HeaderValue::from(item.id));
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, v);
    }
    // 201, as the jobs API answers a job it created (gh's CreateJob takes 200 or 201, VS Code
    // any 2xx with `job_id` and `session_id`) and the Task API a task (VS Code: 200 or 201
    // with a JSON body that has `id`).
    stored(StatusCode::CREATED, headers, Bytes::from(job.to_string()))
}

/// Says Weir queued the create (the queue id), whatever the answer's shape.
pub(crate) const QUEUED_HEADER: &str = "weir-queued";

fn accepted(p: &CreateHandles, id: i64, reason: &str) -> Arc<Stored> {
    let location = format!("/_weir/api/queue/{id}");
    let body = serde_json::json!({
        "status": "queued",
        "id": id,
        "location": location,
        "reason": reason,
        "detail": format!("Weir stored this create durably and will send it once when the upstream is healthy again. Follow it with GET {}{location}, or `weir queue show {id}`.", p.base_url),
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(QUEUED_HEADER, HeaderValue::from(id));
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, v);
    }
    stored(StatusCode::ACCEPTED, headers, Bytes::from(body.to_string()))
}
