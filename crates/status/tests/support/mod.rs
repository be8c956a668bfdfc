//! Test support: a real loopback Statuspage server and a real HTTP client implementing
//! `Fetch`. Each test file uses a subset, hence the allow.
#![allow(dead_code)]

pub mod client;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use weir_status::{Fetch, Jitter, StatusConfig};

/// Config against a test server: no jitter, no request timeout (see `request_timeout`).
pub fn test_config(base_url: &str) -> StatusConfig {
    StatusConfig {
        jitter: Jitter::None,
        request_timeout: None,
        interval: Duration::from_secs(60),
        max_backoff: Duration::from_secs(600),
        ..StatusConfig::for_base_url(base_url)
    }
}

pub fn fetch() -> Arc<dyn Fetch> {
    Arc::new(client::HyperFetch::new())
}
