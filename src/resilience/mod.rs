//! Resilience on the request path, per upstream: the gate every upstream attempt passes
//! (cooldown → breaker → bulkhead), outcome recording (classifier → breaker, cooldown), and the
//! single retry layer with backoff, jitter and a budget (`call`).

mod call;
mod gate;

pub use call::{call_buffered, call_streaming, Attempted, Replayable};
pub use gate::{Guard, GuardStatus};
