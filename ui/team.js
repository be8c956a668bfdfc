// The Team panel: the NATS link of team signals (`status.team`), what teammates' Weirs report
// per upstream, and what this Weir does about it. Hidden when `[team]` is off (`team: null`).

import { h } from './dom.js';
import * as fmt from './format.js';

const LINK_TEXT = {
  connected: 'Connected',
  disconnected: 'Not connected — Weir works alone',
  no_key: 'Off — no team key',
};

export class TeamPanel {
  constructor(section, root) {
    this.section = section;
    this.root = root;
    this.key = null;
  }

  /** `team` is `status.team`: an object, or null / undefined when `[team]` is off. */
  update(team) {
    const key = JSON.stringify(team ?? null);
    if (key === this.key) return;
    this.key = key;
    this.section.hidden = !team || typeof team !== 'object';
    if (this.section.hidden) return;
    this.render(team);
  }

  render(t) {
    const link = String(t.link ?? 'disconnected');
    const parts = [
      h('p', { class: 'gh-head' },
        h('span', { class: 'pill', 'data-testid': 'team-link', 'data-link': link }, LINK_TEXT[link] ?? fmt.words(link)),
        ` ${t.server ?? ''}`),
    ];
    if (t.error) parts.push(h('p', { class: 'small warn-text', 'data-testid': 'team-error' }, String(t.error)));
    if (t.summary) parts.push(h('p', { class: 'small', 'data-testid': 'team-summary' }, String(t.summary)));
    parts.push(h('p', { class: 'muted small', 'data-testid': 'team-meta' },
      `${fmt.int(t.peers_seen)} teammates seen · acts when ${fmt.int(t.peers_needed)} report a failure within ${fmt.int(t.window_s)} s (${fmt.words(t.action)})`
      + ` · ${fmt.int(t.published)} sent, ${fmt.int(t.received)} received, ${fmt.int(t.rejected)} ignored`));
    const ups = Array.isArray(t.upstreams) ? t.upstreams : [];
    parts.push(h('ul', { class: 'kv-list small', 'data-testid': 'team-upstreams' }, ups.map((u) => {
      const doing = u.acting ? (t.action === 'open' ? 'opened on their word' : 'cautious')
        : u.overruled ? 'ignored: calls succeed here' : 'no action';
      const pause = u.pause_until ? ` · paused until ${fmt.clock(u.pause_until)}` : '';
      return h('li', { 'data-upstream': u.name ?? '' },
        h('span', {}, u.name ?? fmt.DASH),
        h('span', { class: 'pill', 'data-acting': String(Boolean(u.acting)) },
          `${fmt.int(u.peers_failing)} failing · ${doing}${pause}`));
    })));
    this.root.replaceChildren(...parts);
  }
}
