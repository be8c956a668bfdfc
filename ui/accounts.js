// The Accounts panel: the GitHub accounts behind the credentials Weir has seen (by login, never
// by token), how many credentials each has and their kinds, and whether list answers are shared
// between them (`[identity] share`). Fed by the status document's `identity` object. Logins
// name people: the event stream (which cannot send the control secret) leaves them out, so
// with the secret this panel reads them from `/_weir/api/status`.

import { call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import * as fmt from './format.js';

const KIND_TEXT = {
  oauth: 'OAuth app',
  classic: 'classic PAT',
  fine_grained: 'fine-grained PAT',
  app_user: 'GitHub App user',
  other: 'other',
};

export class AccountsPanel {
  constructor({ table, note }) {
    Object.assign(this, { table, note });
    this.key = null;
  }

  /** `id` is `status.identity`. */
  update(id) {
    if (!id || typeof id !== 'object') return;
    const hidden = Array.isArray(id.accounts) && id.accounts.some((a) => !a?.login);
    if (hidden && hasSecret()) {
      this.readPrivate();
      if (this.private) return;
    }
    this.render(id);
  }

  /** The identity with logins, read with the secret at most every 2 s. */
  async readPrivate() {
    const now = Date.now();
    if (this.reading || now - (this.readAt ?? 0) < 2000) return;
    this.reading = true;
    try {
      const doc = await call('GET', '/_weir/api/status');
      this.readAt = Date.now();
      if (doc?.identity) {
        this.private = doc.identity;
        this.render(doc.identity);
      }
    } catch {
      // A problem (e.g. a stale secret) leaves the logins hidden; the next status tries again.
    } finally {
      this.reading = false;
    }
  }

  render(id) {
    const key = JSON.stringify(id);
    if (key === this.key) return;
    this.key = key;
    const accounts = Array.isArray(id.accounts) ? id.accounts : [];
    const rows = accounts.map((a) => h('tr', { 'data-testid': `account-${String(a.login || 'hidden')}` },
      h('td', { text: a.login ? String(a.login) : 'hidden (needs the control secret)' }),
      h('td', { class: 'num', text: fmt.int(a.credentials) }),
      h('td', { text: (Array.isArray(a.token_kinds) ? a.token_kinds : []).map((k) => KIND_TEXT[k] ?? String(k)).join(', ') }),
      h('td', { class: 'num', text: fmt.int(a.requests) }),
      h('td', { class: 'num', text: fmt.int(a.upstream_requests) })));
    this.table.tBodies[0].replaceChildren(...rows);
    let text;
    if (!id.resolver) text = 'No github-api upstream is configured, so credentials are not matched to accounts and nothing is shared between them.';
    else if (id.share === 'credential') text = 'Sharing is off ([identity] share = "credential"): each credential is its own identity.';
    else if (id.share === 'app') text = 'List and view answers are shared between tokens of one account and one OAuth app with the same repo access ([identity] share = "app", the default). Fine-grained PATs, App tokens and tokens of no app never share.';
    else text = 'List and view answers are shared between OAuth and classic tokens of one account with the same repo access. Fine-grained PATs and App tokens never share.';
    if (!accounts.length) text = `No account resolved yet. ${text}`;
    const failures = Number(id.failed ?? 0) + Number(id.unauthorized ?? 0);
    if (failures) text += ` ${fmt.int(failures)} credential lookups failed (those credentials share nothing).`;
    setText(this.note, text);
  }
}
