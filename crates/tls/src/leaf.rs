//! Short-lived leaf certificates for the managed hosts, issued on demand from the SNI name and
//! cached until they are close to expiry; plugs into rustls as its certificate resolver.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustls::pki_types::PrivateKeyDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use time::{Duration, OffsetDateTime};

use crate::clock::{Clock, SystemClock};
use crate::hosts::normalize_host;
use crate::{LocalCa, TlsError};

/// How long leaves live and when they are replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafPolicy {
    /// Lifetime of a leaf from the moment it is issued (clamped to the CA's own expiry).
    pub validity: Duration,
    /// A cached leaf with less than this left is replaced by a new one.
    pub renew_before: Duration,
    /// `notBefore` is set this far in the past, for clients whose clock is slightly behind.
    pub backdate: Duration,
}

impl Default for LeafPolicy {
    fn default() -> Self {
        Self {
            validity: Duration::hours(24),
            renew_before: Duration::hours(1),
            backdate: Duration::hours(1),
        }
    }
}

struct CachedLeaf {
    key: Arc<CertifiedKey>,
    not_after: OffsetDateTime,
}

struct Shared {
    ca: Arc<LocalCa>,
    clock: Arc<dyn Clock>,
    policy: LeafPolicy,
    /// Keyed by normalised host; holds at most one entry per managed host, so it cannot grow
    /// with client input. A std mutex is right here: rustls calls the resolver synchronously and
    /// issuing under the lock means concurrent handshakes for one host make one leaf, not many.
    cache: Mutex<HashMap<String, CachedLeaf>>,
    issued: AtomicU64,
    /// Permitted entries whose subdomains may get leaves too (see `LeafIssuer::with_subdomains_of`).
    subdomains_of: Vec<String>,
    /// The clock's second (unix) and the leaves signed in it (see [`MAX_NEW_LEAVES_PER_SECOND`]).
    minted: Mutex<(i64, u32)>,
}

/// At most this many leaves are signed in one second (each is a new key pair and a signature).
/// A cached leaf is always served; a burst of new names past this fails its handshake, so no
/// local client can turn handshakes into unbounded signing work.
pub const MAX_NEW_LEAVES_PER_SECOND: u32 = 16;

/// At most this many cached leaves for subdomains of `LeafIssuer::with_subdomains_of` domains.
const MAX_SUBDOMAIN_LEAVES: usize = 32;

/// Issues and caches leaves signed by the local CA; a cheap-to-clone handle.
#[derive(Clone)]
pub struct LeafIssuer {
    shared: Arc<Shared>,
}

impl LeafIssuer {
    /// An issuer with the system clock and the default 24 h / renew-at-1 h policy.
    pub fn new(ca: Arc<LocalCa>) -> Self {
        Self::with_clock(ca, Arc::new(SystemClock), LeafPolicy::default())
    }

    /// An issuer that also issues for subdomains of those permitted entries that are listed
    /// in `domains` (e.g. `githubcopilot.com`, whose hosts an application learns at run time
    /// and decides itself to intercept). Every other entry stays exact.
    pub fn with_subdomains_of(ca: Arc<LocalCa>, domains: &[&str]) -> Self {
        Self::new(ca).subdomains_of(domains)
    }

    /// This issuer, also issuing for subdomains of `domains` (see
    /// [`LeafIssuer::with_subdomains_of`]); for a newly built issuer, before it is shared.
    pub fn subdomains_of(mut self, domains: &[&str]) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.subdomains_of = domains.iter().map(|d| d.to_ascii_lowercase()).collect();
        }
        self
    }

    /// Whether a leaf may be issued for `host`: exactly a managed host, or a subdomain of a
    /// permitted entry named in [`LeafIssuer::with_subdomains_of`].
    pub fn covers(&self, host: &str) -> bool {
        self.shared.ca.covers(host, &self.shared.subdomains_of)
    }

    /// An issuer with an injected clock and policy.
    pub fn with_clock(ca: Arc<LocalCa>, clock: Arc<dyn Clock>, policy: LeafPolicy) -> Self {
        Self {
            shared: Arc::new(Shared {
                ca,
                clock,
                policy,
                subdomains_of: Vec::new(),
                cache: Mutex::new(HashMap::new()),
                issued: AtomicU64::new(0),
                minted: Mutex::new((i64::MIN, 0)),
            }),
        }
    }

    /// The CA this issuer signs with.
    pub fn ca(&self) -> &Arc<LocalCa> {
        &self.shared.ca
    }

    /// The certificate and key to serve for `host`: the cached leaf while it has more than
    /// `renew_before` left, otherwise a newly issued one. Refuses hosts that are not exactly on
    /// the managed list, and refuses to issue once the CA itself has expired.
    pub fn certified_key(&self, host: &str) -> Result<Arc<CertifiedKey>, TlsError> {
        let host = normalize_host(host)?;
        let ca = &self.shared.ca;
        if !ca.covers(&host, &self.shared.subdomains_of) {
            return Err(TlsError::HostNotPermitted { host });
        }
        let now = self.shared.clock.now();
        let policy = self.shared.policy;
        let mut cache = self
            .shared
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(leaf) = cache.get(&host) {
            if leaf.not_after - now > policy.renew_before {
                return Ok(leaf.key.clone());
            }
        }
        if ca.not_after() <= now {
            return Err(TlsError::CaExpired {
                not_after: ca.not_after(),
            });
        }
        {
            let mut minted = self
                .shared
                .minted
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let second = now.unix_timestamp();
            if minted.0 != second {
                *minted = (second, 0);
            }
            if minted.1 >= MAX_NEW_LEAVES_PER_SECOND {
                return Err(TlsError::TooManyLeaves {
                    per_second: MAX_NEW_LEAVES_PER_SECOND,
                });
            }
            minted.1 += 1;
        }
        let not_before = (now - policy.backdate).max(ca.not_before());
        let not_after = (now + policy.validity).min(ca.not_after());
        let (cert, key) = ca.sign_leaf(&host, not_before, not_after)?;
        let signing_key = rustls::crypto::ring::sign::any_ecdsa_type(&PrivateKeyDer::Pkcs8(key))?;
        let certified = Arc::new(CertifiedKey::new(vec![cert], signing_key));
        self.shared.issued.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%host, %not_after, "issued leaf certificate");
        // Subdomain leaves are named by the client's SNI: past a bound they are issued but not
        // kept, so the cache cannot grow with client input.
        if !ca.is_managed(&host) && cache.len() >= ca.permitted_hosts().len() + MAX_SUBDOMAIN_LEAVES
        {
            return Ok(certified);
        }
        cache.insert(
            host,
            CachedLeaf {
                key: certified.clone(),
                not_after,
            },
        );
        Ok(certified)
    }

    /// How many leaves this issuer has signed (for status output and tests).
    pub fn issued_count(&self) -> u64 {
        self.shared.issued.load(Ordering::Relaxed)
    }

    /// A rustls server configuration that uses this issuer for certificates, the ring provider,
    /// TLS 1.2 and 1.3, and offers ALPN `h2` then `http/1.1`. Build it once and share the `Arc`.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(self.clone()));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for LeafIssuer {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // No SNI means we cannot know which managed host is meant: abort rather than guess.
        let Some(host) = client_hello.server_name() else {
            tracing::debug!("TLS client sent no SNI; refusing handshake");
            return None;
        };
        match self.certified_key(host) {
            Ok(key) => Some(key),
            Err(
                err @ (TlsError::HostNotPermitted { .. }
                | TlsError::InvalidHost { .. }
                | TlsError::TooManyLeaves { .. }),
            ) => {
                tracing::debug!(%host, error = %err, "no certificate for SNI name");
                None
            }
            Err(err) => {
                // An expired CA or a signing failure breaks every managed host: make it visible.
                tracing::warn!(%host, error = %err, "could not issue a leaf certificate");
                None
            }
        }
    }
}

impl fmt::Debug for LeafIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafIssuer")
            .field("ca", &self.shared.ca.common_name())
            .field("policy", &self.shared.policy)
            .field("issued", &self.issued_count())
            .finish_non_exhaustive()
    }
}
