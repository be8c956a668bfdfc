// Talking to Weir: where it is, the control secret, and calls that turn every failure into a
// problem document ({title, detail, ...}) the page can show.

const SECRET_KEY = 'weir.control-secret';
let secret = null;

/**
 * Weir's base URL. Served by Weir itself, that is the page's own origin; inside the tray's
 * webview (a non-http scheme) the tray injects `window.__WEIR_BASE__`.
 */
export function apiBase() {
  if (location.protocol === 'http:' || location.protocol === 'https:') return location.origin;
  const injected = window.__WEIR_BASE__;
  return typeof injected === 'string' ? injected.replace(/\/+$/, '') : '';
}

export function url(path) {
  return apiBase() + path;
}

function storage() {
  try {
    return window.sessionStorage;
  } catch {
    return null; // storage disabled: the secret then lives for this page view only
  }
}

/**
 * Takes the control secret from `#secret=HEX` (the link `weir serve` prints), keeps it in
 * sessionStorage for reloads, and removes it from the address bar so it does not end up in
 * history, bookmarks or screenshots.
 */
export function loadSecret() {
  const valid = (v) => typeof v === 'string' && /^[A-Za-z0-9_-]{8,256}$/.test(v);
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  const fromHash = params.get('secret');
  if (fromHash !== null) {
    params.delete('secret');
    const rest = params.toString();
    history.replaceState(history.state, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
    if (valid(fromHash)) storage()?.setItem(SECRET_KEY, fromHash);
  }
  const stored = storage()?.getItem(SECRET_KEY);
  const injected = window.__WEIR_SECRET__;
  secret = [fromHash, stored, injected].find(valid) ?? null;
  return secret;
}

export function hasSecret() {
  return Boolean(secret);
}

/** An error carrying an RFC 9457 problem document (or one made up for network failures). */
export class ProblemError extends Error {
  constructor(problem) {
    super(`${problem.title}: ${problem.detail ?? ''}`);
    this.problem = problem;
    this.status = problem.status ?? 0;
  }
}

/**
 * Calls the control API. Resolves with the parsed JSON body (or null); rejects with a
 * ProblemError whose `problem` has at least `title` and `detail`.
 */
export async function call(method, path, body) {
  const headers = { Accept: 'application/json, application/problem+json' };
  if (secret) headers['X-Weir-Secret'] = secret;
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(url(path), init);
  } catch (e) {
    throw new ProblemError({
      title: 'Cannot reach Weir',
      detail: `${method} ${path} did not get an answer (${e.message}). Is \`weir serve\` (or the tray) still running?`,
      status: 0,
    });
  }
  const type = res.headers.get('content-type') || '';
  if (!res.ok) {
    let problem = null;
    if (type.includes('json')) {
      try {
        problem = await res.json();
      } catch {
        problem = null;
      }
    }
    if (!problem || typeof problem !== 'object') {
      problem = { title: `${res.status} ${res.statusText || 'error'}`, detail: `${method} ${path} failed.` };
    }
    problem.title = String(problem.title ?? `${res.status} error`);
    problem.detail = String(problem.detail ?? '');
    problem.status ??= res.status;
    throw new ProblemError(problem);
  }
  if (res.status === 204) return null;
  if (type.includes('json')) return res.json();
  return null;
}

/**
 * A panel's request numbers: `next()` before each request, `isLatest(n)` when its answer comes.
 * Answers come back in any order (a slow one may arrive after a newer one); a panel shows only
 * the answer to the last request it sent, so a late answer to an older form state or an older
 * refresh never overwrites a newer one.
 */
export class RequestSeq {
  constructor() {
    this.sent = 0;
  }

  next() {
    this.sent += 1;
    return this.sent;
  }

  isLatest(n) {
    return n === this.sent;
  }
}
