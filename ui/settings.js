// The editable Settings form: managed upstreams (add and remove rows), cache lifetimes for
// list and view calls, and circuit breaker thresholds. Save sends only what changed to
// `PUT /_weir/api/settings`; the engine writes the config file and the change applies on the
// next request (settings that need a restart are named). Problems (401, or a 422 naming file,
// line and key) go to the alert banner; a config file refused on disk is shown from the status.

import { RequestSeq, call, hasSecret } from './api.js';
import { byTestId, h, setText } from './dom.js';
import {
  BREAKER_FIELDS, CLASSES, CLASS_KNOBS, FormError, diff, fromEffective,
} from './settings-model.js';

const DEFAULT_CONFIG_PATHS = [
  ['Linux', '~/.config/weir/config.toml'],
  ['macOS', '~/Library/Application Support/dev.weir.weir/config.toml'],
  ['Windows', '%APPDATA%\\weir\\weir\\config\\config.toml'],
];

function textInput(attrs) {
  return h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', ...attrs });
}

function numberInput(field, attrs) {
  const range = field.kind === 'fraction'
    ? { min: '0', max: '1', step: 'any', inputmode: 'decimal' }
    : { min: '1', step: '1', inputmode: 'numeric' };
  return h('input', { type: 'number', required: true, ...range, ...attrs });
}

export class SettingsForm {
  constructor({ form, configNote, saved, live, onProblem, onNotice }) {
    Object.assign(this, { form, configNote, saved, live, onProblem, onNotice });
    this.base = null; // form values as last loaded or saved
    this.configFile = null;
    // A read sent before a save (or an earlier read) must not refill the form after it.
    this.seq = new RequestSeq();
    this.upstreamBody = h('tbody');
    this.dirty = h('span', { class: 'muted small', 'data-testid': 'settings-dirty' });
    this.saveButton = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'settings-save' }, 'Save');
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.save();
    });
    form.addEventListener('input', () => this.markDirty());
    this.renderConfigNote(null, null);
  }

  /** Loads `GET /_weir/api/settings` and builds the form from the effective values. */
  async load() {
    const n = this.seq.next();
    try {
      const doc = await call('GET', '/_weir/api/settings');
      if (!this.seq.isLatest(n)) return;
      this.configFile = typeof doc?.config_file === 'string' ? doc.config_file : null;
      this.renderConfigNote(this.configFile, doc);
      this.base = fromEffective(doc?.effective);
      this.build();
      this.fill(this.base);
      this.form.hidden = false;
    } catch (e) {
      if (!this.seq.isLatest(n)) return;
      // 404: this Weir has no settings endpoint. 401 on a page opened without the secret:
      // settings are read with the secret too, so say where the secret comes from.
      if (e.status === 401 && !hasSecret()) {
        this.configNote.replaceChildren(h('p', { 'data-testid': 'settings-need-secret' },
          'Settings are shown only with the control secret: open the dashboard from the tray, or with the link ',
          h('code', {}, 'weir serve'), ' printed.'));
      } else if (e.status !== 404) {
        this.onProblem(e);
      }
      this.form.hidden = true;
    }
  }

  renderConfigNote(path, doc) {
    if (path) {
      const listen = doc?.effective?.listen;
      this.configNote.replaceChildren(
        h('p', {}, 'Configuration file: ', h('code', { 'data-testid': 'config-path' }, path),
          doc?.exists === false ? ' (does not exist yet; saving creates it)' : ''),
        listen ? h('p', {}, 'Listen address ', h('code', {}, String(listen)), ' (edit the file to change it).') : null);
      return;
    }
    this.configNote.replaceChildren(
      h('p', {}, 'Weir reads ', h('code', {}, 'config.toml'), ' from your OS config directory (or the file given with ', h('code', {}, '--config'), '):'),
      h('ul', { class: 'kv-list' }, DEFAULT_CONFIG_PATHS.map(([os, p]) => h('li', {}, h('span', {}, os), h('code', {}, p)))));
  }

  /** Builds the fieldsets once; `fill` puts values in. */
  build() {
    const upstreams = h('fieldset', { 'data-testid': 'settings-upstreams' },
      h('legend', {}, 'Managed upstreams'),
      h('p', { class: 'muted small' }, 'Weir caches, coalesces and protects calls to these origins. Everything else passes straight through.'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'upstream-table' },
        h('caption', { class: 'visually-hidden' }, 'Managed upstreams'),
        h('thead', {}, h('tr', {},
          h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col' }, 'Origin'),
          h('th', { scope: 'col' }, 'Fallback origin (optional)'),
          h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Actions')))),
        this.upstreamBody)),
      h('button', { type: 'button', class: 'btn small', 'data-testid': 'upstream-add', onclick: () => this.addRow() }, 'Add upstream'));

    const classes = h('fieldset', { 'data-testid': 'settings-classes' },
      h('legend', {}, 'Cache lifetimes'),
      h('p', { class: 'muted small' }, 'Durations such as 500ms, 15s, 5m, 24h.'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'ttl-table' },
        h('thead', {}, h('tr', {}, h('td', {}), CLASSES.map((c) => h('th', { scope: 'col', id: `ttl-col-${c.id}` }, c.label)))),
        h('tbody', {}, CLASS_KNOBS.map((k) => h('tr', {},
          h('th', { scope: 'row', id: `ttl-row-${k.id}`, title: k.hint }, k.label),
          CLASSES.map((c) => h('td', {}, textInput({
            name: `${c.id}.${k.id}`, 'data-testid': `setting-${c.id}-${k.id}`,
            'aria-labelledby': `ttl-col-${c.id} ttl-row-${k.id}`, title: k.hint, required: true,
          })))))))));

    const breaker = h('fieldset', { 'data-testid': 'settings-breaker' },
      h('legend', {}, 'Circuit breaker'),
      h('p', { class: 'muted small' }, 'Per upstream: it opens when either rate is reached over the recent calls, then probes after the wait.'),
      h('div', { class: 'field-grid' }, BREAKER_FIELDS.map((f) => {
        const id = `breaker-${f.id}`;
        const attrs = { id, name: `breaker.${f.id}`, 'data-testid': `setting-breaker-${f.id}`, 'aria-describedby': `${id}-hint` };
        return h('div', { class: 'field' },
          h('label', { for: id }, f.label),
          f.kind === 'duration' ? textInput({ ...attrs, required: true }) : numberInput(f, attrs),
          h('span', { class: 'muted small', id: `${id}-hint` }, f.hint));
      })));

    const actions = h('div', { class: 'row form-actions' },
      this.saveButton,
      h('button', { type: 'button', class: 'btn', 'data-testid': 'settings-revert', onclick: () => this.revert() }, 'Undo changes'),
      this.dirty);

    this.form.replaceChildren(
      h('p', { class: 'muted small' }, 'Saved to the configuration file (comments and other keys are kept) and applied from the next request on; edits to the file itself apply the same way.'),
      upstreams, classes, breaker, actions);
  }

  row(u = { name: '', origin: '', fallback: '' }) {
    const tr = h('tr', { class: 'upstream-row' });
    const cell = (key, attrs) => h('td', {}, textInput({ 'data-field': key, value: u[key] ?? '', ...attrs }));
    tr.append(
      cell('name', { required: true, 'aria-label': 'Upstream name', placeholder: 'copilot-api' }),
      cell('origin', { required: true, inputmode: 'url', 'aria-label': 'Upstream origin', placeholder: 'https://api.githubcopilot.com' }),
      cell('fallback', { inputmode: 'url', 'aria-label': 'Fallback origin (optional)' }),
      h('td', { class: 'actions' }, h('button', {
        type: 'button', class: 'btn small', 'data-action': 'remove',
        onclick: () => {
          const next = tr.nextElementSibling ?? tr.previousElementSibling;
          tr.remove();
          this.renumber();
          this.markDirty();
          (next?.querySelector('input') ?? byTestId('upstream-add', this.form))?.focus();
        },
      }, 'Remove')));
    return tr;
  }

  /** Row test ids and labels follow the row's position (1-based), so they stay unique. */
  renumber() {
    [...this.upstreamBody.children].forEach((tr, i) => {
      const n = i + 1;
      tr.setAttribute('data-testid', `upstream-row-${n}`);
      for (const input of tr.querySelectorAll('input')) {
        const key = input.dataset.field;
        input.setAttribute('data-testid', `upstream-${key}-${n}`);
        input.setAttribute('aria-label', `${key === 'fallback' ? 'Fallback origin' : `Upstream ${key}`} ${n}`);
      }
      const btn = tr.querySelector('[data-action="remove"]');
      btn.setAttribute('data-testid', `upstream-remove-${n}`);
      btn.setAttribute('aria-label', `Remove upstream ${n}`);
    });
  }

  addRow() {
    const tr = this.row();
    this.upstreamBody.append(tr);
    this.renumber();
    this.markDirty();
    tr.querySelector('input')?.focus();
  }

  fill(values) {
    this.upstreamBody.replaceChildren(...values.upstreams.map((u) => this.row(u)));
    this.renumber();
    for (const c of CLASSES) {
      for (const k of CLASS_KNOBS) this.form.elements.namedItem(`${c.id}.${k.id}`).value = values.classes[c.id][k.id];
    }
    for (const f of BREAKER_FIELDS) this.form.elements.namedItem(`breaker.${f.id}`).value = values.breaker[f.id];
    this.markDirty();
  }

  /** The form's current values, in the shape of `fromEffective`. */
  read() {
    const get = (name) => this.form.elements.namedItem(name).value;
    const classes = {};
    for (const c of CLASSES) {
      classes[c.id] = {};
      for (const k of CLASS_KNOBS) classes[c.id][k.id] = get(`${c.id}.${k.id}`);
    }
    const breaker = {};
    for (const f of BREAKER_FIELDS) breaker[f.id] = get(`breaker.${f.id}`);
    const upstreams = [...this.upstreamBody.children].map((tr) => {
      const field = (key) => tr.querySelector(`input[data-field="${key}"]`).value;
      return { name: field('name'), origin: field('origin'), fallback: field('fallback') };
    });
    return { upstreams, classes, breaker };
  }

  markDirty() {
    if (!this.base) return;
    let changed;
    try {
      changed = diff(this.base, this.read()) !== null;
    } catch {
      changed = true; // an unfinished edit is still an edit
    }
    setText(this.dirty, changed ? 'Unsaved changes' : '');
  }

  /** Loads the effective settings again, unless the form holds edits not yet saved. */
  reloadIfClean() {
    if (!this.base || this.dirty.textContent === '') this.load();
  }

  /** `status.settings`: a config file refused on disk, and settings waiting for a restart. */
  statusUpdate(st) {
    if (!this.live) return;
    const parts = [];
    if (st?.error) {
      const e = st.error;
      const where = e.line ? `${e.file}:${e.line}${e.key ? ` (${e.key})` : ''}` : e.file;
      parts.push(`The config file was not applied: ${where}: ${e.message}. The previous settings are still in force.`);
    }
    if (Array.isArray(st?.restart_required) && st.restart_required.length) {
      parts.push(`Restart Weir to apply: ${st.restart_required.join(', ')}.`);
    }
    setText(this.live, parts.join(' '));
    this.live.hidden = parts.length === 0;
    this.live.dataset.error = st?.error ? 'true' : 'false';
  }

  revert() {
    if (this.base) this.fill(this.base);
  }

  async save() {
    if (!this.base) return;
    const values = this.read();
    let patch;
    try {
      patch = diff(this.base, values);
    } catch (e) {
      if (e instanceof FormError) {
        this.onProblem(e);
        return;
      }
      throw e;
    }
    if (!patch) {
      this.onNotice('Nothing to save: no setting changed.');
      return;
    }
    this.saveButton.disabled = true;
    setText(this.saved, '');
    this.seq.next();
    try {
      const res = await call('PUT', '/_weir/api/settings', patch);
      const file = typeof res?.config_file === 'string' ? res.config_file : (this.configFile ?? 'the configuration file');
      // The file now holds these values: later saves are measured against them.
      this.base = JSON.parse(JSON.stringify(values, (k, v) => (typeof v === 'string' ? v.trim() : v)));
      this.markDirty();
      const pending = Array.isArray(res?.restart_required) ? res.restart_required : [];
      setText(this.saved, pending.length
        ? `Saved to ${file} and applied; restart Weir for ${pending.join(', ')}`
        : `Saved to ${file} and applied`);
    } catch (e) {
      this.onProblem(e);
    } finally {
      this.saveButton.disabled = false;
    }
  }
}
