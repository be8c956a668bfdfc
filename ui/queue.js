// The create queue table: session creates waiting for GitHub, with Cancel and Retry. It is
// refreshed when a `queue` event arrives or the status document's queue counts change, never
// on a timer.

import { call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import * as fmt from './format.js';

const FINISHED = new Set(['done', 'cancelled', 'expired']);
const CAN_CANCEL = new Set(['queued', 'in_doubt', 'failed']);
const CAN_RETRY = new Set(['failed', 'in_doubt', 'expired']);
const COUNT_ORDER = ['queued', 'replaying', 'in_doubt', 'done', 'failed', 'cancelled', 'expired'];

function short(v) {
  if (v === undefined || v === null || v === '') return '';
  const text = typeof v === 'object' ? JSON.stringify(v) : String(v);
  return text.length > 140 ? `${text.slice(0, 139)}…` : text;
}

export class QueuePanel {
  constructor({ table, note, counts, showFinished, onProblem, onNotice }) {
    this.body = table.tBodies[0];
    this.note = note;
    this.counts = counts;
    this.showFinished = showFinished;
    this.onProblem = onProblem;
    this.onNotice = onNotice;
    this.items = [];
    this.available = null; // null: not asked yet; false: this Weir has no queue endpoint
    this.countsKey = null;
    this.timer = null;
    this.inFlight = null;
    showFinished.addEventListener('change', () => this.render());
  }

  /** Coalesces bursts of events into one GET. */
  scheduleRefresh(delay = 150) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), delay);
  }

  async refresh() {
    if (this.inFlight) return this.inFlight;
    this.inFlight = (async () => {
      try {
        const doc = await call('GET', '/_weir/api/queue');
        this.available = true;
        this.items = Array.isArray(doc?.items) ? doc.items : [];
        this.render();
      } catch (e) {
        if (e.status === 404) {
          this.available = false;
          this.items = [];
          this.render();
        } else if (e.status === 401 && !hasSecret()) {
          // Read-only page: the notice at the top already says how to get the secret.
          setText(this.note, 'Showing the queue needs the control secret.');
        } else {
          setText(this.note, `Could not load the queue: ${e.problem?.title ?? e.message}.`);
          this.onProblem(e);
        }
      } finally {
        this.inFlight = null;
      }
    })();
    return this.inFlight;
  }

  /** Status snapshots carry queue counts; a change means the table is out of date. */
  statusUpdate(queue) {
    if (queue && typeof queue === 'object') {
      const key = JSON.stringify(queue);
      const parts = COUNT_ORDER.filter((k) => typeof queue[k] === 'number' && queue[k] > 0).map((k) => `${fmt.int(queue[k])} ${fmt.words(k)}`);
      setText(this.counts, parts.join(' · '));
      if (key !== this.countsKey) {
        const first = this.countsKey === null;
        this.countsKey = key;
        if (!first || this.available === null) this.scheduleRefresh();
      }
    } else {
      setText(this.counts, '');
      if (this.available === null && !this.inFlight && !this.timer) this.scheduleRefresh(0);
    }
  }

  render() {
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
        onclick: (ev) => this.act(ev.currentTarget, id, 'retry', state),
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
      h('td', { class: 'num' }, fmt.int(it.attempts)),
      h('td', { class: 'small' }, err ? h('span', { class: 'error-text' }, err) : null, err && result ? ' ' : null, result || (err ? null : fmt.DASH)),
      actions);
  }

  async act(button, id, action, state) {
    if (action === 'retry' && state === 'in_doubt'
      && !window.confirm(`Weir could not confirm whether GitHub created #${id}. Retrying may create a second session. Retry anyway?`)) {
      return;
    }
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
