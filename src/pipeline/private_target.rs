//! Private targets: a request or CONNECT that Weir does not manage must not reach loopback,
//! link-local, private or reserved addresses, or any web page and local tool pointed at Weir
//! could use it to reach services on this machine (the cloud metadata address, admin ports) or
//! its network. `allow_private_targets = true` turns the check off; managed upstreams are never
//! checked (they are the config's own choice).
//!
//! When Weir connects itself, the name is resolved once and the addresses checked are the ones
//! connected to ([`crate::upstream::resolve`]): CONNECT tunnels here, plain forwards in the
//! unmanaged client's resolver. A DNS answer that changes between a check and a connect
//! (rebinding) has no second lookup to hide in, and a lookup that fails is a failed connection.
//! With an `upstream_proxy`, that proxy resolves names: Weir checks literals and what its own
//! resolver says, and the rest is the proxy's job. Clients that need local hosts should list
//! them in `NO_PROXY` (`weir env` does for localhost).

use crate::problem::{Problem, ProblemKind};
use crate::upstream::resolve::{self, Refused};
use http::StatusCode;
use std::net::IpAddr;
use tokio::net::TcpStream;

/// The 403 for a refused target.
fn forbidden(r: &Refused, port: u16) -> Problem {
    let host = match r.host.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{}]", r.host),
        _ => r.host.clone(),
    };
    Problem::new(
        StatusCode::FORBIDDEN,
        ProblemKind::ForbiddenTarget,
        format!("`{host}:{port}` is not a managed upstream and {r}"),
    )
}

/// Refuses an IP literal in the private ranges (a literal never reaches a resolver). Names
/// are checked by the lookup that connects.
pub(super) fn check_literal(allow: bool, host: &str, port: u16) -> Result<(), Problem> {
    let bare = host.trim_matches(['[', ']']);
    match bare.parse::<IpAddr>() {
        Ok(ip) if !allow && resolve::is_private(ip) => Err(forbidden(
            &Refused {
                host: bare.to_string(),
                ip,
            },
            port,
        )),
        _ => Ok(()),
    }
}

/// With an `upstream_proxy`: literals, and names as Weir's own resolver sees them. A name
/// that does not resolve here passes (the proxy may know it); what the proxy then connects to
/// is its own check.
pub(super) async fn check_before_proxy(allow: bool, host: &str, port: u16) -> Result<(), Problem> {
    if allow {
        return Ok(());
    }
    match resolve::lookup(host, port, true).await {
        Err(e) => match resolve::refusal_in(&e) {
            Some(r) => Err(forbidden(&r, port)),
            None => Ok(()),
        },
        Ok(_) => Ok(()),
    }
}

/// TCP to `host:port` for a blind tunnel Weir opens itself: one lookup, every address checked
/// (unless `allow`), then a connection to exactly those addresses.
pub(super) async fn connect(allow: bool, host: &str, port: u16) -> Result<TcpStream, Problem> {
    let shown = format!("{host}:{port}");
    let addrs =
        resolve::lookup(host, port, !allow)
            .await
            .map_err(|e| match resolve::refusal_in(&e) {
                Some(r) => forbidden(&r, port),
                None => Problem::new(
                    StatusCode::BAD_GATEWAY,
                    ProblemKind::Connection,
                    format!("could not resolve {shown}: {e}"),
                ),
            })?;
    TcpStream::connect(&addrs[..]).await.map_err(|e| {
        Problem::new(
            StatusCode::BAD_GATEWAY,
            ProblemKind::Connection,
            format!("could not connect to {shown}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_are_resolved_and_the_setting_turns_it_off() {
        let p = connect(false, "localhost", 80).await.unwrap_err();
        assert_eq!(p.kind, ProblemKind::ForbiddenTarget);
        assert!(p.detail.contains("allow_private_targets"));
        assert!(p.detail.contains("`localhost:80`"), "{}", p.detail);
        let p = check_literal(false, "[::1]", 443).unwrap_err();
        assert!(p.detail.contains("`[::1]:443`"), "{}", p.detail);
        assert!(check_literal(true, "[::1]", 443).is_ok());
        assert!(
            check_literal(false, "localhost", 443).is_ok(),
            "names go to the lookup"
        );
        assert!(check_before_proxy(false, "localhost", 80).await.is_err());
        assert!(check_before_proxy(true, "localhost", 80).await.is_ok());
        assert!(check_before_proxy(false, "140.82.112.6", 443).await.is_ok());
    }
}
