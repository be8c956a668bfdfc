// The Policy panel: the effective fallback policy graph (`GET /_weir/api/policy`) for a
// repository, network and situation the user picks, as "function → action (rule, why)".
// Read-only: rules live in the config file and the organisation's policy file.

import { RequestSeq, call } from './api.js';
import { h } from './dom.js';

export class PolicyPanel {
  /** `form` has inputs named repo, network, situation; `table` is a <table> with a tbody. */
  constructor({ form, table, refused, onProblem }) {
    this.form = form;
    this.table = table;
    this.refused = refused;
    this.onProblem = onProblem;
    this.seq = new RequestSeq();
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.load();
    });
    form.addEventListener('change', () => this.load());
  }

  query() {
    const data = new FormData(this.form);
    const q = new URLSearchParams();
    const repo = String(data.get('repo') ?? '').trim();
    if (repo) q.set('repo', repo);
    for (const k of ['network', 'situation']) {
      const v = String(data.get(k) ?? '');
      if (v) q.set(k, v);
    }
    return q.toString();
  }

  /** Asks for the table the form now describes; an answer to an older form state is dropped. */
  async load() {
    const n = this.seq.next();
    try {
      const t = await call('GET', `/_weir/api/policy?${this.query()}`);
      if (this.seq.isLatest(n)) this.render(t);
    } catch (e) {
      if (this.seq.isLatest(n)) this.onProblem?.(e);
    }
  }

  render(t) {
    const rows = Array.isArray(t?.rows) ? t.rows : [];
    this.table.tBodies[0].replaceChildren(...rows.map((r) => {
      const rule = r.rule?.source === 'default' ? 'default' : `${r.rule?.source}:${r.rule?.index}`;
      return h('tr', { 'data-function': r.function ?? '' },
        h('td', { text: r.function ?? '' }),
        h('td', { 'data-testid': `policy-action-${r.function}`, text: r.action ?? '' }),
        h('td', { 'data-testid': `policy-rule-${r.function}` }, h('span', { class: 'pill', 'data-source': r.rule?.source ?? '' }, rule), r.rule?.at ? ` ${r.rule.at}` : ''),
        h('td', { class: 'small', text: r.why ?? '' }));
    }));
    const refused = Array.isArray(t?.refused) ? t.refused : [];
    this.refused.hidden = refused.length === 0;
    this.refused.replaceChildren(...refused.map((r) => h('li', { class: 'small warn-text' }, String(r.message ?? ''))));
  }
}
