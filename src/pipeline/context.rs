//! One request's context and the outcome of its class handler.
//!
//! The driver (`super::phases`) builds a [`Ctx`] once, after the identity phase: the settings
//! version the request runs under, its upstream and route class, the caller, the mode's hold
//! and the fallback policy's decision. Class handlers read these from here and never from
//! `Proxy::settings` again, so a settings change lands on the next request whole. What they do
//! (a cache hit, a joined flight, …) they note on its outcome, which the recording phase
//! (`super::record`) writes to the counters when the request ends.
//!
//! A class handler does not call the upstream itself: it returns a [`Step`], either an answer
//! it could give on its own (a cache hit, a joined flight, a hold's miss) or the [`Call`] that
//! needs the upstream. The driver then applies what every such call shares, in one place: the
//! client rate limit (a request that reaches no upstream is never limited) and, when the limit
//! refuses, the stale copy that answers instead. A wait that may end in a call of its own (a
//! `stream` flight whose answer turns out a stream, a larger list page that cannot be cut) is
//! admitted like a fetch, so no path reaches an upstream unlimited.

use super::identity::Caller;
use super::policy::CreatePlan;
use super::record::Outcome;
use crate::body::Body;
use crate::cache::Stored;
use crate::config::{Family, RouteClass, Settings, UpstreamIndex};
use crate::mode::Hold;
use crate::policy::Decision;
use crate::problem::Problem;
use futures_util::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;
use std::sync::Arc;

/// What the phases after classification know about one managed request.
pub(super) struct Ctx<'o> {
    /// The one settings version for this request (and the fetches it leads).
    pub settings: Arc<Settings>,
    /// The managed upstream's index in `Upstreams`.
    pub up: UpstreamIndex,
    pub class: RouteClass,
    /// Whose breaker its attempts count against (found with the class).
    pub family: Family,
    pub who: Caller,
    /// Cache only, offline: nothing goes upstream (see `super::held`).
    pub hold: Option<Hold>,
    /// The fallback policy's decision for `list` and `create` requests.
    pub decision: Option<Decision>,
    /// What happened to this request so far (`super::record`).
    pub seen: &'o Outcome,
}

/// A [`Ctx`] without the request's outcome: what a request that must wait carries into its
/// future, which owns the outcome ([`super::record::Pending`]).
pub(super) struct Detached {
    settings: Arc<Settings>,
    up: UpstreamIndex,
    class: RouteClass,
    family: Family,
    who: Caller,
    hold: Option<Hold>,
    decision: Option<Decision>,
}

impl Detached {
    /// The context again, noting on `seen`.
    pub fn attach(self, seen: &Outcome) -> Ctx<'_> {
        let Detached {
            settings,
            up,
            class,
            family,
            who,
            hold,
            decision,
        } = self;
        Ctx {
            settings,
            up,
            class,
            family,
            who,
            hold,
            decision,
            seen,
        }
    }
}

impl Ctx<'_> {
    /// The context without its outcome ([`Detached::attach`] gives it back).
    pub fn detach(self) -> Detached {
        let Ctx {
            settings,
            up,
            class,
            family,
            who,
            hold,
            decision,
            seen: _,
        } = self;
        Detached {
            settings,
            up,
            class,
            family,
            who,
            hold,
            decision,
        }
    }

    /// The request's route (class and breaker family), for its upstream attempts.
    pub fn route(&self) -> crate::config::Route {
        crate::config::Route {
            class: self.class,
            family: self.family,
        }
    }
}

pub(super) type Answer = Result<Response<Body>, Problem>;

/// What a class handler decided.
pub(super) enum Step<'a> {
    /// Answered without reaching an upstream.
    Answered(Answer),
    /// Reaches no upstream of its own but must wait: a flight already running for the same
    /// key, which this request joins.
    Joins(BoxFuture<'a, Answer>),
    /// Needs the upstream.
    Upstream(Call<'a>),
}

/// A request that reaches an upstream, run by the driver once admitted.
pub(super) enum Call<'a> {
    /// Streamed through as it came (`other`, non-GET `stream` calls, a GET with a body).
    Forward(Request<Incoming>),
    /// A completion naming a model (`super::model`).
    Model(Request<Incoming>),
    /// A create and its plan (`super::create`).
    Create(Request<Incoming>, CreatePlan),
    /// A cache flight this request leads, or a `stream` GET's one exchange. `stale` answers
    /// instead if the request may not go.
    Fetch {
        stale: Option<Arc<Stored>>,
        go: BoxFuture<'a, Answer>,
    },
}
