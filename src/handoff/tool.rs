//! The tool that asked for a create, as an offer shows it before the developer confirms: its
//! `User-Agent` (bounded, control characters dropped, so a header cannot forge lines in the
//! view) and the surface Weir reads from it (VS Code, gh, a browser, other).

use crate::surface::Surface;
use serde::{Deserialize, Serialize};

/// The longest `User-Agent` kept (real ones are well under this).
const MAX_USER_AGENT: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestingTool {
    /// As sent (trimmed to 200 characters, `MAX_USER_AGENT`); `None` when the request had none.
    pub user_agent: Option<String>,
    /// `vscode`, `gh_cli`, `browser` or `other`.
    pub surface: String,
}

impl RequestingTool {
    pub fn of(headers: &http::HeaderMap) -> RequestingTool {
        let raw = headers
            .get(http::header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let user_agent = raw.as_deref().map(clean).filter(|s| !s.is_empty());
        RequestingTool {
            surface: Surface::from_user_agent(raw.as_deref())
                .as_str()
                .to_string(),
            user_agent,
        }
    }
}

fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_USER_AGENT)
        .collect();
    if s.chars().filter(|c| !c.is_control()).count() > MAX_USER_AGENT {
        out.push('…');
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(ua: Option<&[u8]>) -> RequestingTool {
        let mut h = http::HeaderMap::new();
        if let Some(ua) = ua {
            h.insert(
                http::header::USER_AGENT,
                http::HeaderValue::from_bytes(ua).unwrap(),
            );
        }
        RequestingTool::of(&h)
    }

    #[test]
    fn the_user_agent_is_kept_bounded_and_named_by_surface() {
        let gh = tool(Some(b"GitHub CLI 2.63.0"));
        assert_eq!(gh.user_agent.as_deref(), Some("GitHub CLI 2.63.0"));
        assert_eq!(gh.surface, "gh_cli");
        let none = tool(None);
        assert_eq!((none.user_agent, none.surface.as_str()), (None, "other"));
        let long = tool(Some("x".repeat(500).as_bytes()));
        assert_eq!(long.user_agent.unwrap().chars().count(), MAX_USER_AGENT + 1);
        // A tab is the only control character a header value may carry; it is dropped.
        let tabbed = tool(Some(b"vscode/1.96\tfake line"));
        assert_eq!(tabbed.user_agent.as_deref(), Some("vscode/1.96fake line"));
        assert_eq!(tabbed.surface, "vscode");
    }
}
