// The GitHub token form: Store puts a token in the OS keychain (`PUT /_weir/api/token`),
// Remove deletes it. The token is write-only from here: Weir never sends it back, and the page
// drops it from the input as soon as the call is made. Whether one is stored comes from the
// status document's `github_token_stored`.

import { call } from './api.js';
import { setText } from './dom.js';

// After Store or Remove the page knows the answer before the next status snapshot; a snapshot
// taken just before the call must not flip the text back meanwhile.
const LOCAL_WINDOW_MS = 2500;

export class TokenPanel {
  constructor({ form, input, store, remove, status, state, onProblem }) {
    Object.assign(this, { form, input, store, remove, status, state, onProblem });
    this.stored = null; // null: not reported yet
    this.keychain = null; // the replay-credentials backend ('keychain', 'memory', ...)
    this.localUntil = 0;
    this.pending = false;
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.storeToken();
    });
    remove.addEventListener('click', () => this.removeToken());
    this.render();
  }

  /** `doc` is the status document. */
  statusUpdate(doc) {
    if (!doc || typeof doc !== 'object') return;
    if (typeof doc.queue?.credentials === 'string') this.keychain = doc.queue.credentials;
    if (typeof doc.github_token_stored === 'boolean' && Date.now() >= this.localUntil) this.stored = doc.github_token_stored;
    this.render();
  }

  render() {
    let text;
    if (this.stored === true) text = 'A token is stored';
    else if (this.keychain === 'memory') text = 'No token stored: there is no OS keychain or secret file store here, so a token could not outlive Weir';
    else if (this.stored === false && this.keychain === 'file') text = 'No token stored (it would be kept in an owner-only file: there is no OS keychain here)';
    else if (this.stored === false) text = 'No token stored';
    else text = 'Checking whether a token is stored…';
    setText(this.state, text);
    this.state.dataset.stored = String(this.stored);
    this.store.disabled = this.pending;
    this.remove.disabled = this.pending || this.stored === false;
  }

  async storeToken() {
    const token = this.input.value.trim();
    // Never keep the secret in the page longer than the call needs it.
    this.input.value = '';
    if (!token) {
      setText(this.status, 'Paste a token first.');
      this.input.focus();
      return;
    }
    await this.act('PUT', { token }, 'Token stored in the keychain.', 'The token was not stored.');
  }

  async removeToken() {
    await this.act('DELETE', undefined, 'Token removed from the keychain.', 'The token was not removed.');
  }

  async act(method, body, ok, failed) {
    this.pending = true;
    this.render();
    try {
      const res = await call(method, '/_weir/api/token', body);
      this.stored = typeof res?.stored === 'boolean' ? res.stored : method === 'PUT';
      this.localUntil = Date.now() + LOCAL_WINDOW_MS;
      setText(this.status, ok);
      // Remove disables itself once nothing is stored: keep the keyboard focus in the form.
      if (method === 'DELETE') this.input.focus();
    } catch (e) {
      setText(this.status, failed);
      this.onProblem(e);
    } finally {
      this.pending = false;
      this.render();
    }
  }
}
