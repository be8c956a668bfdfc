// The Agent sessions view and the New task form (the sessions companion).
//
// The view shows what Weir's own poll of the stored token's session list last saw: it reads
// `GET /_weir/api/sessions` (needs the control secret: titles and repositories are private)
// only when the status document's `sessions.revision` changes or a `session` event arrives,
// never on a timer, and adds no call to GitHub. The form posts to `POST /_weir/api/sessions`,
// which sends the task through Weir's create path: a second submit of the same form carries the
// same Idempotency-Key, so it joins or repeats the first create instead of making another.

import { RequestSeq, call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import * as fmt from './format.js';

const GROUP_LABEL = {
  running: 'Running',
  ready_for_review: 'Ready for review',
  failed: 'Failed',
  finished: 'Finished',
  other: 'Other',
};

const POLLER_TEXT = {
  off: 'Off',
  polling: 'Watching',
  backing_off: 'Backing off',
  stopped_unauthorized: 'Stopped',
};

const REASON_TEXT = {
  no_token: 'store a GitHub token (Settings, or the Set up view) to see your agent sessions here',
  no_keychain: 'there is no OS keychain to keep a GitHub token in',
  keychain_unavailable: 'the keychain did not answer (locked?); trying again every minute',
  no_upstream: 'no upstream is configured',
  breaker_open: 'the upstream\u2019s circuit breaker is open',
  github_incident: 'GitHub Status shows a Copilot incident',
  upstream_error: 'the last poll failed',
  unauthorized: 'GitHub refused the stored token (401); store a new one',
  paused: 'Weir is paused',
  offline: 'Weir is offline; polling again as soon as it is back online',
};

function newKey() {
  const rnd = globalThis.crypto?.randomUUID?.() ?? `${Date.now()}-${Math.random().toString(16).slice(2)}`;
  return `dash-${rnd}`.replace(/[^A-Za-z0-9_-]/g, '');
}

export class SessionsPanel {
  constructor({ table, summary, note, form, result, onProblem, onNotice }) {
    Object.assign(this, { summary, note, form, result, onProblem, onNotice });
    this.body = table.tBodies[0];
    this.revision = null;
    this.sessions = [];
    this.status = null;
    this.seq = new RequestSeq();
    this.pending = false;
    // One key per filled-in form: resubmitting the same form is the same create.
    this.key = newKey();
    form.addEventListener('input', () => {
      this.key = newKey();
    });
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.submit();
    });
    this.render();
  }

  /** `doc` is the status document. */
  statusUpdate(doc) {
    const s = doc?.sessions;
    if (!s || typeof s !== 'object') return;
    this.status = s;
    if (s.revision !== this.revision) {
      this.revision = s.revision;
      this.refresh();
    }
    this.renderState();
  }

  /** A `session` event: something changed; read the list again. */
  event() {
    this.refresh();
  }

  /** Reads the list; only the answer to the last read sent is shown. */
  async refresh() {
    if (!hasSecret()) {
      this.render();
      return;
    }
    const n = this.seq.next();
    try {
      const doc = await call('GET', '/_weir/api/sessions');
      if (!this.seq.isLatest(n)) return;
      this.sessions = Array.isArray(doc?.sessions) ? doc.sessions : [];
      this.status = { ...(this.status ?? {}), ...doc };
    } catch (e) {
      if (!this.seq.isLatest(n)) return;
      this.onProblem(e);
    }
    this.render();
  }

  /** The `n` most recently updated sessions, for the overview: group and title only. */
  latest(n) {
    return this.sessions.slice(0, n).map((x) => ({ group: String(x.group ?? 'other'), title: String(x.title ?? x.id ?? '') }));
  }

  renderState() {
    const s = this.status;
    if (!s) {
      setText(this.summary, 'Waiting for the first status update…');
      setText(this.note, '');
      return;
    }
    setText(this.summary, s.poller === 'off' ? 'No sessions shown' : (s.summary ?? ''));
    this.summary.dataset.poller = s.poller ?? '';
    const reason = s.reason ? REASON_TEXT[s.reason] ?? fmt.words(s.reason) : '';
    const when = s.last_ok_at ? ` · updated ${fmt.ago(s.last_ok_at)}` : '';
    setText(this.note, `${POLLER_TEXT[s.poller] ?? fmt.words(s.poller)}${reason ? `: ${reason}` : ''}${when}`);
  }

  render() {
    this.renderState();
    if (!hasSecret()) {
      this.body.replaceChildren(h('tr', {}, h('td', { colspan: 6, class: 'muted', text: 'Needs the control secret: open the link printed by `weir serve`, or the tray.' })));
      return;
    }
    if (!this.sessions.length) {
      this.body.replaceChildren(h('tr', {}, h('td', { colspan: 6, class: 'muted', text: 'No agent sessions to show.' })));
      return;
    }
    this.body.replaceChildren(...this.sessions.map((s) => {
      const pr = fmt.safeHref(s.pull_request_url);
      const open = fmt.safeHref(s.url);
      return h('tr', { 'data-testid': 'session-row', 'data-id': s.id, 'data-group': s.group },
        h('td', {}, h('span', { class: `pill group-${s.group}`, text: GROUP_LABEL[s.group] ?? fmt.words(s.group) }),
          h('span', { class: 'muted small', text: ` ${fmt.words(s.state)}` })),
        h('td', { text: s.repository ?? fmt.DASH }),
        h('td', {}, open ? h('a', { href: open, target: '_blank', rel: 'noopener noreferrer', text: s.title ?? s.id }) : (s.title ?? s.id)),
        h('td', { text: fmt.dateTime(s.created_at) }),
        h('td', { text: fmt.dateTime(s.updated_at) }),
        h('td', {}, pr ? h('a', { href: pr, target: '_blank', rel: 'noopener noreferrer', 'data-testid': 'session-pr', text: 'Pull request' }) : fmt.DASH));
    }));
  }

  async submit() {
    if (this.pending) return; // a double click while the first is on its way
    const data = new FormData(this.form);
    const task = {
      repository: String(data.get('repository') ?? '').trim(),
      problem_statement: String(data.get('problem_statement') ?? '').trim(),
      base_branch: String(data.get('base_branch') ?? '').trim(),
      idempotency_key: this.key,
    };
    this.pending = true;
    this.form.querySelector('button[type="submit"]').disabled = true;
    setText(this.result, 'Sending…');
    this.result.dataset.outcome = 'pending';
    try {
      const res = await call('POST', '/_weir/api/sessions', task);
      if (res?.outcome === 'queued') {
        const id = res.queue_id !== undefined && res.queue_id !== null ? ` as #${res.queue_id}` : '';
        // The provisional session id gh and VS Code follow until (and after) it is sent.
        const sid = res?.job?.session_id;
        const follow = sid ? ` Follow it with gh agent-task view ${sid}.` : '';
        setText(this.result, `Queued${id}: GitHub cannot take it now; Weir sends it once, as soon as it can.${follow}`);
      } else {
        const sid = res?.job?.session_id ?? res?.job?.job_id;
        const again = String(res?.weir_create ?? '').startsWith('duplicate') ? ' (the same task again: not created twice)' : '';
        setText(this.result, `Created${sid ? `: ${sid}` : ''}${again}.`);
      }
      this.result.dataset.outcome = res?.outcome ?? 'created';
      this.onNotice(this.result.textContent);
    } catch (e) {
      const p = e?.problem ?? {};
      setText(this.result, `Not created: ${p.title ?? 'error'}${p.detail ? ` — ${p.detail}` : ''}`);
      this.result.dataset.outcome = 'problem';
      this.onProblem(e);
    } finally {
      this.pending = false;
      this.form.querySelector('button[type="submit"]').disabled = false;
    }
  }
}
