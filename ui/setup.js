// The proxy set-up snippets, each with a copy button.

import { h, setText } from './dom.js';

function snippets(host) {
  const base = `http://${host}`;
  return [
    { id: 'https-proxy', label: 'Shell', text: `export HTTPS_PROXY=${base}` },
    { id: 'http-proxy', label: 'Shell', text: `export HTTP_PROXY=${base}` },
    { id: 'pac', label: 'PAC URL', text: `${base}/proxy.pac` },
    { id: 'vscode', label: 'VS Code settings.json', text: `"http.proxy": "${base}"` },
  ];
}

/** Copies text to the clipboard (the Set up view's copy buttons use it too). */
export async function copyText(text) {
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
