//! `/metrics` in the Prometheus text exposition format.

use super::Control;
use std::fmt::Write;

/// `private`: the caller holds the control secret; only then are the per-account series (by
/// GitHub login) included.
pub(crate) fn render(ctl: &Control, private: bool) -> String {
    let s = super::snapshot(ctl);
    let mut out = String::new();
    type Getter = fn(&crate::stats::ClassSnapshot) -> u64;
    let counters: [(&str, &str, Getter); 9] = [
        (
            "weir_client_requests_total",
            "Requests clients sent for a managed upstream.",
            |c| c.client_requests,
        ),
        (
            "weir_upstream_requests_total",
            "Requests Weir sent to the upstream.",
            |c| c.upstream_requests,
        ),
        (
            "weir_coalesced_total",
            "Requests answered by joining an identical in-flight request.",
            |c| c.coalesced,
        ),
        (
            "weir_cache_hits_fresh_total",
            "Requests answered from a fresh cached copy.",
            |c| c.cache_hits_fresh,
        ),
        (
            "weir_cache_hits_stale_total",
            "Requests answered from a stale cached copy.",
            |c| c.cache_hits_stale,
        ),
        ("weir_errors_total", "Failed upstream exchanges.", |c| {
            c.errors
        }),
        (
            "weir_revalidated_total",
            "Refreshes the upstream answered 304 Not Modified (a stored copy revalidated by its validator).",
            |c| c.revalidated,
        ),
        (
            "weir_not_modified_total",
            "Clients' conditional requests answered 304 Not Modified from Weir's copy.",
            |c| c.not_modified,
        ),
        (
            "weir_logs_kept_longer_total",
            "Log answers replaced by the longer log the caller was already given.",
            |c| c.kept_longer,
        ),
    ];
    for (name, help, get) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for u in &s.upstreams {
            for (class, c) in &u.classes {
                let _ = writeln!(
                    out,
                    "{name}{{upstream=\"{}\",class=\"{class}\"}} {}",
                    u.name,
                    get(c)
                );
            }
        }
    }
    let _ = writeln!(out, "# HELP weir_upstream_errors_total Upstream failures by kind.\n# TYPE weir_upstream_errors_total counter");
    for u in &s.upstreams {
        for (kind, n) in &u.errors_by_kind {
            let _ = writeln!(
                out,
                "weir_upstream_errors_total{{upstream=\"{}\",kind=\"{kind}\"}} {n}",
                u.name
            );
        }
    }
    // Model names are tracked only when label-safe (`config::is_model_name`).
    let _ = writeln!(out, "# HELP weir_model_fallbacks_total Completion requests re-sent with the fallback model.\n# TYPE weir_model_fallbacks_total counter");
    for m in &s.models {
        let _ = writeln!(
            out,
            "weir_model_fallbacks_total{{upstream=\"{}\",model=\"{}\"}} {}",
            m.upstream, m.model, m.fallbacks
        );
    }
    let _ = writeln!(out, "# HELP weir_model_breaker_open Whether a model's own breaker is open (1) or not (0).\n# TYPE weir_model_breaker_open gauge");
    for m in &s.models {
        let open = u8::from(m.breaker == weir_resilience::State::Open);
        let _ = writeln!(
            out,
            "weir_model_breaker_open{{upstream=\"{}\",model=\"{}\"}} {open}",
            m.upstream, m.model
        );
    }
    let _ = writeln!(out, "# HELP weir_surface_requests_total Requests by client surface.\n# TYPE weir_surface_requests_total counter");
    for (surface, n) in &s.surfaces {
        let _ = writeln!(
            out,
            "weir_surface_requests_total{{surface=\"{surface}\"}} {n}"
        );
    }
    // Per GitHub account, by login (validated: alphanumerics and hyphens), never by token;
    // logins name people, so only for holders of the control secret.
    let accounts: &[crate::status::AccountStatus] =
        if private { &s.identity.accounts } else { &[] };
    let _ = writeln!(out, "# HELP weir_account_requests_total Requests to managed upstreams by the credentials of a GitHub account.\n# TYPE weir_account_requests_total counter");
    for a in accounts {
        let _ = writeln!(
            out,
            "weir_account_requests_total{{login=\"{}\"}} {}",
            a.login, a.requests
        );
    }
    let _ = writeln!(out, "# HELP weir_account_upstream_requests_total Requests Weir sent upstream with the credentials of a GitHub account.\n# TYPE weir_account_upstream_requests_total counter");
    for a in accounts {
        let _ = writeln!(
            out,
            "weir_account_upstream_requests_total{{login=\"{}\"}} {}",
            a.login, a.upstream_requests
        );
    }
    let _ = writeln!(out, "# HELP weir_account_credentials Credentials mapped to a GitHub account.\n# TYPE weir_account_credentials gauge");
    for a in accounts {
        let _ = writeln!(
            out,
            "weir_account_credentials{{login=\"{}\"}} {}",
            a.login, a.credentials
        );
    }
    let b = &ctl.proxy.body_budget;
    let _ = writeln!(out, "# HELP weir_buffered_request_bytes Request body bytes held in memory now (creates, completion requests).\n# TYPE weir_buffered_request_bytes gauge\nweir_buffered_request_bytes {}", b.held());
    let _ = writeln!(out, "# HELP weir_buffered_request_bytes_peak The most request body bytes held at once since start.\n# TYPE weir_buffered_request_bytes_peak gauge\nweir_buffered_request_bytes_peak {}", b.peak());
    let _ = writeln!(out, "# HELP weir_buffered_request_bytes_limit The bound on request body bytes held at once.\n# TYPE weir_buffered_request_bytes_limit gauge\nweir_buffered_request_bytes_limit {}", b.capacity());
    let _ = writeln!(out, "# HELP weir_buffered_request_refused_total Requests answered 503 because the bound was reached.\n# TYPE weir_buffered_request_refused_total counter\nweir_buffered_request_refused_total {}", b.refused());
    let _ = writeln!(out, "# HELP weir_cache_bytes Bytes held by the response cache.\n# TYPE weir_cache_bytes gauge\nweir_cache_bytes {}", s.cache.bytes);
    tunnels(&mut out, &s);
    let _ = writeln!(out, "# HELP weir_paused Whether Weir is paused (1) or not (0).\n# TYPE weir_paused gauge\nweir_paused {}", u8::from(s.paused));
    let _ = writeln!(
        out,
        "# HELP weir_mode The mode Weir is in (1 for the current one).\n# TYPE weir_mode gauge"
    );
    for k in crate::mode::ModeKind::ALL {
        let on = u8::from(s.mode.mode == k);
        let _ = writeln!(out, "weir_mode{{mode=\"{}\"}} {on}", k.as_str());
    }
    let h = &s.handoffs;
    let _ = writeln!(
        out,
        "# HELP weir_handoff_offers_waiting Creates offered to the local agent, waiting for the developer's answer.\n# TYPE weir_handoff_offers_waiting gauge\nweir_handoff_offers_waiting {}",
        h.pending.len()
    );
    let _ = writeln!(
        out,
        "# HELP weir_handoff_offers_total Creates offered to the local agent.\n# TYPE weir_handoff_offers_total counter\nweir_handoff_offers_total {}",
        h.counts.offered
    );
    let _ = writeln!(out, "# HELP weir_handoff_answers_total Offers answered, by how.\n# TYPE weir_handoff_answers_total counter");
    for (answer, n) in [
        ("confirmed", h.counts.confirmed),
        ("declined", h.counts.declined),
        ("expired", h.counts.expired),
    ] {
        let _ = writeln!(out, "weir_handoff_answers_total{{answer=\"{answer}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP weir_handoff_runs_total Confirmed local-agent runs that ended, by result.\n# TYPE weir_handoff_runs_total counter");
    for (result, n) in [
        ("succeeded", h.counts.succeeded),
        ("failed", h.counts.failed),
    ] {
        let _ = writeln!(out, "weir_handoff_runs_total{{result=\"{result}\"}} {n}");
    }
    let source = match s.network.source {
        crate::network::MeteredSource::Forced => "forced",
        crate::network::MeteredSource::Os => "os",
        crate::network::MeteredSource::Default => "default",
    };
    let _ = writeln!(
        out,
        "# HELP weir_network_metered Whether fallback policy counts the network as metered (1) or not (0), and from where.\n# TYPE weir_network_metered gauge\nweir_network_metered{{source=\"{source}\"}} {}",
        u8::from(s.network.state.metered)
    );
    out
}

/// Blind tunnels (count, bytes each way) and TLS interception (connections, leaves, failed
/// handshakes by cause; no interception series while it is off).
fn tunnels(out: &mut String, s: &crate::status::StatusSnapshot) {
    let _ = writeln!(out, "# HELP weir_tunnels_total Blind CONNECT tunnels opened.\n# TYPE weir_tunnels_total counter\nweir_tunnels_total {}", s.tunnels);
    let _ = writeln!(out, "# HELP weir_tunnel_bytes_total Bytes blind tunnels moved (up: client to target; down: target to client).\n# TYPE weir_tunnel_bytes_total counter");
    let _ = writeln!(
        out,
        "weir_tunnel_bytes_total{{direction=\"up\"}} {}",
        s.tunnel_bytes.up
    );
    let _ = writeln!(
        out,
        "weir_tunnel_bytes_total{{direction=\"down\"}} {}",
        s.tunnel_bytes.down
    );
    let Some(i) = &s.interception else {
        return;
    };
    let _ = writeln!(out, "# HELP weir_intercepted_connections_total CONNECTs to managed hosts answered for TLS interception.\n# TYPE weir_intercepted_connections_total counter\nweir_intercepted_connections_total {}", i.connections);
    let _ = writeln!(out, "# HELP weir_tls_leaves_issued_total Leaf certificates Weir's CA issued.\n# TYPE weir_tls_leaves_issued_total counter\nweir_tls_leaves_issued_total {}", i.leaves_issued);
    let _ = writeln!(out, "# HELP weir_tls_handshake_failures_total Client TLS handshakes with Weir that failed, by cause (untrusted_ca: the client refused Weir's CA; closed_after_certificate: it closed with no alert and no request after Weir's certificate, as Node does when it does not trust the CA; closed: before the certificate).\n# TYPE weir_tls_handshake_failures_total counter");
    for (cause, n) in &i.handshake_failures {
        let _ = writeln!(
            out,
            "weir_tls_handshake_failures_total{{cause=\"{cause}\"}} {n}"
        );
    }
}
