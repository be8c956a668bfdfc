//! weir-store: the durable queue of session creates that could not be sent yet. A create is
//! committed to SQLite (WAL, `synchronous=FULL`) before Weir answers the client; a replay worker
//! sends it when the upstream is healthy. No secrets are stored: an item names the keychain
//! account holding its credential.
//!
//! # Layout
//! - [`store`]: [`Store`] — opening (pragmas, integrity check, migrations) and queries.
//! - [`machine`]: the state machine as data — the (from, event, to) table, the typed
//!   [`Change`]s, and the SQL rendered from them for SQLite and PostgreSQL.
//! - [`transition`]: [`Store::apply`] and the other writes, in SQLite.
//! - [`item`]: [`NewItem`], [`Item`], [`State`], [`StateCounts`], [`ListFilter`].
//! - [`offer`]: hand-off offers in their own table, pointing at a parked item:
//!   [`HandOffRecord`], and the SQL both backends write it with.
//! - [`schema`](SCHEMA_VERSION): ordered migrations tracked in `PRAGMA user_version`.
//! - [`error`]: [`StoreError`], classified from SQLite's extended result codes.
//! - [`async_store`]: [`AsyncStore`], the same operations from async code on a dedicated
//!   thread.
//!
//! Times are unix milliseconds passed in by the caller (`now_ms`), so tests are
//! deterministic and the store never reads a clock.

pub mod async_store;
pub mod error;
pub mod item;
pub mod machine;
pub mod offer;
mod schema;
pub mod store;
pub mod transition;

pub use async_store::AsyncStore;
pub use error::StoreError;
pub use item::{
    parse_method, BadMethod, Item, ItemResult, ListFilter, NewItem, Provisional, State,
    StateCounts, UnknownState, UpstreamId, Usage,
};
pub use machine::{Change, Dialect, Statement, Transition, Value, TRANSITIONS};
pub use offer::{Confirmation, Finish, HandOffRecord};
pub use schema::SCHEMA_VERSION;
pub use store::{Oldest, Store, StoreOptions};
