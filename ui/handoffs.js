// Local-agent hand-off offers (#14): creates that policy allowed to hand to the developer's
// local agent, waiting for Confirm (runs the configured command once) or Decline (back to the
// create queue). Read from `/_weir/api/handoffs` (needs the control secret: offers name
// repositories and carry problem statements); refreshed on `handoff` events and when the
// status document's pending offers change, never on a timer.
//
// Confirm is only in the offer view (Review), which shows the whole problem statement and the
// tool that asked (its User-Agent and surface) first: the command runs that statement with the
// developer's rights, so nothing of it may be hidden behind an excerpt (#22). The tray opens
// this view at `#view=handoffs&offer=<id>`.

import { RequestSeq, call, hasSecret } from './api.js';
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

const SURFACES = { vscode: 'VS Code', gh_cli: 'GitHub CLI', browser: 'a browser', other: 'another tool' };

/** Who asked: "GitHub CLI (User-Agent: …)", or that the offer was made by hand. */
function toolText(o) {
  const t = o.requested_by;
  if (!t) return 'made by hand (control API or tray), not by a tool';
  const surface = SURFACES[t.surface] ?? String(t.surface ?? 'another tool');
  return t.user_agent ? `${surface} — User-Agent: ${t.user_agent}` : `${surface} (no User-Agent)`;
}

export class HandoffsPanel {
  constructor({ section, table, note, view, onProblem, onNotice }) {
    this.section = section;
    this.body = table.tBodies[0];
    this.note = note;
    this.view = view;
    this.viewing = null;
    this.onProblem = onProblem;
    this.onNotice = onNotice;
    this.offers = [];
    this.configured = false;
    this.key = null;
    this.timer = null;
    this.seq = new RequestSeq();
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

  /** Opens the offer view for `id` (the tray's link) once the offers are loaded. */
  async review(id) {
    this.section.hidden = false;
    this.viewing = String(id);
    await this.refresh();
    this.view?.scrollIntoView({ block: 'start' });
  }

  /** Reads the offers; only the answer to the last read sent is shown. */
  async refresh() {
    const n = this.seq.next();
    try {
      const doc = await call('GET', '/_weir/api/handoffs');
      if (!this.seq.isLatest(n)) return;
      this.offers = Array.isArray(doc?.offers) ? doc.offers : [];
      this.configured = doc?.configured === true;
      this.render();
    } catch (e) {
      if (!this.seq.isLatest(n)) return;
      if (e.status === 401 && !hasSecret()) setText(this.note, 'Showing hand-off offers needs the control secret.');
      else {
        setText(this.note, `Could not load the offers: ${e.problem?.title ?? e.message}.`);
        this.onProblem(e);
      }
    }
  }

  render() {
    this.body.replaceChildren(...this.offers.map((o) => this.row(o)));
    this.renderView();
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
          type: 'button', class: 'btn small primary', 'data-testid': `handoff-review-${id}`,
          'aria-label': `Review offer #${id}: the whole task and who asked, then confirm or decline`,
          onclick: () => { this.viewing = id; this.renderView(); this.view?.scrollIntoView({ block: 'nearest' }); },
        }, 'Review'),
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
      h('td', {}, excerpt(o.problem_statement) || fmt.DASH,
        h('div', { class: 'muted small', 'data-testid': `handoff-tool-${id}` }, toolText(o))),
      h('td', { class: 'mono' }, o.rule ?? fmt.DASH),
      h('td', {}, h('time', { datetime: o.offered_at, title: fmt.dateTime(o.offered_at) }, fmt.ago(o.offered_at)), when),
      h('td', { 'data-testid': `handoff-outcome-${id}` }, state === 'offered' ? 'waiting' : outcomeText(o)),
      actions);
  }

  /** The offer view: everything the command will get, then Confirm / Decline. */
  renderView() {
    if (!this.view) return;
    const o = this.offers.find((x) => String(x.id) === this.viewing);
    if (!o) {
      this.view.hidden = true;
      this.view.replaceChildren();
      return;
    }
    const id = String(o.id);
    const offered = o.state === 'offered';
    const field = (label, value, testid) => [
      h('dt', {}, label),
      h('dd', testid ? { 'data-testid': testid } : {}, value ?? fmt.DASH),
    ];
    const buttons = offered ? h('div', { class: 'actions' },
      h('button', {
        type: 'button', class: 'btn primary', 'data-testid': 'handoff-view-confirm',
        'aria-label': `Start the local agent for offer #${id} with the task shown`,
        onclick: (ev) => this.act(ev.currentTarget, id, 'confirm'),
      }, 'Confirm: start the local agent'),
      h('button', {
        type: 'button', class: 'btn', 'data-testid': 'handoff-view-decline',
        onclick: (ev) => this.act(ev.currentTarget, id, 'decline'),
      }, 'Decline'),
      h('button', {
        type: 'button', class: 'btn', 'data-testid': 'handoff-view-close',
        onclick: () => { this.viewing = null; this.renderView(); },
      }, 'Close')) : null;
    this.view.replaceChildren(
      h('h3', {}, `Offer #${id}${offered ? '' : ` (${fmt.words(String(o.state ?? ''))})`}`),
      h('dl', { class: 'handoff-fields' },
        ...field('Repository', o.repo, 'handoff-view-repo'),
        ...field('Checkout', o.checkout),
        ...field('Base branch', o.base_branch),
        ...field('Requested by', toolText(o), 'handoff-view-tool'),
        ...field('Policy rule', o.rule),
        ...field('Offered', o.offered_at ? fmt.dateTime(o.offered_at) : null),
        ...(offered && o.expires_at
          ? field(o.back_to_queue ? 'Back to the queue' : 'Withdrawn', fmt.until(o.expires_at)) : [])),
      h('p', { class: 'muted small' }, `The whole task the local agent will be given (${String(o.problem_statement ?? '').length} characters):`),
      h('pre', { class: 'handoff-statement', 'data-testid': 'handoff-view-statement' }, String(o.problem_statement ?? '')),
      buttons);
    this.view.dataset.offer = id;
    this.view.hidden = false;
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
