//! Why a hand-off step was refused, and the HTTP status the control API answers with.

use weir_store::{State, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("no local agent is configured: add a [local_agent] table with a command")]
    NotConfigured,
    #[error("no local checkout of {repo} was found: add it to local_agent.checkouts, or clone it under one of local_agent.roots")]
    NoCheckout { repo: String },
    #[error("the create queue is unavailable, so nothing can be offered: {0}")]
    QueueUnavailable(String),
    /// A team gateway's queue is shared by many developers: it runs no one's local agent.
    #[error("this Weir is a team gateway: it runs no developer's local agent")]
    Gateway,
    /// The same create is already in the queue (not as an offer): answer as for a queued one.
    #[error("this create is already queued as item {id}")]
    AlreadyQueued { id: i64 },
    #[error("there is no hand-off offer {id}")]
    NotFound { id: i64 },
    /// Confirmed, declined or expired already: the command never runs twice.
    #[error("offer {id} was already answered: the create is now {state}")]
    Answered { id: i64, state: State },
    /// A value the command would receive starts with `-`: a program would read it as an
    /// option (`--allow-all-tools` hidden in a base branch or a statement).
    #[error("the local agent was not started: {{{placeholder}}} begins with `-`, which the command would read as an option; use {{problem_statement_file}} for a statement, or decline")]
    OptionLike { placeholder: &'static str },
}

impl HandoffError {
    /// The HTTP status the control API answers with.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            HandoffError::NotConfigured
            | HandoffError::NoCheckout { .. }
            | HandoffError::OptionLike { .. }
            | HandoffError::Gateway => S::CONFLICT,
            HandoffError::QueueUnavailable(_) => S::SERVICE_UNAVAILABLE,
            HandoffError::AlreadyQueued { .. } | HandoffError::Answered { .. } => S::CONFLICT,
            HandoffError::NotFound { .. } => S::NOT_FOUND,
        }
    }

    pub(super) fn from_store(id: i64, e: StoreError) -> HandoffError {
        match e {
            StoreError::IllegalTransition { from, .. } => {
                HandoffError::Answered { id, state: from }
            }
            StoreError::NotFound { .. } => HandoffError::NotFound { id },
            e => HandoffError::QueueUnavailable(format!("{}. {}", e.detail(), e.fix())),
        }
    }
}
