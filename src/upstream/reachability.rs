//! Whether each managed upstream can be reached at the network level, as Weir last saw it:
//! every attempt's outcome (and every offline probe) says so. Only a failure to get a
//! connection at all (refused, name not resolved, connect timeout) counts as unreachable; any
//! HTTP answer, even a 500, proves the network works. The mode's offline detector
//! (`crate::mode::offline`) is woken when an upstream turns unreachable.

use super::client::{FetchError, Timeouts};
use super::{UpstreamIndex, Upstreams};
use http::{Method, Request, Response};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// What Weir last saw of one upstream's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Nothing sent yet.
    Unknown = 0,
    Reachable = 1,
    Unreachable = 2,
}

impl Reach {
    fn from_u8(v: u8) -> Reach {
        match v {
            1 => Reach::Reachable,
            2 => Reach::Unreachable,
            _ => Reach::Unknown,
        }
    }
}

/// Per-upstream reachability and the wake-up for the offline detector.
pub(crate) struct Reachability {
    states: Vec<AtomicU8>,
    /// Woken (one stored permit: a burst of failures is one wake-up) when an upstream turns
    /// unreachable from reachable or unknown.
    pub turned_unreachable: Notify,
}

/// How long a probe waits for an answer once connected (connecting is bounded by the
/// connector's own timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl Reachability {
    pub fn new(upstreams: usize) -> Reachability {
        Reachability {
            states: (0..upstreams).map(|_| AtomicU8::new(0)).collect(),
            turned_unreachable: Notify::new(),
        }
    }

    pub fn get(&self, up: UpstreamIndex) -> Reach {
        self.states.get(up.index()).map_or(Reach::Unknown, |s| {
            Reach::from_u8(s.load(Ordering::Relaxed))
        })
    }

    /// Records what one exchange with `up`'s origin says about its network.
    pub fn observe<B>(&self, up: UpstreamIndex, res: &Result<Response<B>, FetchError>) {
        match res {
            Ok(_) => self.set(up, Reach::Reachable),
            Err(e) if e.is_unreachable() => self.set(up, Reach::Unreachable),
            // A reset, a TLS refusal or a slow answer: something answered, but the exchange
            // says nothing clear either way.
            Err(_) => {}
        }
    }

    fn set(&self, up: UpstreamIndex, to: Reach) {
        let Some(s) = self.states.get(up.index()) else {
            return;
        };
        let from = Reach::from_u8(s.swap(to as u8, Ordering::Relaxed));
        if to == Reach::Unreachable && from != Reach::Unreachable {
            self.turned_unreachable.notify_one();
        }
    }
}

impl Upstreams {
    /// One offline probe of `up`'s origin: `HEAD /` without credentials. Any HTTP answer (a
    /// 401 or 404 is normal) means reachable; the error says why not. Not counted as a
    /// request, not passed through the gate: it only asks whether the network works.
    pub async fn probe(&self, up: UpstreamIndex) -> Result<(), FetchError> {
        let origin = &self.get(up).settings.origin;
        let uri = origin
            .uri(http::uri::PathAndQuery::from_static("/"))
            .map_err(|e| FetchError::Protocol {
                target: origin.to_string(),
                message: format!("bad URI: {e}"),
            })?;
        let mut req = Request::new(crate::body::empty());
        *req.method_mut() = Method::HEAD;
        *req.uri_mut() = uri;
        let t = Timeouts {
            headers: PROBE_TIMEOUT,
            body: PROBE_TIMEOUT,
        };
        let res = self.client.send(req, t).await;
        self.reach.observe(up, &res);
        res.map(|_| ())
    }
}
