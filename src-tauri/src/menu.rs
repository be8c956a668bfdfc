//! The tray menu: typed item IDs ([`MenuId`]) and the live menu ([`TrayMenu`]) whose labels
//! follow the latest [`TrayView`].

use crate::tray_state::{HandoffLines, SessionLine, TrayView};
use tauri::menu::{CheckMenuItem, Menu, MenuItem, PredefinedMenuItem, Submenu};
use tauri::{AppHandle, Runtime};

/// Every clickable (or updatable) line of the tray menu. The string form only exists at the
/// boundary with Tauri; the rest of the shell matches on this enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MenuId {
    /// "Weir: healthy" and friends (informational).
    Overall,
    /// One line per configured upstream, in config order (informational).
    Upstream(usize),
    /// "N creates queued": opens the dashboard's queue view.
    Queue,
    /// GitHub Status line: opens the incident (or status page) in the browser.
    Github,
    /// "Agent sessions: 2 running, 1 ready for review": opens the dashboard's sessions view.
    Sessions,
    /// The n-th line of the recent-sessions submenu: opens that session (or its PR).
    RecentSession(usize),
    /// What teammates' Weirs report (informational; opens the dashboard).
    Team,
    /// A local-agent offer (by its id): opens the dashboard's view of it, which shows the whole
    /// statement and the requesting tool before Confirm. The tray never confirms from a menu
    /// line (a label shows 40 characters of a statement the command would run in full).
    HandoffReview(i64),
    /// The dashboard's local-agent offers.
    Handoffs,
    /// Network submenu: follow what the OS says about metered.
    NetworkAuto,
    /// Network submenu: count the network as metered whatever the OS says.
    NetworkMetered,
    /// Network submenu: count the network as not metered whatever the OS says.
    NetworkNotMetered,
    OpenDashboard,
    /// Opens the dashboard's Set up view.
    Setup,
    TogglePause,
    /// Cache only on/off (the third mode; pause is pass-through).
    ToggleCacheOnly,
    /// Stops the engine and starts the app again (settings that need a restart).
    Restart,
    CopyProxy,
    Autostart,
    /// "Open the dashboard in the browser": the dashboard opens in the user's browser instead
    /// of the tray's window (a check item; see [`crate::browser`]).
    DashboardInBrowser,
    Quit,
}

const UPSTREAM_PREFIX: &str = "upstream-";
const SESSION_PREFIX: &str = "session-";
const REVIEW_PREFIX: &str = "handoff-review-";
/// The local-agent offers submenu's own ID.
const HANDOFF_SUBMENU: &str = "handoff-offers";
/// The submenu's own ID (a submenu is not clickable, but Tauri wants an ID).
const RECENT_SUBMENU: &str = "recent-sessions";
/// The network submenu's own ID.
const NETWORK_SUBMENU: &str = "network";

impl MenuId {
    /// The ID Tauri carries in its menu events.
    pub fn as_id(&self) -> String {
        match self {
            MenuId::Upstream(i) => format!("{UPSTREAM_PREFIX}{i}"),
            MenuId::RecentSession(i) => format!("{SESSION_PREFIX}{i}"),
            MenuId::HandoffReview(id) => format!("{REVIEW_PREFIX}{id}"),
            other => other.fixed_id().to_string(),
        }
    }

    /// The inverse of [`MenuId::as_id`]; `None` for IDs this shell never made.
    pub fn from_id(id: &str) -> Option<MenuId> {
        if let Some(n) = id.strip_prefix(UPSTREAM_PREFIX) {
            return index(n).map(MenuId::Upstream);
        }
        if let Some(n) = id.strip_prefix(SESSION_PREFIX) {
            return index(n).map(MenuId::RecentSession);
        }
        // Offer ids are queue item ids: positive, and never past i64.
        let offer = |n: &str| {
            index(n)
                .and_then(|i| i64::try_from(i).ok())
                .filter(|i| *i > 0)
        };
        if let Some(n) = id.strip_prefix(REVIEW_PREFIX) {
            return offer(n).map(MenuId::HandoffReview);
        }
        FIXED.iter().copied().find(|m| m.fixed_id() == id)
    }

    fn fixed_id(&self) -> &'static str {
        match self {
            MenuId::Overall => "overall",
            MenuId::Upstream(_) => UPSTREAM_PREFIX,
            MenuId::RecentSession(_) => SESSION_PREFIX,
            MenuId::HandoffReview(_) => REVIEW_PREFIX,
            MenuId::Handoffs => "handoffs",
            MenuId::NetworkAuto => "network-auto",
            MenuId::NetworkMetered => "network-metered",
            MenuId::NetworkNotMetered => "network-not-metered",
            MenuId::Team => "team",
            MenuId::Queue => "queue",
            MenuId::Github => "github",
            MenuId::Sessions => "sessions",
            MenuId::OpenDashboard => "open-dashboard",
            MenuId::Setup => "setup",
            MenuId::TogglePause => "toggle-pause",
            MenuId::ToggleCacheOnly => "toggle-cache-only",
            MenuId::Restart => "restart-engine",
            MenuId::CopyProxy => "copy-proxy",
            MenuId::Autostart => "autostart",
            MenuId::DashboardInBrowser => "dashboard-in-browser",
            MenuId::Quit => "quit",
        }
    }
}

/// A decimal index without sign or leading zero, so the ID mapping stays one-to-one.
fn index(n: &str) -> Option<usize> {
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    n.parse().ok()
}

/// The IDs without a payload, for [`MenuId::from_id`].
const FIXED: [MenuId; 18] = [
    MenuId::Overall,
    MenuId::Queue,
    MenuId::Github,
    MenuId::Sessions,
    MenuId::Team,
    MenuId::Handoffs,
    MenuId::NetworkAuto,
    MenuId::NetworkMetered,
    MenuId::NetworkNotMetered,
    MenuId::OpenDashboard,
    MenuId::Setup,
    MenuId::TogglePause,
    MenuId::ToggleCacheOnly,
    MenuId::Restart,
    MenuId::CopyProxy,
    MenuId::Autostart,
    MenuId::DashboardInBrowser,
    MenuId::Quit,
];

/// Label of the [`MenuId::DashboardInBrowser`] check item.
pub const IN_BROWSER_LABEL: &str = "Open the dashboard in the browser";

/// Label of the pause toggle for the current state.
pub fn pause_label(paused: bool) -> &'static str {
    if paused {
        "Resume (Weir is passing traffic through)"
    } else {
        "Pause (pass everything through)"
    }
}

/// Label of the cache-only toggle for the current choice.
pub fn cache_only_label(cache_only: bool) -> &'static str {
    if cache_only {
        "Leave cache only (back to automatic)"
    } else {
        "Cache only (answer from cache, send nothing upstream)"
    }
}

/// The network submenu's three choices: the override each one sets, its ID and its label.
/// `None` follows the OS.
pub const NETWORK_CHOICES: [(Option<bool>, MenuId, &str); 3] = [
    (None, MenuId::NetworkAuto, "Follow the OS"),
    (
        Some(true),
        MenuId::NetworkMetered,
        "Metered (apply the metered-network rules)",
    ),
    (Some(false), MenuId::NetworkNotMetered, "Not metered"),
];

/// What clicking a network choice sets, for the click handler.
pub fn network_choice(id: MenuId) -> Option<Option<bool>> {
    NETWORK_CHOICES
        .iter()
        .find(|(_, m, _)| *m == id)
        .map(|(forced, _, _)| *forced)
}

/// The menu and handles to the items whose labels change.
pub struct TrayMenu<R: Runtime> {
    pub menu: Menu<R>,
    overall: MenuItem<R>,
    upstreams: Vec<MenuItem<R>>,
    queue: MenuItem<R>,
    github: MenuItem<R>,
    sessions: MenuItem<R>,
    recent: Submenu<R>,
    /// Present only when `[team]` was configured at start.
    team: Option<MenuItem<R>>,
    /// Present only when `[local_agent]` was configured at start.
    handoffs: Option<Submenu<R>>,
    /// Titled "Network: …"; its three choices are check items, one checked.
    network: Submenu<R>,
    network_choices: Vec<CheckMenuItem<R>>,
    pause: MenuItem<R>,
    cache_only: MenuItem<R>,
    restart: MenuItem<R>,
    autostart: CheckMenuItem<R>,
    in_browser: CheckMenuItem<R>,
}

impl<R: Runtime> TrayMenu<R> {
    /// Builds the menu for `view`; the number of upstream lines is fixed here (the config does
    /// not change while the app runs).
    pub fn build(
        app: &AppHandle<R>,
        view: &TrayView,
        autostart_on: bool,
        in_browser_on: bool,
    ) -> tauri::Result<Self> {
        let item = |id: MenuId, text: &str, enabled: bool| {
            MenuItem::with_id(app, id.as_id(), text, enabled, None::<&str>)
        };
        let overall = item(MenuId::Overall, &view.overall_line, false)?;
        let upstreams = view
            .upstream_lines
            .iter()
            .enumerate()
            .map(|(i, line)| item(MenuId::Upstream(i), line, false))
            .collect::<tauri::Result<Vec<_>>>()?;
        let queue = item(MenuId::Queue, &view.queue_line, true)?;
        let github = item(MenuId::Github, &view.github_line, true)?;
        let sessions = item(MenuId::Sessions, &view.sessions_line, true)?;
        let recent = Submenu::with_id(app, RECENT_SUBMENU, "Recent agent sessions", true)?;
        fill_recent(app, &recent, &view.recent_sessions)?;
        let team = match &view.team_line {
            Some(line) => Some(item(MenuId::Team, line, true)?),
            None => None,
        };
        let handoffs = match &view.handoffs {
            Some(lines) => {
                let sub = Submenu::with_id(app, HANDOFF_SUBMENU, &lines.title, true)?;
                fill_handoffs(app, &sub, lines)?;
                Some(sub)
            }
            None => None,
        };
        let network = Submenu::with_id(app, NETWORK_SUBMENU, &view.network_line, true)?;
        let network_choices = NETWORK_CHOICES
            .iter()
            .map(|(forced, id, label)| {
                let checked = *forced == view.network_forced;
                CheckMenuItem::with_id(app, id.as_id(), label, true, checked, None::<&str>)
            })
            .collect::<tauri::Result<Vec<_>>>()?;
        for choice in &network_choices {
            network.append(choice)?;
        }
        let open = item(MenuId::OpenDashboard, "Open dashboard", true)?;
        let setup = item(MenuId::Setup, "Set up…", true)?;
        let pause = item(MenuId::TogglePause, pause_label(view.paused), true)?;
        let cache_only = item(
            MenuId::ToggleCacheOnly,
            cache_only_label(view.cache_only),
            true,
        )?;
        let restart = item(MenuId::Restart, &view.restart_line, true)?;
        let copy = item(MenuId::CopyProxy, "Copy shell proxy settings", true)?;
        let autostart = CheckMenuItem::with_id(
            app,
            MenuId::Autostart.as_id(),
            "Start at login",
            true,
            autostart_on,
            None::<&str>,
        )?;
        let in_browser = CheckMenuItem::with_id(
            app,
            MenuId::DashboardInBrowser.as_id(),
            IN_BROWSER_LABEL,
            true,
            in_browser_on,
            None::<&str>,
        )?;
        let quit = item(MenuId::Quit, "Quit Weir", true)?;
        let menu = Menu::new(app)?;
        menu.append(&overall)?;
        for u in &upstreams {
            menu.append(u)?;
        }
        menu.append(&queue)?;
        menu.append(&github)?;
        menu.append(&sessions)?;
        menu.append(&recent)?;
        if let Some(team) = &team {
            menu.append(team)?;
        }
        if let Some(handoffs) = &handoffs {
            menu.append(handoffs)?;
        }
        menu.append(&PredefinedMenuItem::separator(app)?)?;
        menu.append_items(&[
            &open,
            &setup,
            &in_browser,
            &pause,
            &cache_only,
            &network,
            &copy,
            &autostart,
        ])?;
        menu.append(&restart)?;
        menu.append(&PredefinedMenuItem::separator(app)?)?;
        menu.append(&quit)?;
        Ok(TrayMenu {
            menu,
            overall,
            upstreams,
            queue,
            github,
            sessions,
            recent,
            team,
            handoffs,
            network,
            network_choices,
            pause,
            cache_only,
            restart,
            autostart,
            in_browser,
        })
    }

    /// Updates the labels that differ between `old` and `new` (each change is a main-thread
    /// round trip, so unchanged lines are skipped).
    pub fn apply(&self, old: Option<&TrayView>, new: &TrayView) -> tauri::Result<()> {
        let changed = |f: fn(&TrayView) -> &str| old.is_none_or(|o| f(o) != f(new));
        if changed(|v| &v.overall_line) {
            self.overall.set_text(&new.overall_line)?;
        }
        for (i, item) in self.upstreams.iter().enumerate() {
            let Some(line) = new.upstream_lines.get(i) else {
                continue;
            };
            if old.and_then(|o| o.upstream_lines.get(i)) != Some(line) {
                item.set_text(line)?;
            }
        }
        if changed(|v| &v.queue_line) {
            self.queue.set_text(&new.queue_line)?;
        }
        if changed(|v| &v.github_line) {
            self.github.set_text(&new.github_line)?;
        }
        if changed(|v| &v.sessions_line) {
            self.sessions.set_text(&new.sessions_line)?;
        }
        if old.is_none_or(|o| o.recent_sessions != new.recent_sessions) {
            fill_recent(self.menu.app_handle(), &self.recent, &new.recent_sessions)?;
        }
        if let (Some(item), Some(line)) = (&self.team, &new.team_line) {
            if old.is_none_or(|o| o.team_line.as_ref() != Some(line)) {
                item.set_text(line)?;
            }
        }
        if let (Some(sub), Some(lines)) = (&self.handoffs, &new.handoffs) {
            if old.is_none_or(|o| o.handoffs.as_ref() != Some(lines)) {
                retitle(&self.menu, sub, &lines.title)?;
                fill_handoffs(self.menu.app_handle(), sub, lines)?;
            }
        }
        if changed(|v| &v.network_line) {
            retitle(&self.menu, &self.network, &new.network_line)?;
        }
        if old.is_none_or(|o| o.network_forced != new.network_forced) {
            mark_network(&self.network_choices, new.network_forced)?;
        }
        if changed(|v| &v.restart_line) {
            self.restart.set_text(&new.restart_line)?;
        }
        if old.is_none_or(|o| o.paused != new.paused) {
            self.pause.set_text(pause_label(new.paused))?;
        }
        if old.is_none_or(|o| o.cache_only != new.cache_only) {
            self.cache_only.set_text(cache_only_label(new.cache_only))?;
        }
        Ok(())
    }

    /// The network choices, for the click handler to set their marks.
    pub fn network_items(&self) -> Vec<CheckMenuItem<R>> {
        self.network_choices.clone()
    }

    /// The "Start at login" item, for the click handler to set its check mark.
    pub fn autostart_item(&self) -> CheckMenuItem<R> {
        self.autostart.clone()
    }

    /// The "Open the dashboard in the browser" item, for the click handler's check mark.
    pub fn in_browser_item(&self) -> CheckMenuItem<R> {
        self.in_browser.clone()
    }
}

/// Changes a submenu's title. On Linux the tray's exported menu (dbusmenu) does not pick up a
/// submenu's new label, although it does an item's, so the submenu is also taken out and put
/// back at its place: its entries are exported again with the new title.
fn retitle<R: Runtime>(menu: &Menu<R>, submenu: &Submenu<R>, title: &str) -> tauri::Result<()> {
    submenu.set_text(title)?;
    let id = submenu.id().clone();
    let Some(at) = menu.items()?.iter().position(|i| i.id() == &id) else {
        return Ok(());
    };
    menu.remove(submenu)?;
    menu.insert(submenu, at)
}

/// Checks the choice that matches `forced` and clears the others. Needed after every click: a
/// check item toggles its own mark when clicked (clicking the checked one would clear it) and
/// the view does not change when the choice does not.
pub fn mark_network<R: Runtime>(
    items: &[CheckMenuItem<R>],
    forced: Option<bool>,
) -> tauri::Result<()> {
    for ((choice, _, _), item) in NETWORK_CHOICES.iter().zip(items) {
        item.set_checked(*choice == forced)?;
    }
    Ok(())
}

/// Replaces the submenu's lines with `lines` (their number changes, so the items are rebuilt;
/// the submenu is small and changes only when a session does).
fn fill_recent<R: Runtime>(
    app: &AppHandle<R>,
    submenu: &Submenu<R>,
    lines: &[SessionLine],
) -> tauri::Result<()> {
    for old in submenu.items()? {
        submenu.remove(&old)?;
    }
    if lines.is_empty() {
        let none = MenuItem::with_id(
            app,
            "no-recent-sessions",
            "No recent sessions",
            false,
            None::<&str>,
        )?;
        return submenu.append(&none);
    }
    for (i, line) in lines.iter().enumerate() {
        let id = MenuId::RecentSession(i).as_id();
        submenu.append(&MenuItem::with_id(
            app,
            id,
            &line.label,
            true,
            None::<&str>,
        )?)?;
    }
    Ok(())
}

/// Replaces the offers submenu's entries: per offer, "Review offer: …", which opens the
/// dashboard's view of that offer (the whole statement and who asked, then Confirm or
/// Decline there), then the dashboard's list.
fn fill_handoffs<R: Runtime>(
    app: &AppHandle<R>,
    submenu: &Submenu<R>,
    lines: &HandoffLines,
) -> tauri::Result<()> {
    for old in submenu.items()? {
        submenu.remove(&old)?;
    }
    for offer in &lines.offers {
        let review = format!("Review offer: {}", offer.label);
        let id = MenuId::HandoffReview(offer.id).as_id();
        submenu.append(&MenuItem::with_id(app, id, review, true, None::<&str>)?)?;
    }
    let open = MenuItem::with_id(
        app,
        MenuId::Handoffs.as_id(),
        "Open offers in the dashboard",
        true,
        None::<&str>,
    )?;
    submenu.append(&open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_round_trips() {
        let mut all: Vec<MenuId> = FIXED.to_vec();
        all.extend([
            MenuId::Upstream(0),
            MenuId::Upstream(7),
            MenuId::Upstream(123),
            MenuId::RecentSession(0),
            MenuId::RecentSession(7),
            MenuId::HandoffReview(1),
            MenuId::HandoffReview(42),
        ]);
        for id in &all {
            assert_eq!(
                MenuId::from_id(&id.as_id()),
                Some(*id),
                "{id:?} -> {}",
                id.as_id()
            );
        }
        let strings: std::collections::HashSet<String> = all.iter().map(MenuId::as_id).collect();
        assert_eq!(strings.len(), all.len(), "two items share an ID string");
    }

    #[test]
    fn foreign_and_malformed_ids_are_rejected() {
        for bad in [
            "",
            "upstream-",
            "upstream-x",
            "upstream-+1",
            "upstream-01",
            "upstream--1",
            "session-",
            "session-01",
            "session-x",
            "recent-sessions",
            "no-recent-sessions",
            "handoff-confirm-0",
            "handoff-confirm--1",
            "handoff-decline-",
            "handoff-confirm-99999999999999999999",
            "handoff-offers",
            "network",
            "network-",
            "Quit",
            "quit ",
            "tray",
        ] {
            assert_eq!(MenuId::from_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn each_network_choice_sets_its_own_override() {
        assert_eq!(network_choice(MenuId::NetworkAuto), Some(None));
        assert_eq!(network_choice(MenuId::NetworkMetered), Some(Some(true)));
        assert_eq!(network_choice(MenuId::NetworkNotMetered), Some(Some(false)));
        assert_eq!(network_choice(MenuId::Quit), None);
    }

    #[test]
    fn pause_label_names_the_action() {
        assert!(pause_label(false).starts_with("Pause"));
        assert!(pause_label(true).starts_with("Resume"));
    }
}
