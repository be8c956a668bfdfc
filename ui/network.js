// The header's network line: "Network: metered (forced)" from `status.network` (its `label`,
// with the `reason` as the tooltip) and a three-way switch for the override — Auto (follow the
// OS), Metered, Not metered — through `PUT /_weir/api/network` (needs the control secret).

import { call, hasSecret } from './api.js';
import { setText } from './dom.js';

/** The switch's button for a `forced` value (null: auto). */
const CHOICE = { auto: null, on: true, off: false };

export class NetworkSwitch {
  /**
   * `root` holds the label (`[data-testid="network-label"]`) and buttons with
   * `data-metered="auto|on|off"`; `onProblem` shows a refused call, `onNotice` a done one.
   */
  constructor(root, { onProblem, onNotice }) {
    this.root = root;
    this.label = root.querySelector('[data-testid="network-label"]');
    this.buttons = [...root.querySelectorAll('button[data-metered]')];
    this.network = null;
    for (const b of this.buttons) {
      b.addEventListener('click', () => this.choose(b, onProblem, onNotice));
    }
  }

  /** `network` is `status.network` (absent from older Weirs: the line stays hidden). */
  update(network) {
    this.network = network && typeof network === 'object' ? network : null;
    this.render();
  }

  render() {
    const n = this.network;
    this.root.hidden = !n;
    if (!n) return;
    this.root.dataset.metered = String(Boolean(n.metered));
    this.root.dataset.source = String(n.source ?? '');
    setText(this.label, `Network: ${n.label ?? (n.metered ? 'metered' : 'not metered')}`);
    this.label.title = n.persist_error ? `${n.reason} (not kept for the next start: ${n.persist_error})` : String(n.reason ?? '');
    const chosen = n.forced === true ? 'on' : n.forced === false ? 'off' : 'auto';
    for (const b of this.buttons) {
      b.setAttribute('aria-checked', String(b.dataset.metered === chosen));
      b.title = hasSecret() ? '' : 'Needs the control secret (open the link printed by weir serve)';
    }
  }

  async choose(button, onProblem, onNotice) {
    if (!this.network || button.getAttribute('aria-checked') === 'true') return;
    const forced = CHOICE[button.dataset.metered];
    if (forced === undefined) return;
    for (const b of this.buttons) b.disabled = true;
    try {
      const res = await call('PUT', '/_weir/api/network', { metered: forced, by: 'dashboard' });
      if (res && typeof res === 'object') this.network = res;
      onNotice(`Network: ${this.network.label ?? 'changed'}.`);
    } catch (e) {
      onProblem(e);
    } finally {
      for (const b of this.buttons) b.disabled = false;
      this.render();
    }
  }
}
