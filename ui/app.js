// The dashboard's entry point: reads the control secret, opens the live event stream and hands
// each event to the panel that shows it. No polling: Weir pushes a status snapshot every second.

import { apiBase, call, hasSecret, loadSecret, url } from './api.js';
import { byTestId, h, setText, slug } from './dom.js';
import * as fmt from './format.js';
import { RateHistory } from './rates.js';
import { UpstreamCards } from './upstreams.js';
import { QueuePanel } from './queue.js';
import { HandoffsPanel } from './handoffs.js';
import { GithubPanel } from './github.js';
import { TeamPanel } from './team.js';
import { PolicyPanel } from './policy.js';
import { SetupPanel } from './setup.js';
import { SetupView } from './setup-view.js';
import { SettingsForm } from './settings.js';
import { TokenPanel } from './token.js';
import { CachePanel } from './cache.js';
import { AccountsPanel } from './accounts.js';
import { SessionsPanel } from './sessions.js';
import { NetworkSwitch } from './network.js';

const STALE_WINDOW_MS = 15_000;

const state = { status: null, connected: false, everConnected: false };
const history = new RateHistory();

// ---- Messages -------------------------------------------------------------------------------

const banner = document.getElementById('banner');

/** Shows a problem document's title and detail in the alert banner. */
function showProblem(err) {
  const p = err?.problem ?? { title: 'Something went wrong', detail: String(err?.message ?? err) };
  setText(banner.querySelector('.banner-title'), p.title);
  // A rejected secret is usually one from an earlier run of Weir (it makes a new one per start).
  const stale = p.status === 401 && hasSecret() ? ' This page\'s control secret was refused: open the link printed by `weir serve` (or the tray) again.' : '';
  setText(banner.querySelector('.banner-detail'), `${p.detail ?? ''}${stale}`);
  const more = banner.querySelector('.banner-more');
  const type = typeof p.type === 'string' && p.type !== 'about:blank' ? p.type : null;
  if (type) {
    more.href = type.startsWith('/') ? url(type) : (fmt.safeHref(type) ?? '#');
    more.hidden = false;
  } else {
    more.hidden = true;
  }
  banner.dataset.kind = p.kind ?? '';
  banner.hidden = false;
}

banner.querySelector('.banner-close').addEventListener('click', () => {
  banner.hidden = true;
});

const notice = byTestId('notice');
let noticeTimer = null;
function showNotice(text) {
  setText(notice, text);
  notice.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => {
    notice.hidden = true;
  }, 4000);
}

// ---- Panels ---------------------------------------------------------------------------------

const cards = new UpstreamCards(byTestId('upstreams'));
const queue = new QueuePanel({
  table: byTestId('queue'),
  note: byTestId('queue-note'),
  counts: byTestId('queue-counts'),
  credentials: byTestId('queue-credentials'),
  showFinished: byTestId('queue-show-finished'),
  onProblem: showProblem,
  onNotice: showNotice,
});
const handoffs = new HandoffsPanel({
  section: byTestId('handoffs-section'),
  table: byTestId('handoffs'),
  note: byTestId('handoffs-note'),
  view: byTestId('handoff-view'),
  onProblem: showProblem,
  onNotice: showNotice,
});
const github = new GithubPanel(byTestId('github'));
const accounts = new AccountsPanel({ table: byTestId('accounts'), note: byTestId('accounts-note') });
const team = new TeamPanel(byTestId('team-section'), byTestId('team'));
const policy = new PolicyPanel({
  form: byTestId('policy-form'),
  table: byTestId('policy-table'),
  refused: byTestId('policy-refused'),
  onProblem: showProblem,
});
const setup = new SetupPanel({ list: byTestId('proxy-setup'), status: byTestId('copy-status') });
const setupView = new SetupView({
  section: byTestId('setup-section'),
  list: byTestId('setup-steps'),
  result: byTestId('setup-result'),
  refresh: byTestId('setup-refresh'),
  close: byTestId('setup-close'),
  onProblem: showProblem,
  onSteps: (steps) => renderSetupNeeded(steps),
  // First run: open by itself, unless the page was opened at a view of its own (a tray link).
  // The address stays as it was, so a reload (a later start) opens the overview again.
  onOpen: () => { if (!hashParams().get('view')) show('setup'); },
  onClose: () => go('overview'),
});
const settings = new SettingsForm({
  form: byTestId('settings-form'),
  configNote: byTestId('config-note'),
  saved: byTestId('settings-saved'),
  live: byTestId('settings-live'),
  onProblem: showProblem,
  onNotice: showNotice,
});
const cachePanel = new CachePanel({
  state: byTestId('cache-persistence'),
  clear: byTestId('cache-clear'),
  onProblem: showProblem,
  onNotice: showNotice,
});
const sessions = new SessionsPanel({
  table: byTestId('sessions'),
  summary: byTestId('sessions-summary'),
  note: byTestId('sessions-note'),
  form: byTestId('task-form'),
  result: byTestId('task-result'),
  onProblem: showProblem,
  onNotice: showNotice,
});
const token = new TokenPanel({
  form: byTestId('token-form'),
  input: byTestId('token-input'),
  store: byTestId('token-store'),
  remove: byTestId('token-remove'),
  status: byTestId('token-status'),
  state: byTestId('token-state'),
  onProblem: showProblem,
});

// ---- Header ---------------------------------------------------------------------------------

const overallEl = byTestId('overall-state');
const connEl = byTestId('connection');
const modeSwitch = byTestId('mode-switch');
const modeButtons = [...modeSwitch.querySelectorAll('button[data-mode]')];
const modeReasonEl = byTestId('mode-reason');
const MODE_NOTICES = {
  automatic: 'Automatic: Weir caches, coalesces, retries and queues as usual.',
  cache_only: 'Cache only: answering from the cache and queuing creates; nothing is sent upstream.',
  pass_through: 'Pass-through: traffic passes straight through, nothing is cached or coalesced.',
};

/** The status's mode (older Weirs only had `paused`). */
function modeOf(st) {
  return st?.mode ?? { mode: st?.paused ? 'pass_through' : 'automatic', chosen: st?.paused ? 'pass_through' : 'automatic', reason: '' };
}

function overall(now) {
  const st = state.status;
  if (!st) return { key: 'connecting', text: state.everConnected ? 'Waiting for status…' : 'Connecting to Weir…' };
  const mode = modeOf(st);
  if (mode.mode === 'pass_through') return { key: 'paused', text: 'Pass-through — requests pass straight through, nothing is cached or coalesced' };
  if (mode.mode === 'cache_only') return { key: 'cache-only', text: 'Cache only — answering from the cache, queuing creates, nothing sent upstream' };
  if (mode.mode === 'offline') {
    return { key: 'offline', text: `Offline since ${fmt.clock(mode.offline?.since ?? mode.since)} — every upstream unreachable; answering from the cache, queuing creates, probing` };
  }
  const ups = st.upstreams || [];
  const open = ups.filter((u) => u.breaker?.state === 'open').map((u) => u.name);
  if (open.length) {
    return { key: 'breaker-open', text: `Upstream breaker open: ${open.join(', ')} — answering from cache, queuing creates` };
  }
  const degraded = ups.filter((u) => u.breaker?.state === 'degraded');
  if (degraded.length) {
    const why = degraded.map((u) => `${u.name} degraded: ${u.breaker.reason}`).join('; ');
    return { key: 'degraded', text: `${why} — still answering, watching closely` };
  }
  const halfOpen = ups.some((u) => u.breaker?.state === 'half_open');
  const stale = ups.some((u) => history.servedStaleWithin(String(u.name), STALE_WINDOW_MS, now));
  if (halfOpen || stale || github.degraded()) return { key: 'degraded', text: 'Serving from cache while GitHub is slow' };
  return { key: 'ok', text: 'All good' };
}

/** A reason with its RFC 3339 times as the local clock ("chosen in the dashboard at 14:02:07"). */
function readableTimes(text) {
  return String(text ?? '').replace(/\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})/g, (t) => fmt.clock(t));
}

function renderHeader(now = Date.now()) {
  const o = overall(now);
  overallEl.dataset.state = o.key;
  overallEl.dataset.stale = String(!state.connected && Boolean(state.status));
  setText(overallEl.querySelector('.state-text'), state.connected || !state.status ? o.text : `${o.text} (last known)`);

  connEl.dataset.connected = String(state.connected);
  setText(connEl, state.connected ? 'Live' : (state.everConnected ? 'Disconnected — reconnecting…' : 'Connecting…'));

  const mode = modeOf(state.status);
  // Offline is automatic's own state: the Automatic button stays the chosen one.
  setText(modeReasonEl, state.status && mode.mode !== 'automatic' ? `(${readableTimes(mode.reason)})` : '');
  modeSwitch.title = state.status ? `Mode: ${mode.reason}` : '';
  for (const b of modeButtons) {
    b.disabled = !state.status;
    b.setAttribute('aria-checked', String(Boolean(state.status) && b.dataset.mode === mode.chosen));
    b.title = hasSecret() ? '' : 'Needs the control secret (open the link printed by weir serve)';
  }
}

for (const b of modeButtons) {
  b.addEventListener('click', async () => {
    if (!state.status || b.getAttribute('aria-checked') === 'true') return;
    for (const x of modeButtons) x.disabled = true;
    try {
      const res = await call('PUT', '/_weir/api/mode', { mode: b.dataset.mode, by: 'dashboard' });
      if (res && typeof res.mode === 'string') {
        state.status.mode = res;
        state.status.paused = res.mode === 'pass_through';
      }
      showNotice(MODE_NOTICES[b.dataset.mode] ?? 'Mode changed.');
    } catch (e) {
      showProblem(e);
    } finally {
      renderHeader();
    }
  });
}

const network = new NetworkSwitch(byTestId('network'), { onProblem: showProblem, onNotice: showNotice });

// ---- Overview: what a person takes in at a glance -------------------------------------------

/** "in the last hour", or how long the figures cover while Weir has not run (or been read) that long. */
function savedWindow(secs) {
  if (!Number.isFinite(secs)) return 'in the last hour';
  if (secs >= 3540 && secs <= 3720) return 'in the last hour';
  if (secs > 3720) return `in the last ${fmt.duration(secs * 1000)}`;
  return `since Weir started (${fmt.duration(secs * 1000)} ago)`;
}

/** Why Weir lists no sessions (`sessions.reason` while the poller is off). */
const SESSIONS_OFF = {
  no_token: 'no GitHub token stored',
  no_keychain: 'no OS keychain to keep a token in',
  keychain_unavailable: 'the keychain did not answer',
  no_upstream: 'no managed upstream to ask',
};

function renderGlance(st) {
  const saved = st.saved;
  if (saved && typeof saved === 'object') {
    setText(byTestId('saved-window'), savedWindow(saved.window_secs));
    setText(byTestId('saved-avoided'), fmt.int(saved.upstream_calls_avoided));
    setText(byTestId('saved-hidden'), fmt.int(saved.failures_hidden));
    setText(byTestId('saved-kept'), fmt.int(saved.creates_kept));
  }
  // The queue: what waits, in words; the counts come with the full status only.
  const q = st.queue || {};
  let queueText;
  if (q.available === false) queueText = `Off: ${q.error ?? 'the create queue is unavailable'}`;
  else if (typeof q.queued !== 'number') queueText = hasSecret() ? 'Counting…' : 'Counts need the control secret';
  else {
    const waiting = ['queued', 'replaying', 'in_doubt'].filter((k) => q[k] > 0).map((k) => `${fmt.int(q[k])} ${fmt.words(k)}`);
    const failed = q.failed > 0 ? [`${fmt.int(q.failed)} failed`] : [];
    queueText = waiting.length || failed.length ? [...waiting, ...failed].join(' · ') : 'Nothing waiting';
  }
  setText(byTestId('glance-queue-text'), queueText);
  const offers = Array.isArray(st.handoffs?.pending) ? st.handoffs.pending.length : 0;
  const offersEl = byTestId('glance-offers');
  offersEl.hidden = offers === 0;
  setText(offersEl, offers === 1 ? '1 offer to your local agent waits for you' : `${offers} offers to your local agent wait for you`);

  const s = st.sessions || {};
  setText(byTestId('glance-sessions-text'), s.poller === 'off' ? `Off: ${SESSIONS_OFF[s.reason] ?? fmt.words(s.reason ?? 'off')}` : (s.summary || '—'));
  const list = byTestId('glance-sessions-list');
  const recent = sessions.latest(3);
  const key = JSON.stringify(recent);
  if (list.dataset.key !== key) {
    list.dataset.key = key;
    list.replaceChildren(...recent.map((x) => h('li', {},
      h('span', { class: `pill group-${x.group}` }, fmt.words(x.group)), ' ',
      h('span', { class: 'glance-title' }, x.title))));
  }

  const ups = Array.isArray(st.upstreams) ? st.upstreams : [];
  const upList = byTestId('glance-upstreams-list');
  const upKey = JSON.stringify(ups.map((u) => [u.name, u.breaker?.state]));
  if (upList.dataset.key !== upKey) {
    upList.dataset.key = upKey;
    upList.replaceChildren(...(ups.length ? ups.map((u) => h('li', { 'data-testid': `glance-upstream-${slug(u.name)}` },
      h('span', { class: 'breaker', 'data-state': u.breaker?.state ?? '' }, fmt.words(u.breaker?.state ?? 'unknown')), ' ',
      h('span', {}, u.name))) : [h('li', { class: 'muted' }, 'No managed upstream')]));
  }
}

/** The Set up tab and the overview's prompt: shown while a step is needed. */
let setupNeeded = 0;
function renderSetupNeeded(steps) {
  setupNeeded = steps.filter((x) => x.state === 'needed').length;
  const prompt = byTestId('glance-setup');
  prompt.hidden = setupNeeded === 0;
  setText(byTestId('glance-setup-text'), setupNeeded === 1 ? '1 set-up step is needed.' : `${setupNeeded} set-up steps are needed.`);
  renderNav();
}

const counterEl = byTestId('overview');

/** Blind tunnels, and the bytes they moved both ways. */
function tunnelsText(st) {
  const b = st.tunnel_bytes || {};
  const moved = (b.up || 0) + (b.down || 0);
  return moved ? `${fmt.int(st.tunnels)} · ${fmt.bytes(moved)}` : fmt.int(st.tunnels);
}

/** TLS interception: connections and leaves issued, or "off". */
function interceptedText(i) {
  if (!i) return 'off';
  return `${fmt.int(i.connections)} · ${fmt.int(i.leaves_issued)} ${i.leaves_issued === 1 ? 'leaf' : 'leaves'}`;
}

/**
 * Failed client handshakes; those that refused Weir's CA named, since `weir ca install` fixes
 * them, and those that closed after Weir's certificate with no alert (what Node and VS Code do when they
 * do not trust it; NODE_EXTRA_CA_CERTS fixes that), named as what they are.
 */
function handshakesText(i) {
  if (!i) return '—';
  const f = i.handshake_failures || {};
  const total = Object.values(f).reduce((a, n) => a + n, 0);
  const named = [];
  if (f.untrusted_ca) named.push(`${fmt.int(f.untrusted_ca)} do not trust Weir's CA`);
  if (f.closed_after_certificate) named.push(`${fmt.int(f.closed_after_certificate)} closed after Weir's certificate`);
  return [fmt.int(total), ...named].join(' · ');
}

function renderCounters(st) {
  const sf = st.surfaces || {};
  const c = st.cache || {};
  const items = [
    ['VS Code', fmt.int(sf.vscode), 'surface-vscode'],
    ['gh CLI', fmt.int(sf.gh_cli), 'surface-gh'],
    ['Browser', fmt.int(sf.browser), 'surface-browser'],
    ['Other tools', fmt.int(sf.other), 'surface-other'],
    ['Passed through', fmt.int(st.passthrough_requests), 'passthrough'],
    ['Tunnels', tunnelsText(st), 'tunnels'],
    ['Intercepted', interceptedText(st.interception), 'intercepted'],
    ['Failed handshakes', handshakesText(st.interception), 'handshake-failures'],
    ['Rejected', fmt.int(st.rejected), 'rejected'],
    ['Cache entries', fmt.int(c.entries), 'cache-entries'],
    ['Cache size', `${fmt.bytes(c.bytes)} of ${fmt.bytes(c.max_bytes)}`, 'cache-size'],
    ['In flight', fmt.int(c.in_flight), 'in-flight'],
  ];
  // A <div> per dt/dd pair (allowed in <dl>) so each pair is one grid cell.
  if (counterEl.children.length !== items.length) {
    counterEl.replaceChildren(...items.map(([label, , id]) =>
      h('div', {}, h('dt', {}, label), h('dd', { 'data-testid': `overview-${id}` }))));
  }
  items.forEach(([, value], i) => setText(counterEl.children[i].lastElementChild, value));
}

// ---- Live stream ----------------------------------------------------------------------------

function parse(ev) {
  try {
    return JSON.parse(ev.data);
  } catch {
    return null;
  }
}

function onStatus(doc) {
  if (!doc || typeof doc !== 'object') return;
  const now = Date.now();
  state.status = doc;
  history.push(doc, now);
  renderHeader(now);
  renderCounters(doc);
  renderGlance(doc);
  cards.update(doc, history, now);
  queue.statusUpdate(doc.queue);
  handoffs.statusUpdate(doc.handoffs);
  github.update(doc.github);
  accounts.update(doc.identity);
  team.update(doc.team);
  network.update(doc.network);
  token.statusUpdate(doc);
  settings.statusUpdate(doc.settings);
  cachePanel.statusUpdate(doc.cache);
  sessions.statusUpdate(doc);
  setup.update(doc.listen || new URL(apiBase()).host);
  setText(byTestId('version'), doc.version ? `v${doc.version}` : '');
  setText(byTestId('started'), `Listening on ${doc.listen ?? fmt.DASH} · started ${fmt.dateTime(doc.started_at)} (${fmt.ago(doc.started_at, now)})`);
}

let source = null;
let retryDelay = 1000;

function connect() {
  source = new EventSource(url('/_weir/api/events'));
  source.addEventListener('open', () => {
    state.connected = true;
    state.everConnected = true;
    retryDelay = 1000;
    renderHeader();
    queue.scheduleRefresh(0);
  });
  source.addEventListener('error', () => {
    state.connected = false;
    renderHeader();
    // EventSource retries by itself unless the server answered with an error; then it closes
    // for good and we open a new one, backing off up to 15 s.
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 15_000);
    }
  });
  source.addEventListener('status', (ev) => onStatus(parse(ev)));
  source.addEventListener('breaker', (ev) => {
    const e = parse(ev);
    if (e) {
      cards.breakerEvent(e);
      renderHeader();
    }
  });
  source.addEventListener('queue', () => queue.scheduleRefresh());
  source.addEventListener('handoff', () => handoffs.scheduleRefresh());
  source.addEventListener('session', () => sessions.event());
  source.addEventListener('github', (ev) => {
    const e = parse(ev);
    if (e) github.event(e);
  });
  // The config file changed on disk: show its values (unless the form has unsaved edits).
  source.addEventListener('settings_applied', (ev) => {
    const e = parse(ev);
    if (e?.source === 'file') settings.reloadIfClean();
  });
  // The next `status` brings the whole mode; this shows the change at once.
  source.addEventListener('mode_changed', (ev) => {
    const e = parse(ev);
    if (!e || !state.status || typeof e.to !== 'string') return;
    const prev = modeOf(state.status);
    state.status.mode = {
      ...prev,
      mode: e.to,
      chosen: e.to === 'offline' ? 'automatic' : e.to,
      reason: e.reason ?? prev.reason,
      since: e.at ?? prev.since,
      offline: e.to === 'offline' ? (prev.offline ?? { since: e.at }) : null,
    };
    state.status.paused = e.to === 'pass_through';
    renderHeader();
  });
}

// ---- Views ----------------------------------------------------------------------------------

// Each view has its own address, `#view=NAME`: the tray's "N creates queued" item opens
// `#view=queue`, its sessions line `#view=sessions`, a local-agent offer
// `#view=handoffs&offer=<id>` (the Queue view with the offer under review), its "Set up"
// `#view=setup` (the Set up view also opens by itself on the install's first run).
const VIEWS = ['overview', 'sessions', 'queue', 'traffic', 'policy', 'settings', 'setup'];
const viewEls = [...document.querySelectorAll('main > .view[data-view]')];
const navLinks = [...document.querySelectorAll('nav.tabs a[data-view]')];
let current = null;

function hashParams() {
  return new URLSearchParams(location.hash.replace(/^#/, ''));
}

/** Opens a view by its address, so the browser's Back goes to the one before. */
function go(view) {
  const want = `#view=${view}`;
  if (location.hash === want) route();
  else location.hash = want;
}

function renderNav() {
  for (const a of navLinks) {
    if (a.dataset.view === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
    // Set up: shown while a step is needed, or while it is open.
    if (a.dataset.view === 'setup') a.hidden = setupNeeded === 0 && current !== 'setup';
  }
}

/** The view the address names. */
function route() {
  const params = hashParams();
  let view = params.get('view') ?? 'overview';
  if (view === 'handoffs') {
    byTestId('handoffs-section').hidden = false;
    view = 'queue';
  }
  show(VIEWS.includes(view) ? view : 'overview');
  const offer = params.get('offer');
  if (params.get('view') === 'handoffs' && /^\d+$/.test(offer ?? '')) handoffs.review(offer);
}

/** Shows one view and hides the others. */
function show(view) {
  const changed = view !== current;
  current = view;
  for (const el of viewEls) el.hidden = el.dataset.view !== view;
  renderNav();
  if (view === 'setup') setupView.show();
  else setupView.hide();
  // A new view starts at its top (never under the sticky header).
  if (changed) window.scrollTo(0, 0);
}

// The sticky header's height, so a section scrolled to (a review, a step) is not under it.
const topbar = byTestId('topbar');
new ResizeObserver(() => {
  document.documentElement.style.setProperty('--topbar-h', `${topbar.offsetHeight}px`);
}).observe(topbar);

// ---- Start ----------------------------------------------------------------------------------

loadSecret();
window.addEventListener('hashchange', route);
route();
byTestId('readonly-notice').hidden = hasSecret();
byTestId('metrics-link').href = url('/metrics');
renderHeader();
if (!apiBase()) {
  showProblem({ problem: { title: 'Weir address unknown', detail: 'This page is not served by Weir and no Weir address was provided. Open the link printed by `weir serve` or use the tray.' } });
} else {
  connect();
  settings.load();
  // After loadSecret: the policy view needs the control secret (#31).
  policy.load();
  setupView.start();
}
