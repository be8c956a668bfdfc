// The Set up view: every step of setting a laptop up for Weir with its live state (done,
// needed, not possible here and why), as `GET /_weir/api/setup` works it out with `weir
// doctor`'s checks; a button where Weir may do the step itself (no admin rights), the exact
// command to copy where it may not, and each step's undo.

import { RequestSeq, call, hasSecret } from './api.js';
import { h, setText } from './dom.js';
import { copyText } from './setup.js';

const STATE_TEXT = { done: 'Done', needed: 'Needed', not_possible: 'Not possible here' };
// While the view is open the checks run again this often, so a step done elsewhere (a
// terminal, the tray, VS Code) shows as done without a click.
const REFRESH_MS = 5000;

export class SetupView {
  /**
   * `onSteps(doc)` hears every check's answer (the page shows the Set up tab while a step is
   * needed); `onOpen()` / `onClose()` ask the page to show or leave the view (`#view=setup`),
   * which then calls `show()` / `hide()`.
   */
  constructor({ section, list, result, refresh, close, onProblem, onSteps, onOpen, onClose }) {
    this.section = section;
    this.list = list;
    this.result = result;
    this.onProblem = onProblem;
    this.onSteps = onSteps;
    this.onOpen = onOpen;
    this.timer = null;
    this.busy = false;
    this.shown = false;
    // Checks run every few seconds and after each action: only the last one sent is shown.
    this.seq = new RequestSeq();
    refresh.addEventListener('click', () => this.load());
    close.addEventListener('click', () => onClose());
  }

  /** Checks the steps once at start; opens the view by itself on the install's first run. */
  async start() {
    if (!hasSecret()) return;
    const n = this.seq.next();
    const doc = await this.fetch();
    if (!doc || !this.seq.isLatest(n)) return;
    this.render(doc);
    if (doc.first_run && !this.shown) this.onOpen();
  }

  /** The view is on screen: check now and every few seconds while it stays. */
  async show() {
    this.section.hidden = false;
    if (!hasSecret()) {
      setText(this.result, 'The Set up view needs the control secret: open the link printed by `weir serve`, or use the tray.');
      return;
    }
    if (this.shown) return;
    this.shown = true;
    clearInterval(this.timer);
    this.timer = setInterval(() => this.load(), REFRESH_MS);
    await this.load();
    // Shown once: later starts do not open it by themselves (the tray's "Set up" still does).
    call('POST', '/_weir/api/setup/seen').catch(() => {});
  }

  /** The view left the screen: stop checking. */
  hide() {
    this.shown = false;
    clearInterval(this.timer);
    this.timer = null;
  }

  async fetch() {
    try {
      return await call('GET', '/_weir/api/setup');
    } catch (e) {
      this.onProblem(e);
      return null;
    }
  }

  async load() {
    if (this.busy) return;
    const n = this.seq.next();
    const doc = await this.fetch();
    if (doc && this.seq.isLatest(n)) this.render(doc);
  }

  async act(action) {
    this.busy = true;
    const n = this.seq.next();
    try {
      const doc = await call('POST', `/_weir/api/setup/${action}`);
      setText(this.result, doc?.done ?? '');
      if (doc && this.seq.isLatest(n)) this.render(doc);
    } catch (e) {
      setText(this.result, e.problem?.detail ?? String(e));
      this.onProblem(e);
    } finally {
      this.busy = false;
    }
  }

  async storeToken(input) {
    const token = input.value.trim();
    if (!token) return;
    this.busy = true;
    try {
      await call('PUT', '/_weir/api/token', { token });
      input.value = '';
      setText(this.result, 'Token stored in Weir\'s secret store (the OS keychain, or owner-only files where there is none)');
    } catch (e) {
      this.onProblem(e);
    } finally {
      this.busy = false;
    }
    await this.load();
  }

  render(doc) {
    const steps = Array.isArray(doc.steps) ? doc.steps : [];
    this.onSteps?.(steps);
    const done = steps.filter((s) => s.state === 'done').length;
    this.section.dataset.done = String(done);
    this.section.dataset.total = String(steps.length);
    // Rebuilt only when something changed, so a periodic check does not eat a half-typed token.
    const key = JSON.stringify(steps);
    if (key === this.key) return;
    this.key = key;
    this.list.replaceChildren(...steps.map((s) => this.stepItem(s)));
  }

  stepItem(s) {
    const id = String(s.id);
    const parts = [
      h('div', { class: 'setup-head' },
        h('span', { class: 'setup-title' }, s.title),
        h('span', { class: 'setup-state', 'data-testid': `setup-state-${id}` }, STATE_TEXT[s.state] ?? s.state)),
      h('p', { class: 'small', 'data-testid': `setup-detail-${id}` }, s.detail),
    ];
    if (s.command) {
      const label = s.needs_admin ? 'Run in a terminal (needs admin rights):' : (s.action ? 'Runs:' : 'Command:');
      parts.push(h('div', { class: 'setup-cmd' },
        h('span', { class: 'muted small' }, label),
        h('code', { 'data-testid': `setup-command-${id}` }, s.command),
        copyButton(s.command, this.result)));
    }
    const buttons = [];
    if (s.action && s.state !== 'done') {
      buttons.push(h('button', {
        type: 'button', class: 'btn primary small', 'data-testid': `setup-action-${s.action}`,
        onclick: () => this.act(s.action),
      }, s.id === 'ca_browsers' ? 'Trust in my browsers' : 'Do it'));
    }
    if (s.undo_action && s.state === 'done') {
      buttons.push(h('button', {
        type: 'button', class: 'btn small', 'data-testid': `setup-action-${s.undo_action}`,
        onclick: () => this.act(s.undo_action),
      }, 'Undo'));
    }
    if (id === 'token' && s.state === 'needed') {
      const input = h('input', {
        type: 'password', autocomplete: 'off', spellcheck: 'false', placeholder: 'ghp_… or github_pat_…',
        'aria-label': 'GitHub token', 'data-testid': 'setup-token-input',
      });
      buttons.push(input, h('button', {
        type: 'button', class: 'btn primary small', 'data-testid': 'setup-token-store',
        onclick: () => this.storeToken(input),
      }, 'Store token'));
    }
    if (buttons.length) parts.push(h('div', { class: 'row' }, buttons));
    if (s.undo) parts.push(h('p', { class: 'muted small', 'data-testid': `setup-undo-${id}` }, `Undo: ${s.undo}`));
    return h('li', { class: 'setup-step', 'data-testid': `setup-step-${id}`, 'data-state': s.state }, parts);
  }
}

function copyButton(text, status) {
  const button = h('button', {
    type: 'button', class: 'btn small', 'aria-label': `Copy ${text}`,
    onclick: async () => {
      try {
        await copyText(text);
        setText(button, 'Copied');
      } catch {
        setText(button, 'Select and copy');
        setText(status, 'The browser refused clipboard access; select the text and copy it.');
      }
      setTimeout(() => setText(button, 'Copy'), 1500);
    },
  }, 'Copy');
  return button;
}
