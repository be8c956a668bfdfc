// The create queue table: session creates waiting for GitHub, with Cancel and Retry. It is
// refreshed when a `queue` event arrives or the status document's queue counts change, never
// on a timer.

import { RequestSeq, call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import * as fmt from './format.js';

const FINISHED = new Set(['done', 'cancelled', 'expired', 'handed_off']);
const CAN_CANCEL = new Set(['queued', 'in_doubt', 'failed']);
const CAN_RETRY = new Set(['failed', 'expired', 'cancelled']);
const COUNT_ORDER = ['queued', 'replaying', 'in_doubt', 'offered', 'done', 'failed', 'cancelled', 'expired', 'handed_off'];

function short(v) {
  if (v === undefined || v === null || v === '') return '';
  const text = typeof v === 'object' ? JSON.stringify(v) : String(v);
  return text.length > 140 ? `${text.slice(0, 139)}…` : text;
}

export class QueuePanel {
  constructor({ table, note, counts, credentials, showFinished, onProblem, onNotice }) {
    this.body = table.tBodies[0];
    this.note = note;
    this.counts = counts;
    this.credentials = credentials;
    this.showFinished = showFinished;
    this.onProblem = onProblem;
    this.onNotice = onNotice;
    this.items = [];
    this.available = null; // null: not asked yet; false: this Weir has no queue endpoint
    this.off = null; // while the queue is switched off: {reason, fromStatus}
    this.offShown = false;
    this.attempted = false;
    this.countsKey = null;
    this.timer = null;
    this.seq = new RequestSeq();
    showFinished.addEventListener('change', () => this.render());
  }

  /** Coalesces bursts of events into one GET. */
  scheduleRefresh(delay = 150) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.refresh();
    }, delay);
  }

  /** Reads the queue; only the answer to the last read sent is shown. */
  async refresh() {
    this.attempted = true;
    const n = this.seq.next();
    try {
      const doc = await call('GET', '/_weir/api/queue');
      if (!this.seq.isLatest(n)) return;
      this.available = true;
      this.off = null;
      this.items = Array.isArray(doc?.items) ? doc.items : [];
      if (doc?.counts) this.renderCounts(doc.counts);
      this.render();
    } catch (e) {
      if (this.seq.isLatest(n)) this.failed(e);
    }
  }

  failed(e) {
    if (e.status === 404) {
      this.available = false;
      this.items = [];
      this.render();
    } else if (e.status === 503) {
      // The queue is off (e.g. no OS keychain for replay credentials): a standing condition,
      // shown in place; the banner only the first time.
      this.showOff(`${e.problem.title}: ${e.problem.detail}`, false);
      if (!this.offShown) this.onProblem(e);
      this.offShown = true;
    } else if (e.status === 401 && !hasSecret()) {
      // Read-only page: the notice at the top already says how to get the secret.
      setText(this.note, 'Showing the queue needs the control secret.');
    } else {
      setText(this.note, `Could not load the queue: ${e.problem?.title ?? e.message}.`);
      this.onProblem(e);
    }
  }

  showOff(reason, fromStatus) {
    this.off = { reason, fromStatus };
    this.items = [];
    this.body.replaceChildren();
    setText(this.note, reason);
  }

  renderCounts(counts) {
    const parts = COUNT_ORDER.filter((k) => typeof counts[k] === 'number' && counts[k] > 0).map((k) => `${fmt.int(counts[k])} ${fmt.words(k)}`);
    setText(this.counts, parts.join(' · '));
  }

  /**
   * `status.queue`: `{available, error, credentials, queued, replaying, ...}` (the counts may be
   * missing). Changed counts mean the table is out of date.
   */
  statusUpdate(queue) {
    if (!queue || typeof queue !== 'object') {
      if (!this.attempted) this.scheduleRefresh(0);
      return;
    }
    setText(this.credentials, queue.credentials ? `Replay credentials: ${fmt.words(queue.credentials)}.` : '');
    if (queue.available === false) {
      this.showOff(`The create queue is off: ${queue.error || 'no reason given'}.`, true);
      return;
    }
    const hasCounts = COUNT_ORDER.some((k) => typeof queue[k] === 'number');
    if (hasCounts) this.renderCounts(queue);
    const key = hasCounts ? JSON.stringify(COUNT_ORDER.map((k) => queue[k])) : null;
    if (!this.attempted || this.off?.fromStatus || (key !== null && key !== this.countsKey)) this.scheduleRefresh(this.attempted ? 150 : 0);
    if (key !== null) this.countsKey = key;
  }

  render() {
    if (this.off) {
      this.body.replaceChildren();
      setText(this.note, this.off.reason);
      return;
    }
    if (this.available === false) {
      this.body.replaceChildren();
      setText(this.note, 'The create queue is not available in this Weir version.');
      return;
    }
    const all = this.items;
    const shown = this.showFinished.checked ? all : all.filter((it) => !FINISHED.has(String(it.state)));
    this.body.replaceChildren(...shown.map((it) => this.row(it)));
    const hidden = all.length - shown.length;
    setText(this.note, shown.length
      ? (hidden ? `${hidden} finished item(s) hidden.` : '')
      : (hidden ? `Nothing waiting. ${hidden} finished item(s) hidden.` : 'Nothing waiting: every create reached GitHub.'));
  }

  row(it) {
    const id = String(it.id);
    const state = String(it.state ?? '');
    const actions = h('td', { class: 'actions' });
    if (CAN_CANCEL.has(state)) {
      actions.append(h('button', {
        type: 'button', class: 'btn small', 'data-testid': `queue-cancel-${id}`, 'aria-label': `Cancel create #${id}`,
        onclick: (ev) => this.act(ev.currentTarget, id, 'cancel'),
      }, 'Cancel'));
    }
    if (CAN_RETRY.has(state)) {
      actions.append(h('button', {
        type: 'button', class: 'btn small', 'data-testid': `queue-retry-${id}`, 'aria-label': `Retry create #${id}`,
        onclick: (ev) => this.act(ev.currentTarget, id, 'retry'),
      }, 'Retry'));
    }
    const err = short(it.last_error);
    const result = short(it.result);
    return h('tr', { 'data-testid': `queue-row-${id}`, 'data-state': state },
      h('td', { class: 'num' }, id),
      h('td', {}, it.upstream ?? fmt.DASH),
      h('td', {}, h('span', { class: 'pill', 'data-state': state }, fmt.words(state))),
      h('td', { class: 'mono' }, `${it.method ?? ''} ${it.path ?? ''}`.trim() || fmt.DASH),
      h('td', {}, h('time', { datetime: it.created_at, title: fmt.dateTime(it.created_at) }, fmt.ago(it.created_at))),
      h('td', { class: 'num' }, fmt.int(it.attempts),
        (state === 'queued' || state === 'in_doubt') && it.next_attempt_at
          ? h('div', { class: 'muted small' }, `next ${fmt.until(it.next_attempt_at)}`) : null),
      h('td', { class: 'small' }, err ? h('span', { class: 'error-text' }, err) : null, err && result ? ' ' : null, result || (err ? null : fmt.DASH)),
      actions);
  }

  async act(button, id, action) {
    button.disabled = true;
    try {
      await call('POST', `/_weir/api/queue/${encodeURIComponent(id)}/${action}`);
      this.onNotice(action === 'cancel' ? `Create #${id} cancelled.` : `Create #${id} queued for another attempt.`);
      await this.refresh();
    } catch (e) {
      this.onProblem(e);
      button.disabled = false;
    }
  }
}
