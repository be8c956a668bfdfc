// Request rates from successive status snapshots. Weir reports cumulative counters; the page
// turns each pair of snapshots into client req/s and upstream req/s per upstream and keeps
// the last couple of minutes for the charts.

export const WINDOW_MS = 120_000;

function totalsOf(up) {
  const t = up && up.totals ? up.totals : {};
  const n = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return {
    client: n(t.client_requests),
    upstream: n(t.upstream_requests),
    stale: n(t.cache_hits_stale),
  };
}

export class RateHistory {
  constructor(windowMs = WINDOW_MS) {
    this.windowMs = windowMs;
    this.series = new Map(); // name -> {last: {at, client, upstream, stale}, samples: [{at, dt, client, upstream, stale}] (rates per second over dt seconds)}
  }

  /** Records one snapshot taken at `at` (ms since epoch, the page's clock). */
  push(status, at) {
    const seen = new Set();
    for (const up of status.upstreams || []) {
      const name = String(up.name);
      seen.add(name);
      const now = { at, ...totalsOf(up) };
      let entry = this.series.get(name);
      if (!entry) {
        entry = { last: null, samples: [] };
        this.series.set(name, entry);
      }
      const prev = entry.last;
      // A counter going backwards means Weir restarted: start the rates afresh.
      if (prev && now.client >= prev.client && now.upstream >= prev.upstream && at > prev.at) {
        const dt = (at - prev.at) / 1000;
        entry.samples.push({
          at,
          dt,
          client: (now.client - prev.client) / dt,
          upstream: (now.upstream - prev.upstream) / dt,
          stale: (now.stale - prev.stale) / dt,
        });
      } else if (prev) {
        entry.samples = [];
      }
      entry.last = now;
      const cutoff = at - this.windowMs;
      while (entry.samples.length && entry.samples[0].at < cutoff) entry.samples.shift();
    }
    for (const name of [...this.series.keys()]) if (!seen.has(name)) this.series.delete(name);
  }

  samples(name) {
    return this.series.get(name)?.samples ?? [];
  }

  /** The latest rates, or null before two snapshots have arrived. */
  latest(name) {
    const s = this.samples(name);
    return s.length ? s[s.length - 1] : null;
  }

  /** Whether stale copies were served for `name` within the last `ms`. */
  servedStaleWithin(name, ms, now) {
    return this.samples(name).some((x) => x.at >= now - ms && x.stale > 0);
  }

  /** Client requests Weir answered without an upstream call over the window (cache, coalescing). */
  savedInWindow(name) {
    return this.samples(name).reduce((sum, x) => sum + Math.max(0, x.client - x.upstream) * x.dt, 0);
  }
}
