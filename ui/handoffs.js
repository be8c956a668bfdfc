// Local-agent hand-off offers (#14): creates that policy allowed to hand to the developer's
// local agent, waiting for Confirm (runs the configured command once) or Decline (back to the
// create queue). Read from `/_weir/api/handoffs` (needs the control secret: offers name
// repositories and carry problem statements); refreshed on `handoff` events and when the
// status document's pending offers change, never on a timer.

import { call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import * as fmt from './format.js';

function excerpt(text, n = 160) {
  const t = String(text ?? '');
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function outcomeText(o) {
  if (o.running) return 'running…';
  const out = o.outcome;
  if (!out) return fmt.words(String(o.state ?? ''));
  if (out.error) return `could not start: ${out.error}`;
  if (out.timed_out) return 'stopped after local_agent.timeout';
  return out.exit_code === 0 ? 'finished (exit 0)' : `failed (exit ${out.exit_code ?? 'signal'})`;
}

export class HandoffsPanel {
  constructor({ section, table, note, onProblem, onNotice }) {
    this.section = section;
    this.body = table.tBodies[0];
    this.note = note;
    this.onProblem = onProblem;
    this.onNotice = onNotice;
    this.offers = [];
    this.configured = false;
    this.key = null;
    this.timer = null;
    this.inFlight = null;
  }

  scheduleRefresh(delay = 150) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.refresh();
    }, delay);
  }

  /** `status.handoffs`: `{configured, pending: [{id, rule, age_secs, …}], recent: [...]}`. */
  statusUpdate(handoffs) {
    if (!handoffs || typeof handoffs !== 'object') return;
    this.configured = handoffs.configured === true;
    const pending = Array.isArray(handoffs.pending) ? handoffs.pending : [];
    const recent = Array.isArray(handoffs.recent) ? handoffs.recent : [];
    // Shown when a local agent is configured or anything was offered.
    this.section.hidden = !this.configured && pending.length === 0 && recent.length === 0;
    const key = JSON.stringify([pending.map((p) => p.id), recent.map((r) => [r.id, r.outcome])]);
    if (key !== this.key) {
      this.key = key;
      if (!this.section.hidden) this.scheduleRefresh(0);
    }
  }

  async refresh() {
    if (this.inFlight) return this.inFlight;
    this.inFlight = (async () => {
      try {
        const doc = await call('GET', '/_weir/api/handoffs');
        this.offers = Array.isArray(doc?.offers) ? doc.offers : [];
        this.configured = doc?.configured === true;
        this.render();
      } catch (e) {
        if (e.status === 401 && !hasSecret()) setText(this.note, 'Showing hand-off offers needs the control secret.');
        else {
          setText(this.note, `Could not load the offers: ${e.problem?.title ?? e.message}.`);
          this.onProblem(e);
        }
      } finally {
        this.inFlight = null;
      }
    })();
    return this.inFlight;
  }

  render() {
    this.body.replaceChildren(...this.offers.map((o) => this.row(o)));
    const waiting = this.offers.filter((o) => o.state === 'offered').length;
    setText(this.note, waiting
      ? `${waiting} offer(s) wait for your answer. Confirm starts the local agent once; Decline puts the create back in the queue.`
      : (this.configured ? 'No offers waiting.' : 'No local agent is configured ([local_agent] in the config file).'));
  }

  row(o) {
    const id = String(o.id);
    const state = String(o.state ?? '');
    const actions = h('td', { class: 'actions' });
    if (state === 'offered') {
      actions.append(
        h('button', {
          type: 'button', class: 'btn small primary', 'data-testid': `handoff-confirm-${id}`,
          'aria-label': `Start the local agent for offer #${id}`,
          onclick: (ev) => this.act(ev.currentTarget, id, 'confirm'),
        }, 'Confirm'),
        h('button', {
          type: 'button', class: 'btn small', 'data-testid': `handoff-decline-${id}`,
          'aria-label': `Decline offer #${id}`,
          onclick: (ev) => this.act(ev.currentTarget, id, 'decline'),
        }, 'Decline'));
    }
    const when = state === 'offered' && o.expires_at
      ? h('div', { class: 'muted small' }, `${o.back_to_queue ? 'back to the queue' : 'withdrawn'} ${fmt.until(o.expires_at)}`) : null;
    return h('tr', { 'data-testid': `handoff-row-${id}`, 'data-state': state },
      h('td', { class: 'num' }, id),
      h('td', {}, o.repo ?? fmt.DASH, o.checkout ? h('div', { class: 'muted small mono' }, o.checkout) : null),
      h('td', { title: o.problem_statement ?? '' }, excerpt(o.problem_statement) || fmt.DASH),
      h('td', { class: 'mono' }, o.rule ?? fmt.DASH),
      h('td', {}, h('time', { datetime: o.offered_at, title: fmt.dateTime(o.offered_at) }, fmt.ago(o.offered_at)), when),
      h('td', { 'data-testid': `handoff-outcome-${id}` }, state === 'offered' ? 'waiting' : outcomeText(o)),
      actions);
  }

  async act(button, id, action) {
    button.disabled = true;
    try {
      const v = await call('POST', `/_weir/api/handoffs/${encodeURIComponent(id)}/${action}`);
      this.onNotice(action === 'confirm'
        ? `Offer #${id}: the local agent was started.`
        : (v?.state === 'queued'
          ? `Offer #${id} declined: the create is back in the queue.`
          : `Offer #${id} declined and withdrawn.`));
      await this.refresh();
    } catch (e) {
      this.onProblem(e);
      await this.refresh();
    }
  }
}
