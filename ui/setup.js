// The proxy set-up snippets (with copy buttons) and the settings panel: GitHub token store and
// remove (the token is write-only from here), the config file location, and the settings the
// running Weir reports.

import { call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import * as fmt from './format.js';

function snippets(host) {
  const base = `http://${host}`;
  return [
    { id: 'https-proxy', label: 'Shell', text: `export HTTPS_PROXY=${base}` },
    { id: 'http-proxy', label: 'Shell', text: `export HTTP_PROXY=${base}` },
    { id: 'pac', label: 'PAC URL', text: `${base}/proxy.pac` },
    { id: 'vscode', label: 'VS Code settings.json', text: `"http.proxy": "${base}"` },
  ];
}

async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  // Fallback for webviews without the async clipboard API.
  const area = h('textarea', { class: 'visually-hidden', readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  const ok = document.execCommand('copy');
  area.remove();
  if (!ok) throw new Error('copy refused');
}

export class SetupPanel {
  constructor({ list, status }) {
    this.list = list;
    this.status = status;
    this.host = null;
  }

  update(host) {
    if (!host || host === this.host) return;
    this.host = host;
    this.list.replaceChildren(...snippets(host).map((snip) => {
      const code = h('code', { 'data-testid': `snippet-${snip.id}` }, snip.text);
      const button = h('button', {
        type: 'button', class: 'btn small', 'data-testid': `copy-${snip.id}`, 'aria-label': `Copy ${snip.text}`,
        onclick: async () => {
          try {
            await copyText(snip.text);
            setText(button, 'Copied');
            setText(this.status, `Copied ${snip.text}`);
          } catch {
            setText(button, 'Select and copy');
            setText(this.status, 'The browser refused clipboard access; select the text and copy it.');
          }
          setTimeout(() => setText(button, 'Copy'), 1500);
        },
      }, 'Copy');
      return h('li', {}, h('span', { class: 'muted small snippet-label' }, snip.label), code, button);
    }));
  }
}

const DEFAULT_CONFIG_PATHS = [
  ['Linux', '~/.config/weir/config.toml'],
  ['macOS', '~/Library/Application Support/dev.weir.weir/config.toml'],
  ['Windows', '%APPDATA%\\weir\\weir\\config\\config.toml'],
];

function renderValue(v) {
  if (v === null || v === undefined) return fmt.DASH;
  if (typeof v === 'object') return h('code', { class: 'json' }, JSON.stringify(v));
  return String(v);
}

export class SettingsPanel {
  constructor({ form, input, store, remove, status, configNote, settings, onProblem }) {
    Object.assign(this, { form, input, store, remove, status, configNote, settings, onProblem });
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.storeToken();
    });
    remove.addEventListener('click', () => this.removeToken());
    this.renderConfigNote(null);
  }

  async storeToken() {
    const token = this.input.value.trim();
    if (!token) {
      setText(this.status, 'Paste a token first.');
      this.input.focus();
      return;
    }
    this.busy(true);
    try {
      await call('PUT', '/_weir/api/token', { token });
      setText(this.status, 'Token stored in the keychain.');
    } catch (e) {
      setText(this.status, 'The token was not stored.');
      this.onProblem(e);
    } finally {
      // Never keep the secret in the page longer than the call needs it.
      this.input.value = '';
      this.busy(false);
    }
  }

  async removeToken() {
    this.busy(true);
    try {
      await call('DELETE', '/_weir/api/token');
      setText(this.status, 'Token removed from the keychain.');
    } catch (e) {
      setText(this.status, 'The token was not removed.');
      this.onProblem(e);
    } finally {
      this.busy(false);
    }
  }

  busy(on) {
    this.store.disabled = on;
    this.remove.disabled = on;
  }

  /** Loads `GET /_weir/api/settings` when the running Weir has it. */
  async load() {
    try {
      const doc = await call('GET', '/_weir/api/settings');
      this.renderSettings(doc);
      this.renderConfigNote(doc?.config_file ?? doc?.config_path ?? null);
    } catch (e) {
      // 404: this Weir has no settings endpoint yet; 401 on a read-only page is expected.
      if (e.status !== 404 && !(e.status === 401 && !hasSecret())) this.onProblem(e);
      this.settings.replaceChildren();
    }
  }

  renderConfigNote(path) {
    if (path) {
      this.configNote.replaceChildren(h('p', {}, 'Configuration file: ', h('code', { 'data-testid': 'config-path' }, String(path))));
      return;
    }
    this.configNote.replaceChildren(
      h('p', {}, 'Weir reads ', h('code', {}, 'config.toml'), ' from your OS config directory (or the file given with ', h('code', {}, '--config'), '):'),
      h('ul', { class: 'kv-list' }, DEFAULT_CONFIG_PATHS.map(([os, p]) => h('li', {}, h('span', {}, os), h('code', {}, p)))));
  }

  renderSettings(doc) {
    if (!doc || typeof doc !== 'object') {
      this.settings.replaceChildren();
      return;
    }
    const rows = Object.entries(doc).filter(([k]) => k !== 'config_file' && k !== 'config_path');
    this.settings.replaceChildren(
      h('h3', { class: 'sub' }, 'Current settings'),
      h('dl', { class: 'settings-list small' }, rows.map(([k, v]) => [h('dt', {}, fmt.words(k)), h('dd', {}, renderValue(v))])));
  }
}
