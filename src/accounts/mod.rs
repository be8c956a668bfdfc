//! Account identity: which GitHub account each credential seen on a managed upstream belongs
//! to, so that one developer's surfaces (VS Code, `gh`, the browser), each with its own token,
//! can share one flow of list and view calls — and only when that is safe.
//!
//! - [`record`]: the account record (id, login, token kind, scopes) and the sharing rule;
//! - [`resolve`]: one coalesced `GET /user` on the `github-api` upstream per credential, off
//!   the request path, through Weir's own upstream client and policies;
//! - [`learn`]: the same, read from a client's own `GET /user` answer (no call of Weir's);
//! - [`store`]: the credential-hash → account table on disk (`accounts.sqlite3`, 0600).
//!
//! Only the keyed credential hash ([`Identity`]) is kept, never the credential. Until a
//! credential is resolved, and whenever resolution fails, it is its own identity: Weir never
//! shares on a guess. A 401 on any request drops the credential's mapping
//! ([`Accounts::forget`], called by the attempt phase).

mod learn;
mod record;
mod resolve;
mod seen;
mod store;

pub(crate) use learn::UserCall;
pub(crate) use record::AccountRecord;
pub use record::TokenKind;
pub(crate) use resolve::{Resolution, UserApi};

use crate::config::{Settings, ShareMode, UpstreamIndex};
use crate::identity::{Identity, IdentityKey};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{
    AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use store::AccountStore;
use tokio::time::Instant;

/// A mapping older than this is resolved again (in the background; it stays in use until
/// the new answer replaces or drops it).
const REFRESH_AFTER_MS: i64 = 24 * 3600 * 1000;
/// After a failed resolution (offline, 5xx, no answer) the credential is not tried again for
/// this long; after a 401, for [`AFTER_UNAUTHORIZED`].
const AFTER_FAILURE: Duration = Duration::from_secs(60);
const AFTER_UNAUTHORIZED: Duration = Duration::from_secs(600);
/// At most this many resolutions run at once, and at most [`MAX_PENDING`] wait: a flood of
/// new credentials cannot turn into a flood of `/user` calls.
const CONCURRENT: usize = 2;
const MAX_PENDING: usize = 256;

/// Account tables made so far in the process (each numbered by it, [`seen`]).
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// Requests counted for one account.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    client: u64,
    upstream: u64,
}

/// The account directory and its resolver state. Shared (`Arc`) by the request path (which
/// asks it for a request's sharing identity), the attempt phase (401 → forget) and the queue's
/// in-doubt lookup.
pub(crate) struct Accounts {
    share: ShareMode,
    key: IdentityKey,
    /// Index of the `github-api` upstream; `None`: nothing is resolved.
    github_api: Option<UpstreamIndex>,
    known: RwLock<HashMap<Identity, Arc<AccountRecord>>>,
    /// This table's number among those made in the process, and how many times `known` has
    /// changed: what the threads' kept lookups are checked against ([`seen`]).
    instance: u64,
    generation: AtomicU64,
    /// How many credentials `known` maps (set with each change): none, and no lookup is made.
    mapped: AtomicUsize,
    store: Option<Arc<AccountStore>>,
    pending: Mutex<HashSet<Identity>>,
    /// Identities mapped as a token's other spelling ([`Accounts::other_spelling`]), each with
    /// the identity it was learned through. Kept in memory only and not counted as
    /// credentials; a 401 to either spelling forgets both.
    aliases: Mutex<HashMap<Identity, Identity>>,
    /// Credentials whose last resolution failed, with when they may be tried again.
    failed: moka::sync::Cache<Identity, Instant>,
    /// When a 401 last dropped a credential's mapping (Unix ms): a client's `/user` copy older
    /// than that teaches nothing ([`Accounts::learn`]). Kept as long as such a copy counts.
    forgotten: moka::sync::Cache<Identity, i64>,
    permits: Arc<tokio::sync::Semaphore>,
    /// Per account id: client requests, and requests Weir sent upstream with the account's
    /// credentials (the status and metrics show them by login).
    requests: Mutex<HashMap<u64, Counts>>,
    resolved: AtomicU64,
    /// Mappings learned (or renewed) from a client's own `/user` answer.
    learned: AtomicU64,
    failures: AtomicU64,
    unauthorized: AtomicU64,
}

impl Accounts {
    /// Opens the on-disk table in `data_dir` and loads it; without it (unwritable dir, damaged
    /// file) mappings are kept in memory only, with a warning.
    pub async fn open(settings: &Settings, key: IdentityKey, data_dir: &Path) -> Accounts {
        let dir = data_dir.to_path_buf();
        let opened = tokio::task::spawn_blocking(move || {
            let s = AccountStore::open(&dir)?;
            let rows = s.load_all()?;
            Ok::<_, store::AccountStoreError>((s, rows))
        })
        .await;
        let (store, rows) = match opened {
            Ok(Ok((s, rows))) => (Some(Arc::new(s)), rows),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "account mappings are kept in memory only");
                (None, vec![])
            }
            Err(e) => {
                tracing::warn!(error = %e, "account mappings are kept in memory only");
                (None, vec![])
            }
        };
        let mut a = Accounts::in_memory(settings, key);
        a.store = store;
        let known: HashMap<_, _> = rows.into_iter().map(|(i, r)| (i, Arc::new(r))).collect();
        a.mapped = AtomicUsize::new(known.len());
        a.known = RwLock::new(known);
        a
    }

    fn in_memory(settings: &Settings, key: IdentityKey) -> Accounts {
        Accounts {
            share: settings.share,
            key,
            github_api: settings.upstream_named(resolve::GITHUB_API),
            known: RwLock::default(),
            instance: INSTANCES.fetch_add(1, Relaxed),
            generation: AtomicU64::new(0),
            mapped: AtomicUsize::new(0),
            store: None,
            pending: Mutex::default(),
            aliases: Mutex::default(),
            failed: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(AFTER_UNAUTHORIZED)
                .build(),
            forgotten: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_millis(REFRESH_AFTER_MS as u64))
                .build(),
            permits: Arc::new(tokio::sync::Semaphore::new(CONCURRENT)),
            requests: Mutex::default(),
            resolved: AtomicU64::new(0),
            learned: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
        }
    }

    /// The `github-api` upstream's index, if one is configured.
    pub fn github_api(&self) -> Option<UpstreamIndex> {
        self.github_api
    }

    /// The keyed hash of a credential (as the request path computes it).
    pub fn identify(&self, h: &http::HeaderMap) -> Identity {
        self.key.identify(h)
    }

    /// The account a credential is mapped to, if it is.
    pub fn record(&self, id: &Identity) -> Option<Arc<AccountRecord>> {
        self.known.read().ok()?.get(id).cloned()
    }

    /// The identity list and view answers of this credential are cached and coalesced under:
    /// a per-account sharing identity when the sharing rule allows it, else the credential's
    /// own. Never blocks on resolution.
    pub fn sharing_identity(&self, id: &Identity) -> Identity {
        if self.share == ShareMode::Credential {
            return *id;
        }
        // The thread's kept lookup, and the identity made of it the first time (a keyed blake3
        // hash per request before).
        self.with_record(id, |rec, sharing| {
            if let Some(s) = sharing {
                return *s;
            }
            let s = rec.map_or(*id, |rec| self.sharing_of(id, rec));
            *sharing = Some(s);
            s
        })
    }

    /// [`Accounts::sharing_identity`] of a mapped credential.
    fn sharing_of(&self, id: &Identity, rec: &AccountRecord) -> Identity {
        match (rec.share_class(), self.share) {
            (Some((account, repo)), ShareMode::Account) => self.key.shared(account, repo),
            // Only credentials of one OAuth app: a credential of no (known) app shares with none.
            (Some((account, repo)), ShareMode::App) => match &rec.client_id {
                Some(app) => self.key.shared_app(account, repo, app),
                None => *id,
            },
            _ => *id,
        }
    }

    /// Counts a client request of this credential for its account (when it has one).
    pub fn count(&self, id: &Identity) {
        self.bump(id, |c| c.client += 1);
    }

    /// Counts an upstream attempt made with this credential (the attempt phase calls it).
    pub fn count_upstream(&self, id: &Identity) {
        self.bump(id, |c| c.upstream += 1);
    }

    fn bump(&self, id: &Identity, f: impl FnOnce(&mut Counts)) {
        if let Some(account) = self.with_record(id, |r, _| r.map(|r| r.account_id)) {
            if let Ok(mut m) = self.requests.lock() {
                f(m.entry(account).or_default());
            }
        }
    }

    /// `f` of `id`'s record ([`Accounts::record`], read once per change of the table on each
    /// thread: [`seen`]) and of its kept sharing identity.
    fn with_record<R>(
        &self,
        id: &Identity,
        f: impl FnOnce(Option<&AccountRecord>, &mut Option<Identity>) -> R,
    ) -> R {
        // Loaded before the table is read: a change made after this raises it first, so what
        // is read under this count is not used once the table changed.
        let generation = self.generation.load(Acquire);
        // An empty table maps no one (a lookup made now would find nothing either).
        if self.mapped.load(Acquire) == 0 {
            return f(None, &mut None);
        }
        seen::with(self.instance, generation, id, || self.record(id), f)
    }

    /// Counts a change of `known`, which now maps `mapped` credentials (called after it, with
    /// its lock still held).
    fn changed(&self, mapped: usize) {
        self.mapped.store(mapped, Release);
        self.generation.fetch_add(1, Release);
    }

    /// Drops a credential's mapping (the upstream answered 401 to it): it is its own identity
    /// again, and is not resolved again for a while. The token's other spelling, if it was
    /// mapped with it, is dropped too.
    pub fn forget(&self, id: &Identity) {
        for other in self.unlink(id) {
            self.drop_mapping(&other);
        }
        self.drop_mapping(id);
    }

    fn drop_mapping(&self, id: &Identity) {
        self.failed.insert(*id, Instant::now() + AFTER_UNAUTHORIZED);
        self.forgotten.insert(*id, crate::time_fmt::now_ms());
        let removed = self.known.write().ok().and_then(|mut m| {
            let removed = m.remove(id);
            self.changed(m.len());
            removed
        });
        if removed.is_some() {
            tracing::info!(credential = %id.short(), "401: the credential's account mapping is dropped");
            self.persist(*id, None);
        }
    }

    /// The identity of the same token under its other usual scheme (`token X` ↔ `Bearer X`).
    /// VS Code sends its GitHub session as `token` to the token and user calls and as
    /// `Bearer` to the Task API and Mission Control: one token, two identities (the scheme is
    /// part of the hash, so existing identities never change), and one account. Only for a
    /// lone `Authorization` (the caller checked: no `Cookie`).
    fn other_spelling(&self, authorization: &http::HeaderValue) -> Option<Identity> {
        let v = authorization.as_bytes();
        let sp = v.iter().position(|b| *b == b' ')?;
        let (scheme, rest) = v.split_at(sp);
        let other: &[u8] = if scheme.eq_ignore_ascii_case(b"token") {
            b"Bearer"
        } else if scheme.eq_ignore_ascii_case(b"bearer") {
            b"token"
        } else {
            return None;
        };
        let value = http::HeaderValue::from_bytes(&[other, rest].concat()).ok()?;
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, value);
        Some(self.key.identify(&h))
    }

    /// Marks a credential (and its other spelling) as being resolved; `false` if either
    /// already is, or too many are.
    fn mark_pending(&self, id: Identity, other: Option<Identity>) -> bool {
        let Ok(mut p) = self.pending.lock() else {
            return false;
        };
        if p.len() + 2 > MAX_PENDING || p.contains(&id) || other.is_some_and(|o| p.contains(&o)) {
            return false;
        }
        p.insert(id);
        p.extend(other);
        true
    }

    fn unmark_pending(&self, id: Identity, other: Option<Identity>) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
            if let Some(o) = other {
                p.remove(&o);
            }
        }
    }

    /// Records `rec` for a credential, and in memory for its other spelling
    /// ([`Accounts::other_spelling`]) unless that one has a mapping of its own.
    fn remember_token(
        &self,
        id: Identity,
        authorization: &http::HeaderValue,
        rec: AccountRecord,
    ) -> Arc<AccountRecord> {
        let Ok(mut aliases) = self.aliases.lock() else {
            return self.remember(id, rec);
        };
        // Mapped through its own `/user` now: a credential of its own.
        aliases.remove(&id);
        if let Some(other) = self.other_spelling(authorization) {
            let own = !aliases.contains_key(&other) && self.record(&other).is_some();
            if !own {
                if let Ok(mut m) = self.known.write() {
                    m.insert(other, Arc::new(rec.clone()));
                    self.changed(m.len());
                    aliases.insert(other, id);
                    self.failed.invalidate(&other);
                }
            }
        }
        drop(aliases);
        self.remember(id, rec)
    }

    /// Whether a 401 dropped `id`'s (or its other spelling's) mapping at or after `at_ms`.
    fn forgotten_since(&self, id: &Identity, other: Option<Identity>, at_ms: i64) -> bool {
        std::iter::once(*id)
            .chain(other)
            .any(|i| self.forgotten.get(&i).is_some_and(|t| t >= at_ms))
    }

    /// [`Accounts::forget`], for the token under both spellings.
    fn forget_token(&self, id: &Identity, authorization: &http::HeaderValue) {
        if let Some(other) = self.other_spelling(authorization) {
            self.forget(&other);
        }
        self.forget(id);
    }

    /// Unlinks `id` from its other spelling (either way round); returns that spelling.
    fn unlink(&self, id: &Identity) -> Vec<Identity> {
        let Ok(mut a) = self.aliases.lock() else {
            return Vec::new();
        };
        let linked: Vec<(Identity, Identity)> = a
            .iter()
            .filter(|(alias, through)| *alias == id || *through == id)
            .map(|(alias, through)| (*alias, *through))
            .collect();
        linked
            .into_iter()
            .map(|(alias, through)| {
                a.remove(&alias);
                if alias == *id {
                    through
                } else {
                    alias
                }
            })
            .collect()
    }

    fn remember(&self, id: Identity, rec: AccountRecord) -> Arc<AccountRecord> {
        let rec = Arc::new(rec);
        if let Ok(mut m) = self.known.write() {
            m.insert(id, rec.clone());
            self.changed(m.len());
        }
        self.failed.invalidate(&id);
        self.persist(id, Some(rec.clone()));
        rec
    }

    /// Writes a change to the table off the async workers (best effort: memory is the truth
    /// for this run).
    fn persist(&self, id: Identity, rec: Option<Arc<AccountRecord>>) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn_blocking(move || {
            let r = match &rec {
                Some(rec) => store.put(&id, rec),
                None => store.delete(&id),
            };
            if let Err(e) = r {
                tracing::warn!(error = %e, "cannot save an account mapping");
            }
        });
    }

    /// The per-account view for the status document: logins, never tokens.
    pub fn status(&self) -> IdentityStatus {
        let mut by_account: BTreeMap<u64, AccountStatus> = BTreeMap::new();
        let aliases: HashSet<Identity> = self
            .aliases
            .lock()
            .map(|a| a.keys().copied().collect())
            .unwrap_or_default();
        if let Ok(m) = self.known.read() {
            // A token's other spelling is the same credential: counted once.
            for (_, r) in m.iter().filter(|(id, _)| !aliases.contains(*id)) {
                let a = by_account
                    .entry(r.account_id)
                    .or_insert_with(|| AccountStatus {
                        login: r.login.clone(),
                        account_id: r.account_id,
                        credentials: 0,
                        token_kinds: vec![],
                        requests: 0,
                        upstream_requests: 0,
                    });
                a.credentials += 1;
                if !a.token_kinds.contains(&r.kind) {
                    a.token_kinds.push(r.kind);
                    a.token_kinds.sort();
                }
            }
        }
        if let Ok(req) = self.requests.lock() {
            for (id, n) in req.iter() {
                if let Some(a) = by_account.get_mut(id) {
                    a.requests = n.client;
                    a.upstream_requests = n.upstream;
                }
            }
        }
        IdentityStatus {
            share: self.share,
            resolver: self.github_api.is_some(),
            accounts: by_account.into_values().collect(),
            resolved: self.resolved.load(Relaxed),
            learned: self.learned.load(Relaxed),
            failed: self.failures.load(Relaxed),
            unauthorized: self.unauthorized.load(Relaxed),
        }
    }
}

/// `[identity]` at work: which accounts the credentials seen belong to, and how resolution
/// went.
#[derive(Debug, Clone, Serialize)]
pub struct IdentityStatus {
    pub share: ShareMode,
    /// A `github-api` upstream is configured, so credentials can be resolved at all.
    pub resolver: bool,
    pub accounts: Vec<AccountStatus>,
    /// `/user` resolutions that named an account, failed (no answer to go by), or were
    /// refused (401).
    pub resolved: u64,
    /// Mappings learned (or renewed) from a client's own `GET /user` answer, which spared
    /// Weir a call of its own.
    pub learned: u64,
    pub failed: u64,
    pub unauthorized: u64,
}

/// One GitHub account behind some of the credentials seen.
#[derive(Debug, Clone, Serialize)]
pub struct AccountStatus {
    pub login: String,
    pub account_id: u64,
    /// Credentials (distinct tokens) mapped to this account.
    pub credentials: u64,
    pub token_kinds: Vec<TokenKind>,
    /// Requests to managed upstreams made with this account's mapped credentials.
    pub requests: u64,
    /// Requests Weir sent upstream with them (shared answers make this the smaller number).
    pub upstream_requests: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, kind: TokenKind, scopes: &[&str]) -> AccountRecord {
        AccountRecord {
            account_id: id,
            login: format!("user{id}"),
            kind,
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            client_id: None,
            resolved_at_ms: crate::time_fmt::now_ms(),
        }
    }

    /// The thread's kept lookups ([`seen`]) give what the table says now: along a walk of
    /// mappings made, changed and dropped in two tables on one thread (more credentials than
    /// a thread keeps), each credential's sharing identity and counted account is the one read
    /// from the table at that moment.
    #[tokio::test]
    async fn kept_lookups_follow_every_change_of_the_table() {
        let settings = Settings {
            share: ShareMode::Account,
            ..Settings::default()
        };
        let tables = [
            Accounts::in_memory(&settings, IdentityKey::new([3; 32])),
            Accounts::in_memory(&settings, IdentityKey::new([4; 32])),
        ];
        let ids: Vec<Identity> = (1..=7u8)
            .map(|i| Identity::from_hex(&format!("{i:02x}").repeat(32)).unwrap())
            .collect();
        let kinds = [TokenKind::Oauth, TokenKind::Classic, TokenKind::FineGrained];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..3000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = &tables[(x % 2) as usize];
            let id = ids[((x >> 8) % ids.len() as u64) as usize];
            match (x >> 16) % 4 {
                0 => a.forget(&id),
                1 | 2 => {
                    let scopes: &[&str] = if (x >> 20).is_multiple_of(2) {
                        &["repo"]
                    } else {
                        &[]
                    };
                    a.remember(
                        id,
                        rec((x >> 24) % 3, kinds[((x >> 28) % 3) as usize], scopes),
                    );
                }
                _ => {}
            }
            for a in &tables {
                for id in &ids {
                    let want = match a.record(id) {
                        Some(r) => a.sharing_of(id, &r),
                        None => *id,
                    };
                    assert_eq!(a.sharing_identity(id), want, "step {step}");
                    let counted = a.with_record(id, |r, _| r.map(|r| r.account_id));
                    assert_eq!(counted, a.record(id).map(|r| r.account_id), "step {step}");
                }
            }
        }
    }

    #[tokio::test]
    async fn sharing_follows_the_rule_and_a_401_undoes_it() {
        let settings = Settings {
            share: ShareMode::Account,
            ..Settings::default()
        };
        let a = Accounts::in_memory(&settings, IdentityKey::new([3; 32]));
        let ids: Vec<Identity> = (1..=6u8)
            .map(|i| Identity::from_hex(&format!("{i:02x}").repeat(32)).unwrap())
            .collect();
        // Unknown: its own identity.
        assert_eq!(a.sharing_identity(&ids[0]), ids[0]);
        a.remember(ids[0], rec(1, TokenKind::Oauth, &["repo", "workflow"]));
        a.remember(ids[1], rec(1, TokenKind::Classic, &["repo"]));
        a.remember(ids[2], rec(1, TokenKind::Oauth, &["public_repo"]));
        a.remember(ids[3], rec(1, TokenKind::FineGrained, &[]));
        a.remember(ids[4], rec(2, TokenKind::Oauth, &["repo"]));
        let s = |i: usize| a.sharing_identity(&ids[i]);
        assert_eq!(s(0), s(1), "same account, both grant repo, OAuth + classic");
        assert_ne!(s(0), ids[0]);
        assert_ne!(s(0), s(2), "a different answer to `repo`");
        assert_eq!(s(3), ids[3], "a fine-grained PAT never shares");
        assert_ne!(s(0), s(4), "two accounts never share");
        a.forget(&ids[1]);
        assert_eq!(s(1), ids[1], "a 401 drops the mapping");
        let st = a.status();
        assert_eq!(st.accounts.len(), 2);
        assert_eq!(st.accounts[0].login, "user1");
        assert_eq!(st.accounts[0].credentials, 3);

        // One token under both spellings: one credential; a 401 to either forgets both.
        for (first, then) in [("token", "Bearer"), ("Bearer", "token")] {
            let auth = |scheme: &str| {
                let mut h = http::HeaderMap::new();
                h.insert(
                    http::header::AUTHORIZATION,
                    format!("{scheme} gho_same").parse().unwrap(),
                );
                h
            };
            let (a1, a2) = (auth(first), auth(then));
            let (i1, i2) = (a.identify(&a1), a.identify(&a2));
            assert_ne!(i1, i2);
            a.remember_token(
                i1,
                &a1[http::header::AUTHORIZATION],
                rec(3, TokenKind::Oauth, &["repo"]),
            );
            assert_eq!(a.record(&i2).map(|r| r.account_id), Some(3));
            let n = |a: &Accounts| {
                a.status()
                    .accounts
                    .iter()
                    .find(|s| s.account_id == 3)
                    .map(|s| s.credentials)
            };
            assert_eq!(n(&a), Some(1));
            a.forget(&i2);
            assert!(a.record(&i1).is_none() && a.record(&i2).is_none());
            assert_eq!(n(&a), None);
        }

        let cred = Settings {
            share: ShareMode::Credential,
            ..Settings::default()
        };
        let c = Accounts::in_memory(&cred, IdentityKey::new([3; 32]));
        c.remember(ids[0], rec(1, TokenKind::Oauth, &["repo"]));
        assert_eq!(c.sharing_identity(&ids[0]), ids[0]);
    }
}
