//! `GET /_weir/api/policy?repo=owner/repo&network=metered|offline|any&situation=…`: the
//! effective fallback policy graph for one repository, network and situation, as the
//! dashboard's Policy view shows it ("function → action (rule, why)"). Read-only; without
//! `network`, the network as it is now.

use super::Control;
use crate::policy::{Context, Decision, NetworkCond, Refusal, Situation, Situations};
use crate::problem::{Problem, ProblemKind};
use http::StatusCode;
use serde::Serialize;

/// The answer.
#[derive(Debug, Serialize)]
pub struct PolicyTable {
    pub repo: Option<String>,
    pub network: NetworkCond,
    pub situation: Situation,
    /// One row per function (list, create, model).
    pub rows: Vec<Decision>,
    /// User rules refused because they would loosen an org rule.
    pub refused: Vec<Refusal>,
    pub org_file: Option<String>,
}

/// Percent-decoding of a query value (`acme%2Fapi`); a bad escape is kept as written (it then
/// fails validation with the text the caller sent).
fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn bad(message: String) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, ProblemKind::BadRequest, message)
}

pub(super) fn table(ctl: &Control, query: Option<&str>) -> Result<PolicyTable, Problem> {
    let mut repo = None;
    let mut network = None;
    let mut situation = Situation::Any;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode(v);
        let v = v.as_str();
        match k {
            "repo" if v.is_empty() => {}
            "repo" => {
                crate::policy::RepoGlob::parse(v)
                    .ok()
                    .filter(|_| v.contains('/') && !v.contains('*'))
                    .ok_or_else(|| bad(format!("repo `{v}` is not `owner/repo`")))?;
                repo = Some(v.to_string());
            }
            "network" => {
                network = Some(NetworkCond::parse(v).ok_or_else(|| {
                    bad(format!("network `{v}` is not `metered`, `offline` or `any`"))
                })?)
            }
            "situation" => {
                situation = Situation::parse(v).ok_or_else(|| {
                    bad(format!("situation `{v}` is not `any`, `breaker_open`, `degraded`, `surge_429` or `cooldown`"))
                })?
            }
            other => return Err(bad(format!("unknown parameter `{other}`: use repo, network, situation"))),
        }
    }
    let network = network.unwrap_or_else(|| {
        if ctl.proxy.network.metered() {
            NetworkCond::Metered
        } else {
            NetworkCond::Any
        }
    });
    let cx = Context {
        repo: repo.clone(),
        metered: network == NetworkCond::Metered,
        offline: network == NetworkCond::Offline,
        situations: Situations::default().with(situation),
    };
    let set = &ctl.proxy.settings().policy;
    Ok(PolicyTable {
        rows: set.table(&cx),
        refused: set.refused.clone(),
        org_file: set.org_file.clone(),
        repo,
        network,
        situation,
    })
}
