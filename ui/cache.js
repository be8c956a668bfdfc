// The cache panel: whether cached answers survive a restart (`cache.persistence` in the status
// document: `persisted`, encrypted on disk, or `memory_only` with the reason) and the "Clear
// cache" button (`POST /_weir/api/cache/clear`, needs the control secret).

import { call } from './api.js';
import { setText } from './dom.js';
import * as fmt from './format.js';

const REASONS = {
  disabled: 'turned off (cache.persist = false)',
  no_keychain: 'no OS keychain to hold the encryption key',
  keychain_error: 'the keychain could not give the encryption key',
  open_failed: 'the cache file cannot be opened',
  write_failed: 'writing the cache file failed',
};

/** The sentence for a `cache.persistence` value (exported for the tests). */
export function persistenceText(p) {
  if (!p || typeof p !== 'object') return 'Checking where the cache is kept…';
  if (p.state === 'persisted') {
    return `Kept across restarts, encrypted on disk: ${fmt.int(p.entries)} entries, ${fmt.bytes(p.bytes)} of ${fmt.bytes(p.max_bytes)}`;
  }
  if (p.state === 'memory_only') {
    const why = REASONS[p.reason] ?? String(p.reason ?? 'unknown reason');
    return `Memory only, lost on restart: ${why}${p.detail ? ` (${p.detail})` : ''}`;
  }
  return 'Unknown cache state';
}

export class CachePanel {
  constructor({ state, clear, onProblem, onNotice }) {
    Object.assign(this, { state, clear, onProblem, onNotice });
    this.pending = false;
    this.persistence = null;
    clear.addEventListener('click', () => this.clearCache());
    this.render();
  }

  /** `cache` is the status document's `cache` object. */
  statusUpdate(cache) {
    if (cache && typeof cache === 'object') this.persistence = cache.persistence ?? null;
    this.render();
  }

  render() {
    setText(this.state, persistenceText(this.persistence));
    this.state.dataset.state = this.persistence?.state ?? 'unknown';
    this.clear.disabled = this.pending;
  }

  async clearCache() {
    this.pending = true;
    this.render();
    try {
      const res = await call('POST', '/_weir/api/cache/clear');
      if (res?.persistence) this.persistence = res.persistence;
      this.onNotice(`Cache cleared: ${fmt.int(res?.cleared ?? 0)} entries removed from memory and disk.`);
    } catch (e) {
      this.onProblem(e);
    } finally {
      this.pending = false;
      this.render();
    }
  }
}
