//! Client surfaces: which tool sent a request, from its `User-Agent`, for the statistics.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    Vscode,
    GhCli,
    Browser,
    Other,
}

impl Surface {
    pub const ALL: [Surface; 4] = [
        Surface::Vscode,
        Surface::GhCli,
        Surface::Browser,
        Surface::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Vscode => "vscode",
            Surface::GhCli => "gh_cli",
            Surface::Browser => "browser",
            Surface::Other => "other",
        }
    }

    pub fn from_user_agent(ua: Option<&str>) -> Surface {
        let Some(ua) = ua else { return Surface::Other };
        // Lower-cased on the stack: this runs for every request, and a `User-Agent` is short
        // (a longer one is lower-cased into a `String`, as every one was).
        let mut room = [0u8; 256];
        let Some(lowered) = room.get_mut(..ua.len()) else {
            return Surface::of_lower(&ua.to_ascii_lowercase());
        };
        lowered.copy_from_slice(ua.as_bytes());
        lowered.make_ascii_lowercase();
        // Lower-casing ASCII letters keeps UTF-8 valid; the fallback is never used.
        match std::str::from_utf8(lowered) {
            Ok(l) => Surface::of_lower(l),
            Err(_) => Surface::of_lower(&ua.to_ascii_lowercase()),
        }
    }

    /// [`Surface::from_user_agent`] of a lower-cased `User-Agent`.
    fn of_lower(l: &str) -> Surface {
        // VS Code's Copilot extensions send e.g. "GitHubCopilotChat/0.22.4" or "vscode/1.95".
        if l.contains("vscode")
            || l.contains("githubcopilotchat")
            || l.contains("copilot-vscode")
            || l.contains("visual studio code")
        {
            Surface::Vscode
        } else if l.starts_with("gh/")
            || l.starts_with("gh ")
            || l.contains("github cli")
            || l.starts_with("go-gh")
        {
            Surface::GhCli
        } else if l.starts_with("mozilla/") {
            Surface::Browser
        } else {
            Surface::Other
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_agents() {
        assert_eq!(
            Surface::from_user_agent(Some("GitHubCopilotChat/0.22.4")),
            Surface::Vscode
        );
        assert_eq!(
            Surface::from_user_agent(Some("gh/2.63.0 (linux)")),
            Surface::GhCli
        );
        assert_eq!(
            Surface::from_user_agent(Some("Mozilla/5.0 (X11; Linux x86_64) Chrome/130")),
            Surface::Browser
        );
        assert_eq!(
            Surface::from_user_agent(Some("curl/7.88.1")),
            Surface::Other
        );
        assert_eq!(Surface::from_user_agent(None), Surface::Other);
        // Past the stack's room, and at its edge, the same answers.
        for pad in [0, 200, 249, 250, 251, 300] {
            let ua = format!("VSCode/1.95{}", " ".repeat(pad));
            assert_eq!(
                Surface::from_user_agent(Some(&ua)),
                Surface::Vscode,
                "{pad}"
            );
            let ua = format!("{}GitHub CLI", "x".repeat(pad));
            assert_eq!(Surface::from_user_agent(Some(&ua)), Surface::GhCli, "{pad}");
        }
    }
}
