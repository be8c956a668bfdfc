//! Queue items: what the engine hands in ([`NewItem`]), what it gets back ([`Item`]), their
//! [`State`]s, and the row mapping between them and SQLite.

use std::fmt;
use std::str::FromStr;

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, Type, ValueRef};
use serde::{Deserialize, Serialize};

/// Where an item is in its life. Serialised snake_case (`"in_doubt"`), which is also how it
/// is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for its `next_attempt_at` and a healthy upstream.
    Queued,
    /// Being sent right now.
    Replaying,
    /// A send may or may not have reached the upstream (Weir stopped mid-send, or the answer
    /// was lost): look it up upstream before sending again.
    InDoubt,
    /// Created upstream; `result` says what was created.
    Done,
    /// Given up after a definite error; `last_error` says why. Can be retried by hand.
    Failed,
    /// Cancelled by the user.
    Cancelled,
    /// Not sent within the configured maximum age.
    Expired,
    /// Offered to the developer's local agent (#14), waiting for a confirmation; never
    /// replayed while offered. It holds its dedupe key like a queued create.
    Offered,
    /// The developer confirmed the offer and the local agent command was started (once);
    /// its offer row (`handoff_offers`, [`crate::HandOffRecord`]) records its outcome.
    HandedOff,
}

impl State {
    /// Every state, in life-cycle order.
    pub const ALL: [State; 9] = [
        State::Queued,
        State::Replaying,
        State::InDoubt,
        State::Done,
        State::Failed,
        State::Cancelled,
        State::Expired,
        State::Offered,
        State::HandedOff,
    ];

    /// The stored / serialised name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Replaying => "replaying",
            State::InDoubt => "in_doubt",
            State::Done => "done",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Expired => "expired",
            State::Offered => "offered",
            State::HandedOff => "handed_off",
        }
    }

    /// Still waiting to reach the upstream (or, offered, for the developer's answer); at
    /// most one live item may hold a dedupe key.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            State::Queued | State::Replaying | State::InDoubt | State::Offered
        )
    }

    /// The item's life has ended: its keychain secret can be deleted.
    pub fn is_end(self) -> bool {
        !self.is_live()
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of the state names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown queue state '{0}'")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

impl ToSql for State {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for State {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

/// The upstream a create is for, by its configured name: the id that survives restarts and
/// config reloads (an index into the upstream list would not), and what the replay worker and
/// the breaker key on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct UpstreamId(String);

impl UpstreamId {
    pub fn new(name: impl Into<String>) -> UpstreamId {
        UpstreamId(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for UpstreamId {
    fn from(name: &str) -> UpstreamId {
        UpstreamId(name.to_owned())
    }
}

impl fmt::Display for UpstreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ToSql for UpstreamId {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0.as_str()))
    }
}

impl FromSql for UpstreamId {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        Ok(UpstreamId(value.as_str()?.to_owned()))
    }
}

/// A stored method name that is not an HTTP method.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown HTTP method '{0}'")]
pub struct BadMethod(pub String);

/// Reads a stored method (an `http::Method`'s text).
pub fn parse_method(text: &str) -> Result<http::Method, BadMethod> {
    text.parse().map_err(|_| BadMethod(text.to_owned()))
}

fn method_text<S: serde::Serializer>(m: &http::Method, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.as_str())
}

/// A create to keep until it can be sent. Holds no secrets: credentials stay in the keychain
/// under `credential_ref`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewItem {
    /// e.g. "copilot".
    pub upstream: UpstreamId,
    pub method: http::Method,
    pub path_and_query: String,
    /// Non-secret request headers only (no Authorization, no cookies).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Keyed hash of the caller's identity, hex.
    pub identity: String,
    /// Keychain account holding the credential for the replay.
    pub credential_ref: Option<String>,
    /// Same create → same key; at most one live item per key.
    pub dedupe_key: String,
    /// "owner/repo" from the path.
    pub repo: Option<String>,
    pub problem_statement: Option<String>,
    /// The first attempt may have reached the upstream (it timed out after sending): the item
    /// starts `in_doubt` and is looked up upstream before any replay.
    pub in_doubt: bool,
    /// The provisional job and session ids Weir answered the client with while the create
    /// waits (`None` for items stored before they existed and offers made by hand).
    pub provisional: Option<Provisional>,
}

/// The ids Weir hands a client for a create it queued, in the upstream's own id form, so the
/// client can follow the job and its session before (and after) the real ones exist. Unique
/// per item; the real ids are in the item's `result` once it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provisional {
    pub job_id: String,
    pub session_id: String,
}

/// A stored item. Times are unix milliseconds from the caller's clock.
///
/// `Serialize` leaves out the body: listings (dashboard, control API) do not need to ship
/// request bodies around.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    pub id: i64,
    pub upstream: UpstreamId,
    #[serde(serialize_with = "method_text")]
    pub method: http::Method,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    #[serde(skip_serializing)]
    pub body: Vec<u8>,
    pub identity: String,
    pub credential_ref: Option<String>,
    pub dedupe_key: String,
    pub repo: Option<String>,
    pub problem_statement: Option<String>,
    pub state: State,
    pub created_at: i64,
    /// Sends started (incremented by `mark_replaying`).
    pub attempts: u32,
    pub next_attempt_at: i64,
    pub last_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    /// What the create came to: what the upstream made or refused (a hand-off's record is in
    /// its own table, [`crate::HandOffRecord`]).
    pub result: Option<ItemResult>,
    pub updated_at: i64,
    /// An earlier send may have reached the upstream: look it up before sending again. Set on
    /// entering `in_doubt`, kept through cancel/fail/expire so `retry` returns the item to
    /// `in_doubt`, cleared by `mark_replaying` (the caller looked and found nothing).
    pub needs_lookup: bool,
    /// The provisional ids the client was answered with (see [`Provisional`]).
    pub provisional: Option<Provisional>,
}

/// What an item's create came to: the `result` column, stored as JSON under these names (the
/// layout earlier versions wrote, so their rows read the same). Which fields are set depends
/// on how the item ended:
/// - `done`, replayed: `status` and what the upstream's answer named (`job_id`, `session_id`,
///   `pull_request`);
/// - `done`, found upstream by the in-doubt lookup: `found_by_lookup`, the ids and the
///   upstream's `session` object;
/// - `failed`, refused upstream: `status` and the upstream's `message` (its error shape);
/// - `offered` / `handed_off`: nothing; the hand-off's record is the item's row in
///   `handoff_offers` ([`crate::HandOffRecord`]). Schema 4 moved the keys earlier versions
///   kept here (`handoff`, `running`, `program`, …) into that table; one left behind (a row
///   the migration could not read) is kept in `other`, as any unknown key is.
///
/// Read leniently ([`ItemResult::from`] a JSON value): keys this version does not know, and a
/// known key holding another type than its field's, are kept in `other`, so one odd row never
/// makes the queue unreadable and nothing a row holds is lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "serde_json::Value")]
pub struct ItemResult {
    /// The upstream's HTTP status for the create (2xx when done, its refusal when failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "id"
    )]
    pub job_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "id"
    )]
    pub session_id: Option<String>,
    /// As the upstream sent it: its shape is not known (a number, an object or a URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<serde_json::Value>,
    /// The create was found upstream by the in-doubt lookup, not sent again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found_by_lookup: bool,
    /// The upstream's session object the lookup found, as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<serde_json::Value>,
    /// Why it failed: the upstream's own message, or Weir's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The stored text of a result. Its fields are numbers, strings and JSON values under string
/// keys, which serialise without fail; were that ever not so, `{}` (an empty result, which
/// reads back) is stored rather than text nothing could read.
pub(crate) fn result_json(r: &ItemResult) -> String {
    serde_json::to_string(r).unwrap_or_else(|_| "{}".into())
}

impl From<serde_json::Value> for ItemResult {
    fn from(v: serde_json::Value) -> ItemResult {
        let mut map = match v {
            serde_json::Value::Object(m) => m,
            serde_json::Value::Null => serde_json::Map::new(),
            // Not an object: kept whole.
            other => serde_json::Map::from_iter([("value".to_string(), other)]),
        };
        let mut r = ItemResult::default();
        // Takes `key` out of the map when `read` accepts its value; otherwise it stays in it.
        fn take<T>(
            map: &mut serde_json::Map<String, serde_json::Value>,
            key: &str,
            read: impl Fn(&serde_json::Value) -> Option<T>,
        ) -> Option<T> {
            let v = map.get(key)?;
            if v.is_null() {
                map.remove(key);
                return None;
            }
            let t = read(v)?;
            map.remove(key);
            Some(t)
        }
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let any = |v: &serde_json::Value| Some(v.clone());
        r.status = take(&mut map, "status", |v| {
            v.as_u64().and_then(|n| u16::try_from(n).ok())
        });
        r.job_id = take(&mut map, "job_id", ItemResult::id_text);
        r.session_id = take(&mut map, "session_id", ItemResult::id_text);
        r.pull_request = take(&mut map, "pull_request", any);
        r.found_by_lookup =
            take(&mut map, "found_by_lookup", serde_json::Value::as_bool).unwrap_or(false);
        r.session = take(&mut map, "session", any);
        r.message = take(&mut map, "message", text);
        r.other = map;
        r
    }
}

impl ItemResult {
    /// An id as the upstream wrote it: text, or a number (kept as its text); anything else
    /// (`null`) is none.
    pub fn id_text(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// The columns `Item::from_row` reads, in a form to paste after SELECT or RETURNING.
pub(crate) const COLUMNS: &str = "id, upstream, method, path_and_query, headers, body, \
     identity, credential_ref, dedupe_key, repo, problem_statement, state, created_at, \
     attempts, next_attempt_at, last_attempt_at, last_error, result, updated_at, needs_lookup, \
     provisional_job_id, provisional_session_id";

impl Item {
    pub(crate) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Item> {
        Ok(Item {
            id: row.get("id")?,
            upstream: row.get("upstream")?,
            method: {
                let text: String = row.get("method")?;
                parse_method(&text).map_err(|e| {
                    let index = row.as_ref().column_index("method").unwrap_or(0);
                    rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(e))
                })?
            },
            path_and_query: row.get("path_and_query")?,
            headers: json_column(row, "headers")?,
            body: row.get("body")?,
            identity: row.get("identity")?,
            credential_ref: row.get("credential_ref")?,
            dedupe_key: row.get("dedupe_key")?,
            repo: row.get("repo")?,
            problem_statement: row.get("problem_statement")?,
            state: row.get("state")?,
            created_at: row.get("created_at")?,
            attempts: row.get("attempts")?,
            next_attempt_at: row.get("next_attempt_at")?,
            last_attempt_at: row.get("last_attempt_at")?,
            last_error: row.get("last_error")?,
            result: row
                .get::<_, Option<String>>("result")?
                .map(|text| parse_json(row, "result", &text))
                .transpose()?,
            updated_at: row.get("updated_at")?,
            needs_lookup: row.get("needs_lookup")?,
            provisional: match (
                row.get::<_, Option<String>>("provisional_job_id")?,
                row.get::<_, Option<String>>("provisional_session_id")?,
            ) {
                (Some(job_id), Some(session_id)) => Some(Provisional { job_id, session_id }),
                _ => None,
            },
        })
    }
}

fn json_column<T: serde::de::DeserializeOwned>(
    row: &rusqlite::Row<'_>,
    name: &str,
) -> rusqlite::Result<T> {
    let text: String = row.get(name)?;
    parse_json(row, name, &text)
}

/// A JSON column that does not parse is reported like any other bad stored value.
fn parse_json<T: serde::de::DeserializeOwned>(
    row: &rusqlite::Row<'_>,
    name: &str,
    text: &str,
) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        let index = row.as_ref().column_index(name).unwrap_or(0);
        rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(e))
    })
}

/// What the live items (waiting to reach the upstream, offers included) take, in total and
/// for one identity: the numbers the queue's caps are checked against. Bytes are the stored
/// body and headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub items: u64,
    pub bytes: u64,
    pub identity_items: u64,
    pub identity_bytes: u64,
}

/// Items per state, e.g. for the dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCounts {
    pub queued: u64,
    pub replaying: u64,
    pub in_doubt: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub expired: u64,
    pub offered: u64,
    pub handed_off: u64,
}

impl StateCounts {
    pub fn get(&self, state: State) -> u64 {
        *self.slot(state)
    }

    /// Items still waiting to reach the upstream (offers to the local agent included).
    pub fn live(&self) -> u64 {
        self.queued + self.replaying + self.in_doubt + self.offered
    }

    pub fn total(&self) -> u64 {
        State::ALL.into_iter().map(|s| self.get(s)).sum()
    }

    pub(crate) fn slot_mut(&mut self, state: State) -> &mut u64 {
        match state {
            State::Queued => &mut self.queued,
            State::Replaying => &mut self.replaying,
            State::InDoubt => &mut self.in_doubt,
            State::Done => &mut self.done,
            State::Failed => &mut self.failed,
            State::Cancelled => &mut self.cancelled,
            State::Expired => &mut self.expired,
            State::Offered => &mut self.offered,
            State::HandedOff => &mut self.handed_off,
        }
    }

    fn slot(&self, state: State) -> &u64 {
        match state {
            State::Queued => &self.queued,
            State::Replaying => &self.replaying,
            State::InDoubt => &self.in_doubt,
            State::Done => &self.done,
            State::Failed => &self.failed,
            State::Cancelled => &self.cancelled,
            State::Expired => &self.expired,
            State::Offered => &self.offered,
            State::HandedOff => &self.handed_off,
        }
    }
}

/// Which items `Store::list` returns: newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only these states; empty means all.
    pub states: Vec<State>,
    pub limit: u32,
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter {
            states: Vec::new(),
            limit: 100,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_text_and_serde() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(State::InDoubt.as_str(), "in_doubt");
        assert!("In_Doubt".parse::<State>().is_err());
    }

    #[test]
    fn live_and_end_states_partition_all() {
        let live: Vec<_> = State::ALL.into_iter().filter(|s| s.is_live()).collect();
        assert_eq!(
            live,
            [
                State::Queued,
                State::Replaying,
                State::InDoubt,
                State::Offered
            ]
        );
        assert!(State::ALL.into_iter().all(|s| s.is_live() != s.is_end()));
    }

    /// The stored forms earlier versions wrote read into the typed fields; a key this version
    /// does not know is kept, and written back.
    #[test]
    fn results_read_the_stored_forms_and_keep_unknown_keys() {
        let read = |v: serde_json::Value| serde_json::from_value::<ItemResult>(v).unwrap();
        let done = read(serde_json::json!(
            {"status": 201, "job_id": "j1", "session_id": "s1", "pull_request": null}
        ));
        assert_eq!(
            (
                done.status,
                done.job_id.as_deref(),
                done.session_id.as_deref()
            ),
            (Some(201), Some("j1"), Some("s1"))
        );
        assert_eq!(done.pull_request, None);
        // A numeric id (an upstream's `id`) is kept as its text; `null` is none.
        let numeric = read(serde_json::json!({"job_id": 42, "session_id": null}));
        assert_eq!(
            (numeric.job_id.as_deref(), numeric.session_id),
            (Some("42"), None)
        );
        let found = read(serde_json::json!(
            {"found_by_lookup": true, "job_id": "j2", "session": {"id": "s2"}}
        ));
        assert!(found.found_by_lookup);
        assert_eq!(found.session.unwrap()["id"], "s2");
        let refused = read(serde_json::json!({"status": 422, "message": "no such repo"}));
        assert_eq!(refused.message.as_deref(), Some("no such repo"));
        // The hand-off keys of a row the schema-4 migration left (it moves them): kept, as
        // unknown keys are, and written back.
        let handed = read(serde_json::json!(
            {"handoff": {"rule": "r"}, "running": false, "outcome": {"exit_code": 0}, "later": 1}
        ));
        assert_eq!(handed.other.get("later"), Some(&serde_json::json!(1)));
        assert_eq!(handed.other.get("running"), Some(&serde_json::json!(false)));
        // A known key of another type stays, under its name, in `other`; the rest still reads.
        let odd = read(serde_json::json!({"status": "x", "message": 7, "job_id": "j3"}));
        assert_eq!(
            (odd.status, odd.message.as_deref(), odd.job_id.as_deref()),
            (None, None, Some("j3"))
        );
        assert_eq!(odd.other.get("status"), Some(&serde_json::json!("x")));
        assert_eq!(serde_json::to_value(&odd).unwrap()["message"], 7);
        // Not even an object: kept whole.
        assert_eq!(
            read(serde_json::json!([1])).other.get("value"),
            Some(&serde_json::json!([1]))
        );
        let written = serde_json::to_value(&handed).unwrap();
        assert_eq!(written["later"], 1);
        assert_eq!(written["outcome"]["exit_code"], 0);
        assert!(
            written.get("found_by_lookup").is_none(),
            "false is left out"
        );
    }
}
