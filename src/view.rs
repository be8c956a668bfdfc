//! Plain data shared by the event stream ([`crate::events`]) and the status document
//! ([`crate::status`]), and by peers that must not import each other (mode and network both
//! say who chose; config and policy both speak of sharing). A leaf: it imports nothing of the
//! crate, so every part may use it without making a cycle. Each type is re-exported where its
//! producer lives (`mode::ModeKind`, `network::MeteredSource`, `config::ShareMode`, ...), which
//! stays its public path.

use serde::{Deserialize, Serialize};

/// What Weir does right now: the chosen mode, or `offline` inside automatic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeKind {
    Automatic,
    Offline,
    CacheOnly,
    PassThrough,
}

impl ModeKind {
    pub const ALL: [ModeKind; 4] = [
        ModeKind::Automatic,
        ModeKind::Offline,
        ModeKind::CacheOnly,
        ModeKind::PassThrough,
    ];

    /// As serialised (snake_case).
    pub fn as_str(self) -> &'static str {
        match self {
            ModeKind::Automatic => "automatic",
            ModeKind::Offline => "offline",
            ModeKind::CacheOnly => "cache_only",
            ModeKind::PassThrough => "pass_through",
        }
    }
}

/// Who chose the current mode, or the metered-network override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChosenBy {
    /// Nobody: automatic is the default.
    Default,
    Dashboard,
    Cli,
    Tray,
    /// Another client of the control API (or the old pause endpoint).
    Api,
}

/// Where the effective metered answer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeteredSource {
    /// The developer's override.
    Forced,
    /// The OS's report.
    Os,
    /// Neither: no override and no OS information, so not metered.
    Default,
}

/// `[identity] share`: list/view answers are shared between the credentials of one GitHub
/// account whose access is the same (`Account`, see `crate::accounts`); of one account and one
/// OAuth app (`App`: the `X-OAuth-Client-Id` GitHub names on `/user`, for an organisation that
/// restricts OAuth apps or requires SSO authorisation per app); or never shared between
/// credentials (`Credential`). Ordered from loosest to strictest: the org policy file's mode is
/// a floor the user's cannot go below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMode {
    Account,
    App,
    Credential,
}

impl ShareMode {
    pub fn parse(s: &str) -> Option<ShareMode> {
        match s {
            "account" => Some(ShareMode::Account),
            "app" => Some(ShareMode::App),
            "credential" => Some(ShareMode::Credential),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ShareMode::Account => "account",
            ShareMode::App => "app",
            ShareMode::Credential => "credential",
        }
    }
}

/// Where a settings change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingsSource {
    /// `PUT /_weir/api/settings` (the dashboard, the tray).
    Api,
    /// The config file changed on disk.
    File,
}

/// A refused config file: where and what (built from a `config::ConfigError` by
/// `SettingsError::from_config`, which lives with the error in `config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingsError {
    pub file: String,
    /// 1-based line, when the problem has one.
    pub line: Option<usize>,
    /// The config key, when the problem has one.
    pub key: Option<String>,
    pub message: String,
    pub at: String,
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, &self.key) {
            (Some(l), Some(k)) => write!(f, "{}:{l}: key `{k}`: {}", self.file, self.message),
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// A session's group, from the state the agents API reports (`state`).
///
/// `queued`/`in_progress` are running; `completed` with a pull request, and `waiting_for_user`,
/// are ready for review (the agent waits for you); `failed`/`timed_out`/`error` failed;
/// `completed` without a pull request and `cancelled` finished. Anything else is `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionGroup {
    Running,
    ReadyForReview,
    Failed,
    Finished,
    Other,
}

/// One agent session as Weir shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub id: String,
    pub group: SessionGroup,
    /// The agents API's own state word (`in_progress`, `completed`, ...).
    pub state: String,
    /// `owner/repo`, when the list names it.
    pub repository: Option<String>,
    /// The session's name, title or problem statement.
    pub title: Option<String>,
    /// RFC 3339.
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// The pull request (https only).
    pub pull_request_url: Option<String>,
    /// Where to open the session: the PR's agent-session page, else GitHub's agents page.
    pub url: String,
}
