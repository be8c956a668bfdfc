//! `[queue]`'s caps: how much the live items (waiting, offered) may take, in all and per
//! credential. Each live item holds a keychain entry and its body on disk until it ends; a
//! create past a cap is answered with a `queue_refused` problem instead of being queued.

use super::error::{ConfigError, Ctx};
use super::file::FileQueue;

/// `[queue] max_items`, `max_bytes`, `max_items_per_identity`, `max_bytes_per_identity`: how
/// much the live items (waiting, offered) may take, in all and per credential. Each holds a
/// keychain entry and its body on disk until it ends; a create past a cap is answered with a
/// `queue_refused` problem. The defaults are explained in docs/queued-creates.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueCaps {
    pub max_items: usize,
    pub max_bytes: usize,
    pub max_items_per_identity: usize,
    pub max_bytes_per_identity: usize,
}

impl Default for QueueCaps {
    fn default() -> Self {
        QueueCaps {
            max_items: 200,
            max_bytes: 256 * 1024 * 1024,
            max_items_per_identity: 20,
            max_bytes_per_identity: 32 * 1024 * 1024,
        }
    }
}

/// `[queue]`'s caps, each at least 1; a per-credential cap above its total is refused.
pub(super) fn validate(cx: &Ctx, q: &FileQueue) -> Result<QueueCaps, ConfigError> {
    let d = QueueCaps::default();
    let caps = QueueCaps {
        max_items: cx
            .positive("queue.max_items", &q.max_items, 1)?
            .unwrap_or(d.max_items),
        max_bytes: cx
            .positive("queue.max_bytes", &q.max_bytes, 1)?
            .unwrap_or(d.max_bytes),
        max_items_per_identity: cx
            .positive("queue.max_items_per_identity", &q.max_items_per_identity, 1)?
            .unwrap_or(d.max_items_per_identity),
        max_bytes_per_identity: cx
            .positive("queue.max_bytes_per_identity", &q.max_bytes_per_identity, 1)?
            .unwrap_or(d.max_bytes_per_identity),
    };
    for (key, v, per, total, total_key) in [
        (
            "queue.max_items_per_identity",
            &q.max_items_per_identity,
            caps.max_items_per_identity,
            caps.max_items,
            "max_items",
        ),
        (
            "queue.max_bytes_per_identity",
            &q.max_bytes_per_identity,
            caps.max_bytes_per_identity,
            caps.max_bytes,
            "max_bytes",
        ),
    ] {
        if let (Some(v), true) = (v, per > total) {
            return cx.err(
                key,
                v.span(),
                format!("{per} is more than `queue.{total_key}` ({total})"),
            );
        }
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31, item 2: the caps have defaults, and a bad value names its key and line.
    #[test]
    fn caps_are_checked_with_their_line() {
        let s = crate::config::parse_str("", "w.toml").unwrap();
        assert_eq!(s.queue.caps, QueueCaps::default());
        let s = crate::config::parse_str(
            "[queue]\nmax_items = 5\nmax_items_per_identity = 2\nmax_bytes = 1000\nmax_bytes_per_identity = 10\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(
            s.queue.caps,
            QueueCaps {
                max_items: 5,
                max_bytes: 1000,
                max_items_per_identity: 2,
                max_bytes_per_identity: 10
            }
        );
        let e = crate::config::parse_str("[queue]\nmax_items = 0\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:2: key `queue.max_items`: must be at least 1, got 0"
        );
        let e = crate::config::parse_str("[queue]\nmax_bytes = -5\n", "w.toml").unwrap_err();
        assert!(
            e.to_string().starts_with("w.toml:2: key `queue.max_bytes`"),
            "{e}"
        );
        let e = crate::config::parse_str(
            "[queue]\nmax_items = 3\n\nmax_items_per_identity = 4\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml:4: key `queue.max_items_per_identity`: 4 is more than `queue.max_items` (3)"
        );
        let e = crate::config::parse_str("[queue]\nmax_bytes = \"1MiB\"\n", "w.toml").unwrap_err();
        assert!(e.to_string().contains("w.toml:2"), "{e}");
    }
}
