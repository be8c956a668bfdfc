// One card per upstream: breaker state, live rates, what Weir saved, the rate chart, errors by
// kind, per-class counters and a breaker timeline fed by `breaker` events.

import { h, setText, slug } from './dom.js';
import { createChart } from './chart.js';
import * as fmt from './format.js';

const CLASSES = ['list', 'view', 'stream', 'create', 'token', 'model', 'other'];
const CLASS_COLS = [
  ['client_requests', 'client'],
  ['upstream_requests', 'to GitHub'],
  ['coalesced', 'coalesced'],
  ['cache_hits_fresh', 'fresh hits'],
  ['cache_hits_stale', 'stale hits'],
  ['errors', 'errors'],
];
const TIMELINE_MAX = 30;
const BREAKER_KNOWN = new Set(['state', 'since', 'reason', 'open_count', 'opens_total', 'failure_rate', 'slow_rate', 'calls_in_window', 'retry_after_s',
  'consecutive_failures', 'consecutive_threshold', 'minimum_calls', 'caution', 'latency']);

/** Words for `breaker.caution[].source` (the typed `CautionSource`). */
const CAUTION_SOURCE = { github_status: 'GitHub Status', peers: 'team' };

/** "cautious (GitHub Status: incident: …): opens after 3 failures in a row or 5 calls" */
function cautionText(b) {
  const list = Array.isArray(b.caution) ? b.caution : [];
  if (!list.length) return '';
  const why = list.map((c) => {
    const src = CAUTION_SOURCE[c?.source] ?? fmt.words(String(c?.source ?? 'unknown'));
    return c?.detail ? `${src}: ${c.detail}` : src;
  }).join('; ');
  const bar = [];
  if (typeof b.consecutive_threshold === 'number' && b.consecutive_threshold > 0) bar.push(`${b.consecutive_threshold} failures in a row`);
  if (typeof b.minimum_calls === 'number') bar.push(`a bad rate over ${b.minimum_calls} calls`);
  return `cautious (${why})${bar.length ? ` — opens after ${bar.join(' or ')}` : ''}`;
}

/** "view usually 100 ms, slow from 1 s" per class that has learned its baseline. */
function latencyText(b) {
  const list = Array.isArray(b.latency) ? b.latency : [];
  const ms = (v) => (v >= 1000 ? `${(v / 1000).toFixed(v % 1000 ? 1 : 0)} s` : `${Math.round(v)} ms`);
  return list
    .filter((l) => typeof l?.p50_ms === 'number')
    .map((l) => `${l.class} usually ${ms(l.p50_ms)}${typeof l.slow_after_ms === 'number' ? `, slow from ${ms(l.slow_after_ms)}` : ''}`)
    .join('; ');
}

function metric(label, testid, hint) {
  const value = h('dd', { 'data-testid': testid }, fmt.DASH);
  return { el: [h('dt', { title: hint }, label), value], value };
}

function buildCard(name) {
  const id = slug(name);
  const breaker = h('span', { class: 'breaker', 'data-testid': `breaker-${id}`, 'data-state': 'unknown' }, fmt.DASH);
  const breakerDetail = h('p', { class: 'breaker-detail small muted', 'data-testid': `breaker-detail-${id}` }, 'Breaker state not reported by this Weir version.');
  const origin = h('span', { class: 'origin muted small' });
  const m = {
    clientRate: metric('Client', `client-rate-${id}`, 'Requests per second from your tools'),
    upstreamRate: metric('To GitHub', `upstream-rate-${id}`, 'Requests per second Weir sent upstream'),
    saved: metric('Saved (2 min)', `saved-${id}`, 'Requests answered without calling GitHub over the last two minutes'),
    clientTotal: metric('Client requests', `client-total-${id}`, 'Since Weir started'),
    upstreamTotal: metric('Upstream requests', `upstream-total-${id}`, 'Since Weir started'),
    cacheRatio: metric('Cache hits', `cache-ratio-${id}`, 'Fresh and stale cache hits per client request'),
    coalesceRatio: metric('Coalesced', `coalesce-ratio-${id}`, 'Client requests that joined an identical call already in flight'),
    errors: metric('Errors', `errors-${id}`, 'Requests that ended in an error'),
  };
  const chart = createChart(`Requests per second for ${name}: client versus to GitHub`);
  const errorsList = h('ul', { class: 'kv-list small', 'data-testid': `errors-by-kind-${id}` });
  const classBody = h('tbody');
  const classTable = h('table', { class: 'class-table small' },
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'class'), CLASS_COLS.map(([, l]) => h('th', { scope: 'col', class: 'num' }, l)))),
    classBody);
  const guardList = h('ul', { class: 'kv-list small guard', 'data-testid': `guard-${id}` });
  const timeline = h('ol', { class: 'timeline small', 'data-testid': `timeline-${id}` },
    h('li', { class: 'muted' }, 'No breaker changes since this page opened.'));
  const root = h('article', { class: 'card', 'data-testid': `upstream-${id}`, 'aria-labelledby': `up-${id}-h` },
    h('header', { class: 'card-head' },
      h('div', {}, h('h3', { id: `up-${id}-h` }, name), origin),
      breaker),
    breakerDetail,
    h('dl', { class: 'metrics' }, Object.values(m).map((x) => x.el)),
    chart.root,
    h('div', { class: 'card-cols' },
      h('div', {}, h('h4', {}, 'Errors by kind'), errorsList),
      h('div', {}, h('h4', {}, 'Breaker timeline'), timeline)),
    h('details', {}, h('summary', { class: 'small' }, 'Counters by request class, retries and limits'),
      h('div', { class: 'table-wrap' }, classTable), guardList));
  return { root, breaker, breakerDetail, origin, m, chart, errorsList, classBody, guardList, timeline, events: [] };
}

function pct(v) {
  return typeof v === 'number' && Number.isFinite(v) ? `${Math.round(v * 100)}%` : fmt.DASH;
}

function renderBreaker(card, b, now, cooldown) {
  if (!b || typeof b !== 'object') {
    card.breaker.dataset.state = 'unknown';
    setText(card.breaker, fmt.DASH);
    return;
  }
  const state = String(b.state ?? 'unknown');
  card.breaker.dataset.state = state;
  setText(card.breaker, fmt.words(state));
  const parts = [];
  if (b.since) parts.push(`since ${fmt.clock(b.since)} (${fmt.ago(b.since, now)})`);
  if (b.reason) parts.push(String(b.reason));
  // While open the reason already states the rates that tripped it.
  if (state !== 'open' && ('failure_rate' in b || 'slow_rate' in b)) {
    const calls = typeof b.calls_in_window === 'number' ? ` of ${fmt.int(b.calls_in_window)} recent calls` : '';
    parts.push(`${pct(b.failure_rate)} failed, ${pct(b.slow_rate)} slow${calls}`);
  }
  if (typeof b.consecutive_failures === 'number' && b.consecutive_failures > 0) parts.push(`${fmt.int(b.consecutive_failures)} failed in a row`);
  const caution = cautionText(b);
  if (caution) parts.push(caution);
  const latency = latencyText(b);
  if (latency) parts.push(latency);
  if (typeof b.opens_total === 'number') parts.push(`opened ${fmt.int(b.opens_total)}×`);
  if (typeof b.retry_after_s === 'number') parts.push(`next probe in ${Math.ceil(b.retry_after_s)} s`);
  if (typeof cooldown === 'number' && cooldown > 0) parts.push(`cooling down after rate limiting or overload: ${Math.ceil(cooldown)} s left`);
  for (const [k, v] of Object.entries(b)) {
    if (!BREAKER_KNOWN.has(k) && v !== null && typeof v !== 'object') parts.push(`${fmt.words(k)}: ${v}`);
  }
  setText(card.breakerDetail, parts.length ? parts.join(' · ') : fmt.DASH);
}

function renderErrors(card, byKind) {
  const entries = Object.entries(byKind || {}).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
  const key = JSON.stringify(entries);
  if (card.errorsKey === key) return;
  card.errorsKey = key;
  card.errorsList.replaceChildren(...(entries.length
    ? entries.map(([k, n]) => h('li', {}, h('span', {}, fmt.words(k)), h('span', { class: 'num' }, fmt.int(n))))
    : [h('li', { class: 'muted' }, 'None')]));
}

function renderClasses(card, classes) {
  const rows = CLASSES.filter((c) => classes && classes[c]).map((c) =>
    h('tr', {}, h('th', { scope: 'row' }, c), CLASS_COLS.map(([k]) => h('td', { class: 'num' }, fmt.int(classes[c][k])))));
  const key = JSON.stringify(classes || {});
  if (card.classesKey === key) return;
  card.classesKey = key;
  card.classBody.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: 7, class: 'muted' }, fmt.DASH))]));
}

/** Retry budget, bulkhead and fallback lines, for whichever of them this Weir reports. */
function renderGuard(card, up) {
  const rows = [];
  const b = up.retry_budget;
  if (b && typeof b === 'object') {
    rows.push(['Retry budget', `${fmt.int(b.available)} retries available · ${fmt.int(b.retries_allowed_total)} allowed, ${fmt.int(b.retries_refused_total)} refused so far`]);
  }
  const k = up.bulkhead;
  if (k && typeof k === 'object') {
    rows.push(['Concurrency limit', `${fmt.int(k.in_flight)} in flight, ${fmt.int(k.queued)} waiting, ${fmt.int(k.shed_total)} shed so far`]);
  }
  if (up.fallback) rows.push(['Fallback', `${up.fallback} (${fmt.int(up.fallback_attempts)} attempts)`]);
  const key = JSON.stringify(rows);
  if (card.guardKey === key) return;
  card.guardKey = key;
  card.guardList.replaceChildren(...rows.map(([label, text]) => h('li', {}, h('span', {}, label), h('span', {}, text))));
}

function renderTimeline(card) {
  card.timeline.replaceChildren(...card.events.map((e) =>
    h('li', { 'data-to': e.to },
      h('time', { datetime: e.at, title: fmt.dateTime(e.at) }, fmt.clock(e.at)), ' ',
      h('span', { class: 'transition' }, `${fmt.words(e.from)} → ${fmt.words(e.to)}`),
      e.reason ? h('span', { class: 'muted' }, ` — ${e.reason}`) : null)));
}

export class UpstreamCards {
  constructor(container) {
    this.container = container;
    this.cards = new Map();
    this.pending = new Map(); // breaker events that arrived before the card existed
  }

  update(status, history, now) {
    const ups = status.upstreams || [];
    if (!ups.length) {
      this.cards.clear();
      this.container.replaceChildren(h('p', { class: 'muted empty' }, 'No upstreams configured.'));
      return;
    }
    const names = new Set();
    ups.forEach((up, i) => {
      const name = String(up.name);
      names.add(name);
      let card = this.cards.get(name);
      if (!card) {
        card = buildCard(name);
        card.events = this.pending.get(name) || [];
        this.pending.delete(name);
        if (card.events.length) renderTimeline(card);
        this.cards.set(name, card);
      }
      if (this.container.children[i] !== card.root) this.container.insertBefore(card.root, this.container.children[i] || null);
      this.renderCard(card, up, history, now);
    });
    for (const [name, card] of this.cards) {
      if (!names.has(name)) {
        card.root.remove();
        this.cards.delete(name);
      }
    }
    for (const el of [...this.container.children]) if (![...this.cards.values()].some((c) => c.root === el)) el.remove();
  }

  renderCard(card, up, history, now) {
    const t = up.totals || {};
    const name = String(up.name);
    const latest = history.latest(name);
    setText(card.origin, up.origin ?? fmt.DASH);
    renderBreaker(card, up.breaker, now, up.cooldown_remaining_s);
    setText(card.m.clientRate.value, fmt.rate(latest?.client));
    setText(card.m.upstreamRate.value, fmt.rate(latest?.upstream));
    setText(card.m.saved.value, latest ? fmt.int(Math.round(history.savedInWindow(name))) : fmt.DASH);
    setText(card.m.clientTotal.value, fmt.int(t.client_requests));
    setText(card.m.upstreamTotal.value, fmt.int(t.upstream_requests));
    const hits = (t.cache_hits_fresh ?? NaN) + (t.cache_hits_stale ?? NaN);
    setText(card.m.cacheRatio.value, fmt.ratio(hits, t.client_requests));
    setText(card.m.coalesceRatio.value, fmt.ratio(t.coalesced, t.client_requests));
    setText(card.m.errors.value, fmt.int(t.errors));
    card.chart.update(history.samples(name), now,
      `Now ${fmt.rate(latest?.client)} from clients, ${fmt.rate(latest?.upstream)} to GitHub`);
    renderErrors(card, up.errors_by_kind);
    renderClasses(card, up.classes);
    renderGuard(card, up);
  }

  /** A `breaker` event: prepend it to that upstream's timeline. */
  breakerEvent(ev) {
    const name = String(ev.upstream ?? '');
    const card = this.cards.get(name);
    const list = card ? card.events : (this.pending.get(name) || []);
    list.unshift(ev);
    list.length = Math.min(list.length, TIMELINE_MAX);
    if (card) {
      renderTimeline(card);
      card.breaker.dataset.state = String(ev.to ?? card.breaker.dataset.state);
      setText(card.breaker, fmt.words(ev.to));
    } else {
      this.pending.set(name, list);
    }
  }
}
