//! A Task API task and its events pages, published together (issue #29).
//!
//! VS Code's `TaskTurnStreamer` (microsoft/vscode `extensions/copilot/src/extension/
//! chatSessions/vscode-node/taskTurnStreamer.ts`) asks for the task and every events page at
//! once (`Promise.all`), every 2 s, and stops at the first answer whose task is no longer
//! active. A failed events fetch reads as no events (`_fetchEvents` returns `[]`). So an events
//! copy older than the task copy answered beside it ends the turn without its last events: the
//! developer's-hour run lost 62 of ~362 on Oct 29 that way, each page being its own cache key,
//! refreshed (and paced) on its own.
//!
//! The rule: **a task copy whose turn moved (its state, its latest turn's state or its number
//! of turns changed: what the streamer stops or starts on) is stored only after every events
//! page that the same identity follows for that task was fetched again, by a request sent
//! after the task's answer came; and the requests waiting for that refresh get the copy in
//! hand**, since the events request of their poll may already have been answered. If one of
//! those events fetches fails, the new task copy is not stored: the streamer keeps polling the
//! copy in hand (still active). So the poll that first sees a turn end was answered the task
//! copy after its events were stored. Left open: a poll whose events request is answered in
//! the microseconds before the pages are stored and whose task request just after the task
//! copy is (both are stored in one flight, back to back). A copy whose turn did not move is
//! stored and answered at once, as any view.
//!
//! Which pages a task has is learned from the events requests themselves ([`Groups::follow`]):
//! pages a client never asked are not fetched.

use crate::cache::CacheKey;
use crate::config::{Family, RouteClass, UpstreamIndex};
use crate::identity::Identity;
use http::{HeaderMap, Uri};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A task of one upstream as one (sharing) identity sees it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) struct Group {
    up: UpstreamIndex,
    keyed: Identity,
    task: Box<str>,
}

/// What a request is to its task's group.
#[derive(Clone, Debug)]
pub(super) enum Member {
    /// `GET …/tasks/{id}` (either prefix, or under `repos/{o}/{r}`).
    Task(Group),
    /// `GET …/tasks/{id}/events?…` (any page).
    Events(Group),
}

/// One events page as it was asked: enough to ask it again.
#[derive(Clone)]
pub(super) struct Page {
    pub key: CacheKey,
    pub uri: Uri,
    pub headers: HeaderMap,
}

/// A task with more pages than this is followed by its first pages only (100 events a page:
/// 3,200 events); the rest are refreshed on their own, as before.
const MAX_PAGES: usize = 32;
/// Tasks followed at once, across identities.
const MAX_GROUPS: u64 = 4096;
/// A task nobody asked about for this long is no longer followed.
const IDLE: Duration = Duration::from_secs(600);

/// The events pages each task's followers ask, per group.
#[derive(Clone)]
pub(super) struct Groups {
    pages: moka::sync::Cache<Group, Arc<Mutex<Vec<Page>>>>,
}

impl Default for Groups {
    fn default() -> Self {
        Groups {
            pages: moka::sync::Cache::builder()
                .max_capacity(MAX_GROUPS)
                .time_to_idle(IDLE)
                .build(),
        }
    }
}

impl Groups {
    /// Remembers that `page` is one of `group`'s events pages.
    pub(super) fn follow(&self, group: &Group, page: Page) {
        let pages = self.pages.get_with(group.clone(), Default::default);
        let Ok(mut pages) = pages.lock() else { return };
        if let Some(p) = pages.iter_mut().find(|p| p.key == page.key) {
            // The newest request's headers: a client that changed its API version asks so.
            *p = page;
        } else if pages.len() < MAX_PAGES {
            pages.push(page);
        }
    }

    /// Whether any events page is followed for `group`.
    pub(super) fn follows(&self, group: &Group) -> bool {
        self.pages
            .get(group)
            .is_some_and(|p| p.lock().is_ok_and(|p| !p.is_empty()))
    }

    /// The events pages followed for `group`, in the order first asked.
    pub(super) fn pages(&self, group: &Group) -> Vec<Page> {
        self.pages
            .get(group)
            .and_then(|p| p.lock().ok().map(|p| p.clone()))
            .unwrap_or_default()
    }
}

/// Whether a task copy's turn moved from `old` to `new`: what `TaskTurnStreamer` stops on
/// (the task's `state`, the latest of its `sessions[]`' `state`) or starts on (the number of
/// `sessions`). An answer that is not a task (an error) moves nothing.
pub(super) fn turn_moved(old: &[u8], new: &[u8]) -> bool {
    #[derive(serde::Deserialize, PartialEq)]
    struct Session {
        state: Option<String>,
    }
    #[derive(serde::Deserialize, PartialEq)]
    struct Task {
        state: Option<String>,
        #[serde(default)]
        sessions: Vec<Session>,
    }
    let turn = |t: Task| (t.state, t.sessions.len(), t.sessions.into_iter().last());
    match (
        serde_json::from_slice::<Task>(old),
        serde_json::from_slice::<Task>(new),
    ) {
        (Ok(a), Ok(b)) => turn(a) != turn(b),
        _ => false,
    }
}

/// What `path` is to its task's group, for a Task API view asked under `keyed`'s identity.
pub(super) fn member(
    family: Family,
    class: RouteClass,
    up: UpstreamIndex,
    keyed: &Identity,
    path: &str,
) -> Option<Member> {
    if family != Family::Tasks || class != RouteClass::View {
        return None;
    }
    let (task, events) = task_of(path)?;
    let group = Group {
        up,
        keyed: *keyed,
        task: task.into(),
    };
    Some(match events {
        true => Member::Events(group),
        false => Member::Task(group),
    })
}

/// The task id a Task API path names, and whether it is the task's events: `…/tasks/{id}` or
/// `…/tasks/{id}/events` (the route table has already matched the rest of the path).
fn task_of(path: &str) -> Option<(&str, bool)> {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match parts.as_slice() {
        [.., "tasks", id, "events"] => Some((id, true)),
        [.., "tasks", id] => Some((id, false)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_and_its_events_are_one_group_under_either_prefix() {
        let up = UpstreamIndex::at(0);
        let who = Identity::from_hex(&"7".repeat(64)).unwrap();
        let m = |p: &str| member(Family::Tasks, RouteClass::View, up, &who, p);
        let Some(Member::Task(a)) = m("/cmc_internal/api/agents/tasks/t1") else {
            panic!("a task")
        };
        let Some(Member::Task(b)) = m("/agents/repos/o/r/tasks/t1") else {
            panic!("a task under its repository")
        };
        let Some(Member::Events(c)) = m("/cmc_internal/api/agents/tasks/t1/events") else {
            panic!("its events")
        };
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert!(m("/agents/tasks").is_none(), "a list is no task");
        assert!(
            member(Family::Upstream, RouteClass::View, up, &who, "/x/tasks/t1").is_none(),
            "only the Task API's family"
        );
        let other = Identity::from_hex(&"8".repeat(64)).unwrap();
        let Some(Member::Task(d)) = member(
            Family::Tasks,
            RouteClass::View,
            up,
            &other,
            "/agents/tasks/t1",
        ) else {
            panic!("a task")
        };
        assert_ne!(a, d, "another identity's task is another group");
    }

    #[test]
    fn a_turn_moves_on_the_states_and_turns_the_streamer_reads() {
        let t = |state: &str, turns: &[&str]| {
            let sessions: Vec<_> = turns
                .iter()
                .map(|s| serde_json::json!({"state": s}))
                .collect();
            serde_json::json!({"state": state, "updated_at": state.len(), "sessions": sessions})
                .to_string()
        };
        let a = t("in_progress", &["in_progress"]);
        assert!(!turn_moved(a.as_bytes(), a.as_bytes()));
        let b = t("completed", &["in_progress"]);
        assert!(turn_moved(a.as_bytes(), b.as_bytes()), "the task settled");
        let c = t("in_progress", &["completed"]);
        assert!(turn_moved(a.as_bytes(), c.as_bytes()), "its turn settled");
        let d = t("in_progress", &["completed", "queued"]);
        assert!(turn_moved(c.as_bytes(), d.as_bytes()), "a new turn");
        assert!(!turn_moved(a.as_bytes(), b"<html>"), "not a task");
    }

    #[test]
    fn pages_are_remembered_once_each_and_bounded() {
        let g = Groups::default();
        let group = Group {
            up: UpstreamIndex::at(0),
            keyed: Identity::from_hex(&"1".repeat(64)).unwrap(),
            task: "t".into(),
        };
        let page = |n: u8| Page {
            key: CacheKey::from_bytes([n; 32]),
            uri: Uri::from_static("/agents/tasks/t/events?page=1"),
            headers: HeaderMap::new(),
        };
        g.follow(&group, page(1));
        g.follow(&group, page(1));
        g.follow(&group, page(2));
        assert_eq!(g.pages(&group).len(), 2);
        for n in 3..100 {
            g.follow(&group, page(n));
        }
        assert_eq!(g.pages(&group).len(), MAX_PAGES);
    }
}
