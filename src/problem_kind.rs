//! The kinds of problem Weir answers with: one enum, so queueing, retrying and the explanation
//! pages are decided by the compiler, never by matching strings.

use serde::Serialize;
use weir_resilience::Kind;

/// Every kind of problem+json document Weir produces. Serialised as its snake_case name (the
/// `kind` member and the last segment of the `type` URI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    HeaderTooLarge,
    BodyTooLarge,
    BadRequest,
    ForbiddenHost,
    ForbiddenOrigin,
    ForbiddenTarget,
    Unauthorized,
    NotFound,
    Connection,
    Timeout,
    ServerError,
    Overloaded,
    RateLimited,
    BreakerOpen,
    UpstreamProtocol,
    Auth,
    PolicyBlocked,
    Fatal,
    TooManyConnections,
    Paused,
    QueueUnavailable,
    QueueRefused,
    CacheOnlyMiss,
    OfflineMiss,
    PolicyFailed,
    PolicyCacheMiss,
    NoToken,
    Internal,
    ForbiddenClient,
    AdminOnly,
    TlsRequired,
    HandoffUnavailable,
    HandoffAnswered,
    BadProxyHeader,
}

/// The explanation page of a problem kind (`/_weir/problems/<kind>`).
pub struct Page {
    pub title: &'static str,
    pub cause: &'static str,
    pub fix: &'static str,
}

impl ProblemKind {
    pub const ALL: [ProblemKind; 34] = [
        ProblemKind::HeaderTooLarge,
        ProblemKind::BodyTooLarge,
        ProblemKind::BadRequest,
        ProblemKind::ForbiddenHost,
        ProblemKind::ForbiddenOrigin,
        ProblemKind::ForbiddenTarget,
        ProblemKind::Unauthorized,
        ProblemKind::NotFound,
        ProblemKind::Connection,
        ProblemKind::Timeout,
        ProblemKind::ServerError,
        ProblemKind::Overloaded,
        ProblemKind::RateLimited,
        ProblemKind::BreakerOpen,
        ProblemKind::UpstreamProtocol,
        ProblemKind::Auth,
        ProblemKind::PolicyBlocked,
        ProblemKind::Fatal,
        ProblemKind::TooManyConnections,
        ProblemKind::Paused,
        ProblemKind::QueueUnavailable,
        ProblemKind::QueueRefused,
        ProblemKind::CacheOnlyMiss,
        ProblemKind::OfflineMiss,
        ProblemKind::PolicyFailed,
        ProblemKind::PolicyCacheMiss,
        ProblemKind::NoToken,
        ProblemKind::Internal,
        ProblemKind::ForbiddenClient,
        ProblemKind::AdminOnly,
        ProblemKind::TlsRequired,
        ProblemKind::HandoffUnavailable,
        ProblemKind::HandoffAnswered,
        ProblemKind::BadProxyHeader,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ProblemKind::HeaderTooLarge => "header_too_large",
            ProblemKind::BodyTooLarge => "body_too_large",
            ProblemKind::BadRequest => "bad_request",
            ProblemKind::ForbiddenHost => "forbidden_host",
            ProblemKind::ForbiddenOrigin => "forbidden_origin",
            ProblemKind::ForbiddenTarget => "forbidden_target",
            ProblemKind::Unauthorized => "unauthorized",
            ProblemKind::NotFound => "not_found",
            ProblemKind::Connection => "connection",
            ProblemKind::Timeout => "timeout",
            ProblemKind::ServerError => "server_error",
            ProblemKind::Overloaded => "overloaded",
            ProblemKind::RateLimited => "rate_limited",
            ProblemKind::BreakerOpen => "breaker_open",
            ProblemKind::UpstreamProtocol => "upstream_protocol",
            ProblemKind::Auth => "auth",
            ProblemKind::PolicyBlocked => "policy_blocked",
            ProblemKind::Fatal => "fatal",
            ProblemKind::TooManyConnections => "too_many_connections",
            ProblemKind::Paused => "paused",
            ProblemKind::QueueUnavailable => "queue_unavailable",
            ProblemKind::QueueRefused => "queue_refused",
            ProblemKind::CacheOnlyMiss => "cache_only_miss",
            ProblemKind::OfflineMiss => "offline_miss",
            ProblemKind::PolicyFailed => "policy_failed",
            ProblemKind::PolicyCacheMiss => "policy_cache_miss",
            ProblemKind::NoToken => "no_token",
            ProblemKind::Internal => "internal",
            ProblemKind::ForbiddenClient => "forbidden_client",
            ProblemKind::AdminOnly => "admin_only",
            ProblemKind::TlsRequired => "tls_required",
            ProblemKind::HandoffUnavailable => "handoff_unavailable",
            ProblemKind::HandoffAnswered => "handoff_answered",
            ProblemKind::BadProxyHeader => "bad_proxy_header",
        }
    }

    pub fn parse(s: &str) -> Option<ProblemKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// After this kind of failure a create is committed to the queue (202) instead of failed:
    /// the upstream certainly could not take it now, and may later.
    pub const fn is_queueable(self) -> bool {
        matches!(
            self,
            ProblemKind::BreakerOpen
                | ProblemKind::RateLimited
                | ProblemKind::Overloaded
                | ProblemKind::Connection
                | ProblemKind::Timeout
        )
    }

    /// A client may usefully send the same request again later.
    pub const fn is_retryable(self) -> bool {
        self.is_queueable()
            || matches!(
                self,
                ProblemKind::ServerError | ProblemKind::TooManyConnections
            )
    }

    /// The problem kind for an upstream outcome of `kind`.
    pub const fn from_outcome(kind: Kind) -> ProblemKind {
        match kind {
            Kind::Ok | Kind::Fatal => ProblemKind::Fatal,
            Kind::Auth => ProblemKind::Auth,
            Kind::PolicyBlocked => ProblemKind::PolicyBlocked,
            Kind::RateLimited => ProblemKind::RateLimited,
            Kind::Overloaded => ProblemKind::Overloaded,
            Kind::ServerError => ProblemKind::ServerError,
            Kind::Timeout(_) => ProblemKind::Timeout,
            Kind::Connection => ProblemKind::Connection,
        }
    }

    pub fn page(self) -> Page {
        match self {
            ProblemKind::HeaderTooLarge => Page { title: "Request headers too large", cause: "The request's header section is larger than Weir accepts (limits.max_header_bytes).", fix: "Send fewer or smaller headers (large cookies are the usual cause), or raise limits.max_header_bytes in Weir's config." },
            ProblemKind::BodyTooLarge => Page { title: "Request body too large", cause: "The request body is larger than Weir buffers (limits.max_body_bytes).", fix: "Send a smaller body, or raise limits.max_body_bytes in Weir's config." },
            ProblemKind::BadRequest => Page { title: "Bad request", cause: "Weir could not understand the request (for example a proxy request without a host, or a malformed URI).", fix: "Point the client at Weir as an HTTP proxy (HTTPS_PROXY/HTTP_PROXY=http://127.0.0.1:9347) rather than as a server, and check the URL." },
            ProblemKind::ForbiddenHost => Page { title: "Control API refused: foreign Host", cause: "Weir's control API only answers requests whose Host is one of its own loopback names. A web page using DNS rebinding sends a foreign Host, so it gets nothing.", fix: "Use http://127.0.0.1:PORT/_weir/ or http://localhost:PORT/_weir/ directly." },
            ProblemKind::ForbiddenTarget => Page { title: "Proxy target refused: a private address", cause: "The request or CONNECT tunnel goes to a host that is not a managed upstream and is (or resolves to) a loopback, link-local or private address. Weir refuses these so that a web page or a tool pointed at Weir cannot reach services on this machine or its local network through it.", fix: "If you do mean to reach local or private hosts through Weir (a local test server, a private network service), set `allow_private_targets = true` at the top level of Weir's config file and restart Weir; or add the host to NO_PROXY so the client connects directly. Managed upstreams are never refused." },
            ProblemKind::ForbiddenOrigin => Page { title: "Control API refused: foreign Origin", cause: "A request from another web origin tried to use Weir's control API.", fix: "Open the dashboard from Weir's own address; other sites cannot drive Weir." },
            ProblemKind::Unauthorized => Page { title: "Control secret required", cause: "Calls that change Weir's state, and reads of the create queue and settings, need the per-install control secret in the X-Weir-Secret header.", fix: "Use the `weir` CLI or the tray, or open the dashboard link printed by `weir serve` (it carries the secret)." },
            ProblemKind::NotFound => Page { title: "Not found", cause: "There is nothing at this path on Weir's control API.", fix: "See http://127.0.0.1:PORT/_weir/ for the dashboard and /_weir/api/status for status." },
            ProblemKind::Connection => Page { title: "Upstream unreachable", cause: "Weir could not connect to the upstream (connection refused or reset, or its name did not resolve).", fix: "Check your network and GitHub Status; Weir serves cached answers where it has them and queues creates." },
            ProblemKind::Timeout => Page { title: "Upstream timed out", cause: "The upstream did not answer in time (connecting, sending headers, or sending the body).", fix: "Usually a GitHub slowdown: wait and retry later; Weir already retried within its budget." },
            ProblemKind::ServerError => Page { title: "Upstream server error", cause: "The upstream answered 500, 502 or 504.", fix: "Usually a GitHub incident: check GitHub Status. Weir retried within its budget." },
            ProblemKind::Overloaded => Page { title: "Upstream overloaded", cause: "The upstream answered 503 or 529, or Weir's concurrency limit for it was full and the request was shed.", fix: "Wait for the Retry-After time and try again." },
            ProblemKind::RateLimited => Page { title: "Rate limited", cause: "Either the upstream rate-limited this credential (Weir then holds back every surface using it until the limit resets; other credentials are not affected, unless the request carried none), or this client exceeded Weir's own per-client limit.", fix: "Wait for the Retry-After time. Reduce polling in the client if it happens often." },
            ProblemKind::BreakerOpen => Page { title: "Upstream circuit breaker open", cause: "Too many recent calls to this upstream failed or were slow, so Weir stopped sending it calls for a while to let it recover.", fix: "Wait for the Retry-After time. Cached answers are still served; creates are queued." },
            ProblemKind::UpstreamProtocol => Page { title: "Bad upstream response", cause: "The upstream's response could not be read or was too large to share between waiting clients.", fix: "Retry; if it persists, report it with the request id." },
            ProblemKind::Auth => Page { title: "Upstream refused the credentials", cause: "The upstream answered 401 or 403.", fix: "Sign in again (gh auth login / VS Code) and check the token's scopes." },
            ProblemKind::PolicyBlocked => Page { title: "Blocked by organisation policy", cause: "GitHub refused the call because of an organisation or enterprise policy.", fix: "Ask an organisation owner to enable Copilot coding agent for this repository." },
            ProblemKind::Fatal => Page { title: "Upstream rejected the request", cause: "The upstream answered with a client error that retrying cannot fix.", fix: "Fix the request; see the upstream's message." },
            ProblemKind::TooManyConnections => Page { title: "Too many connections", cause: "Weir is at its limit of concurrent client connections (limits.max_connections).", fix: "Close idle clients or raise limits.max_connections." },
            ProblemKind::Paused => Page { title: "Weir is paused", cause: "Weir passes everything through untouched while paused.", fix: "Resume from the tray or dashboard." },
            ProblemKind::QueueUnavailable => Page { title: "Create could not be queued", cause: "The upstream could not take the create and Weir could not store it durably (database or keychain problem).", fix: "See the detail for the exact cause; nothing that was already queued is lost." },
            ProblemKind::QueueRefused => Page { title: "Create not queued", cause: "The upstream could not take the create, and Weir's queue did not keep it: a queue limit was reached (the creates waiting for this credential, or for everyone, by number or by size: [queue] max_items_per_identity, max_bytes_per_identity, max_items, max_bytes), or the create carried no credential (it could never be sent later, and anything that can reach Weir, even a web page, could send such creates). The detail says which.", fix: "Try again when the upstream is healthy (see Retry-After). See what waits with `weir queue ls` and cancel what is no longer wanted with `weir queue cancel ID`; if the limits are too low for you, raise them in the [queue] table of Weir's config." },
            ProblemKind::CacheOnlyMiss => Page { title: "Cache only: no cached answer", cause: "Weir is in cache-only mode (chosen in the tray, the dashboard or with `weir mode cache-only`): it answers from its cache and queues creates, and sends nothing to the upstream. It has no cached answer for this request (never fetched with this credential, evicted, or a class Weir never caches: session logs and other calls).", fix: "Switch back with `weir mode automatic` (or the tray's Mode menu, or the dashboard) to reach the upstream again; queued creates are then sent once each." },
            ProblemKind::OfflineMiss => Page { title: "Offline: no cached answer", cause: "Every managed upstream is unreachable at the network level (connection refused, name not resolved, connect timeout), so Weir went offline by itself: it answers from its cache, queues creates, and probes the upstreams with backoff. It has no cached answer for this request.", fix: "Check your network connection (Wi-Fi, VPN, proxy). Weir leaves offline by itself as soon as a probe reaches an upstream, and then sends queued creates once each." },
            ProblemKind::PolicyFailed => Page { title: "Policy: this create fails rather than wait", cause: "The upstream could not take this create (an outage, a breaker, a 429 surge, a cooldown), and a fallback policy rule (`[[policy]]` in your config or your organisation's policy file) says `create = \"fail\"` for this repository: Weir neither queues it nor sends it elsewhere. The `Weir-Policy` header and the detail name the rule.", fix: "Try again when the upstream is healthy (see `Retry-After`). To see why, open the dashboard's Policy view or `GET /_weir/api/policy?repo=owner/repo`; an organisation's rule cannot be loosened by your own config." },
            ProblemKind::PolicyCacheMiss => Page { title: "Policy: lists from the cache only, none cached", cause: "A fallback policy rule says `list = \"cache\"` in the current situation (for example on a metered network), so Weir answers lists from its cache and sends nothing upstream for them. It has no cached answer for this request.", fix: "Open the list once on an unmetered network so Weir can cache it, or change the rule (`[[policy]]`; an organisation's rule cannot be loosened). The `Weir-Policy` header names the rule." },
            ProblemKind::NoToken => Page { title: "No GitHub token stored", cause: "The agent-sessions view and the new-task form act with the GitHub token kept in the OS keychain, and none is stored (or there is no keychain).", fix: "Store one with `weir token set` or the dashboard's GitHub token panel." },
            ProblemKind::Internal => Page { title: "Internal error", cause: "Weir hit an unexpected condition.", fix: "Retry; if it persists, report it with the request id and Weir's log." },
            ProblemKind::ForbiddenClient => Page { title: "Gateway refused: network not allowed", cause: "This Weir gateway only serves clients from the networks in its `gateway.allow` list, and the connection came from another address.", fix: "Connect from an allowed network (VPN, office), or ask the gateway's operators to add your network to `gateway.allow`." },
            ProblemKind::AdminOnly => Page { title: "Control API not on this listener", cause: "A Weir gateway serves its control API (status, queue, settings) only on its admin listener, behind the admin token; the clients' listener refuses control calls.", fix: "Use the admin listener (`gateway.admin_listen`) with `Authorization: Bearer <admin token>`." },
            ProblemKind::HandoffUnavailable => Page { title: "Local-agent hand-off unavailable", cause: "A create can be handed to a local agent only when Weir's config has a [local_agent] table with a command, the repository has a local checkout Weir can find (local_agent.checkouts or local_agent.roots), and the create queue is open.", fix: "Add [local_agent] with command = [\"program\", \"{problem_statement_file}\"] and the repository's checkout to Weir's config (see docs/handoff.md). Until then such creates are queued." },
            ProblemKind::HandoffAnswered => Page { title: "Offer already answered", cause: "This hand-off offer was already confirmed, declined or expired; a local agent runs at most once per offer.", fix: "See GET /_weir/api/handoffs for what became of it (a declined or expired offer is back in the create queue)." },
            ProblemKind::BadProxyHeader => Page { title: "PROXY protocol header refused", cause: "The connection started with a PROXY protocol header the gateway does not believe: the option is off (gateway.proxy_protocol), the sender is not one of its load balancers (gateway.trusted_proxies), or the header is malformed.", fix: "Clients connect with TLS directly, without a header. Operators: turn on gateway.proxy_protocol and list the load balancers' addresses in gateway.trusted_proxies, or turn the header off on the load balancer." },
            ProblemKind::TlsRequired => Page { title: "TLS required", cause: "This Weir gateway speaks TLS only, so tokens never cross the network in the clear; the client spoke plain HTTP.", fix: "Use an https:// proxy URL, e.g. HTTPS_PROXY=https://gateway.example:8443, and trust the gateway's certificate." },
        }
    }
}

impl std::fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
