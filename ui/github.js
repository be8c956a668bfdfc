// The GitHub Status panel: overall indicator, the components Weir watches, open incidents with
// links, and recent changes announced by `github` events.

import { h } from './dom.js';
import * as fmt from './format.js';

const INDICATOR_TEXT = {
  none: 'All systems operational',
  minor: 'Minor disruption',
  major: 'Major disruption',
  critical: 'Critical outage',
  maintenance: 'Under maintenance',
};
const RECENT_MAX = 10;

function link(href, text) {
  const safe = fmt.safeHref(href);
  return safe ? h('a', { href: safe, target: '_blank', rel: 'noopener noreferrer' }, text) : h('span', {}, text);
}

export class GithubPanel {
  constructor(root) {
    this.root = root;
    this.recent = [];
    this.key = null;
    this.doc = undefined;
  }

  /** `gh` is `status.github`: an object, null (not fetched yet) or undefined (not reported). */
  update(gh) {
    const key = JSON.stringify([gh ?? null, this.recent]);
    if (key === this.key) return;
    this.key = key;
    this.doc = gh;
    this.render();
  }

  event(ev) {
    this.recent.unshift(ev);
    this.recent.length = Math.min(this.recent.length, RECENT_MAX);
    this.key = null;
    this.update(this.doc);
  }

  /**
   * Whether GitHub itself reports trouble (for the header). An unreachable status page says
   * nothing about GitHub, so only the page's own indicator counts.
   */
  degraded() {
    const gh = this.doc;
    return Boolean(gh && typeof gh === 'object' && ['minor', 'major', 'critical'].includes(gh.indicator));
  }

  render() {
    const gh = this.doc;
    const parts = [];
    if (!gh || typeof gh !== 'object') {
      parts.push(h('p', { class: 'muted' }, gh === null
        ? 'Waiting for the first answer from githubstatus.com…'
        : '— (this Weir version does not watch GitHub Status yet)'));
    } else {
      const indicator = gh.indicator ? String(gh.indicator) : null;
      parts.push(h('p', { class: 'gh-head' },
        h('span', { class: 'pill', 'data-testid': 'github-indicator', 'data-indicator': indicator ?? 'unknown' },
          indicator ? (INDICATOR_TEXT[indicator] ?? fmt.words(indicator)) : 'No data yet'),
        gh.description && gh.description !== INDICATOR_TEXT[indicator] ? ` ${gh.description}` : ''));
      const checked = gh.checked_at ? `checked ${fmt.ago(gh.checked_at)}` : 'not checked yet';
      parts.push(h('p', { class: 'muted small gh-meta' },
        gh.page_url ? link(gh.page_url, 'githubstatus.com') : 'githubstatus.com', ` ${checked}`,
        gh.stale && gh.last_ok_at ? ` · showing data from ${fmt.ago(gh.last_ok_at)}` : ''));
      if (gh.error) parts.push(h('p', { class: 'small warn-text', 'data-testid': 'github-error' }, `Last check failed: ${gh.error}`));
      const comps = Array.isArray(gh.components) ? gh.components : [];
      parts.push(h('h3', { class: 'sub' }, 'Watched components'));
      parts.push(comps.length
        ? h('ul', { class: 'kv-list small', 'data-testid': 'github-components' }, comps.map((c) =>
          h('li', {}, h('span', {}, c.name ?? fmt.DASH), h('span', { class: 'pill', 'data-status': c.status ?? '' }, fmt.words(c.status)))))
        : h('p', { class: 'muted small' }, fmt.DASH));
      const incidents = Array.isArray(gh.incidents) ? gh.incidents : [];
      parts.push(h('h3', { class: 'sub' }, 'Incidents'));
      parts.push(incidents.length
        ? h('ul', { class: 'incidents small', 'data-testid': 'github-incidents' }, incidents.map((i) =>
          h('li', { 'data-impact': i.impact ?? '' },
            link(i.shortlink, i.name ?? 'Incident'),
            h('span', { class: 'muted' }, ` — ${fmt.words(i.status)}, impact ${fmt.words(i.impact)}, updated ${fmt.ago(i.updated_at)}`),
            i.latest_update ? h('div', { class: 'muted latest-update' }, String(i.latest_update)) : null)))
        : h('p', { class: 'muted small' }, gh.checked_at && !gh.error ? 'No open incidents.' : fmt.DASH));
    }
    if (this.recent.length) {
      parts.push(h('h3', { class: 'sub' }, 'Recent changes'));
      parts.push(h('ul', { class: 'incidents small', 'data-testid': 'github-recent' }, this.recent.map((e) =>
        h('li', {}, h('time', { datetime: e.at, title: fmt.dateTime(e.at) }, fmt.clock(e.at)), ' ',
          e.url ? link(e.url, e.title ?? fmt.words(e.change)) : h('span', {}, e.title ?? fmt.words(e.change)),
          h('span', { class: 'muted' }, ` (${fmt.words(e.change)})`)))));
    }
    this.root.replaceChildren(...parts);
  }
}
