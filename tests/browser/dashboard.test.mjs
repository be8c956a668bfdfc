// The Weir dashboard in a real browser against a real `weir serve` and a real upstream.
//
//   cd tests/browser && npm install --no-audit --no-fund
//   WEIR_BIN=/work/main/target/debug/weir node --test
//
// Needs Debian's Chromium at /usr/bin/chromium (apt-get install -y --no-install-recommends chromium)
// or CHROMIUM_BIN. Screenshots go to <repo>/out/.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import {
  CHROMIUM, CHROMIUM_ARGS, OUT_DIR, REPO, atView, control, startUpstream, startWeir, until, viaProxy,
} from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const NO_SECRET = 'weir serve printed the dashboard link without #secret=; the lead makes serve print it';

/** Reads a counter shown on the page ("1,234" → 1234; "—" → NaN). */
async function counter(page, testid) {
  const text = await page.getByTestId(testid).textContent();
  return Number(String(text).replace(/[^0-9.]/g, '') || NaN);
}

describe('Weir dashboard', { timeout: 180_000 }, () => {
  let upstream;
  let weir;
  let browser;
  let context;
  let page;

  before(async () => {
    assert.ok(WEIR_BIN, 'set WEIR_BIN to the built weir binary, e.g. WEIR_BIN=/work/main/target/debug/weir');
    assert.ok(fs.existsSync(WEIR_BIN), `WEIR_BIN=${WEIR_BIN} does not exist; run cargo build -p weir`);
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium`);
    upstream = await startUpstream();
    weir = await startWeir(WEIR_BIN, upstream.port);
    // The binary embeds ui/ at compile time: make sure it serves the files in this checkout.
    for (const file of fs.readdirSync(path.join(REPO, 'ui'))) {
      const served = Buffer.from(await fetch(`${weir.base}/_weir/${file}`).then((r) => r.arrayBuffer()));
      const onDisk = fs.readFileSync(path.join(REPO, 'ui', file));
      assert.ok(served.equals(onDisk), `${WEIR_BIN} embeds an older ui/${file}: rebuild it (cargo build -p weir)`);
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
    page = await context.newPage();
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
  });

  test('loads, shows the upstream card and live counters', async () => {
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // Failed loads are checked by URL below (Chromium logs them as console errors too).
    page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text()); });
    // Endpoints the engine may not have yet answer 404 and the page copes; anything else must load.
    const optional = /\/_weir\/api\/(queue|settings)$/;
    page.on('response', (r) => { if (r.status() >= 400 && !optional.test(new URL(r.url()).pathname)) errors.push(`${r.status()} ${r.url()}`); });
    // At the overview: on an install's first run the Set up view opens by itself on a bare
    // link (its own test covers that).
    await page.goto(atView(weir.dashboard, 'overview'));
    // The overview first; the upstream cards are in the Traffic view.
    await page.getByTestId('view-overview').waitFor({ state: 'visible' });
    await page.getByTestId('nav-traffic').click();
    await page.getByTestId('upstream-test').waitFor();
    await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
    assert.ok(!page.url().includes('secret='), `the secret must leave the address bar, url is ${page.url()}`);
    await page.locator('[data-testid="overall-state"][data-state="ok"]').waitFor();

    const before = await counter(page, 'client-total-test');
    assert.equal(before, 0, 'no client requests yet');
    const sent = 8;
    for (let i = 0; i < sent; i += 1) {
      const res = await viaProxy(weir.port, upstream.port, { path: '/agents/sessions' });
      assert.equal(res.status, 200, `proxied list call answered ${res.status}: ${res.body}`);
    }
    // Totals come from the next status event; the rate from the difference of two snapshots.
    await page.waitForFunction(([id, n]) => {
      const t = document.querySelector(`[data-testid="${id}"]`)?.textContent ?? '';
      return Number(t.replace(/[^0-9]/g, '')) >= n;
    }, ['client-total-test', sent], { polling: 100, timeout: 10_000 });
    await page.waitForFunction(() => /[1-9]/.test(document.querySelector('[data-testid="client-rate-test"]')?.textContent ?? ''),
      null, { polling: 50, timeout: 10_000 });
    const upstreamShown = await counter(page, 'upstream-total-test');
    assert.ok(upstreamShown >= 1 && upstreamShown <= upstream.seen.length, `upstream total ${upstreamShown} vs ${upstream.seen.length} seen`);
    assert.ok(upstream.seen.length < sent, `caching/coalescing should have kept some of ${sent} calls away (upstream saw ${upstream.seen.length})`);
    const points = await page.locator('[data-testid="upstream-test"] .line-client').getAttribute('points');
    assert.ok(points && points.split(' ').length >= 1, 'the chart has client rate points');
    assert.match(await page.getByTestId('snippet-https-proxy').textContent(), new RegExp(`export HTTPS_PROXY=http://127\\.0\\.0\\.1:${weir.port}$`));
    assert.equal(await page.getByTestId('snippet-pac').textContent(), `http://127.0.0.1:${weir.port}/proxy.pac`);
    // Interception in the overview, as the status has it (#32): "off", or its counts.
    const st = (await control(weir, 'GET', '/_weir/api/status')).json;
    await page.getByTestId('nav-overview').click();
    const i = st.interception;
    const shown = await page.getByTestId('overview-intercepted').textContent();
    if (i) {
      assert.match(shown, new RegExp(`^${i.connections} · ${i.leaves_issued} lea`), shown);
      const failed = Object.values(i.handshake_failures).reduce((a, n) => a + n, 0);
      assert.match(await page.getByTestId('overview-handshake-failures').textContent(), new RegExp(`^${failed}`));
    } else {
      assert.equal(shown, 'off');
      assert.equal(await page.getByTestId('overview-handshake-failures').textContent(), '—');
    }
    // The later tests read the upstream card, in the Traffic view.
    await page.getByTestId('nav-traffic').click();
    assert.deepEqual(errors, [], 'no script errors on the page');
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.screenshot({ path: path.join(OUT_DIR, 'dashboard.png'), fullPage: true });
  });

  test('the mode switch chooses cache only, pass-through and automatic with the secret', async (t) => {
    if (!weir.secret) return t.skip(NO_SECRET);
    assert.equal(await page.getByTestId('readonly-notice').isVisible(), false);
    const state = () => page.getByTestId('overall-state');
    await page.waitForFunction(() => !document.querySelector('[data-testid="mode-cache-only"]').disabled);
    assert.equal(await page.getByTestId('mode-automatic').getAttribute('aria-checked'), 'true');

    await page.getByTestId('mode-cache-only').click();
    await page.locator('[data-testid="overall-state"][data-state="cache-only"]').waitFor({ timeout: 5_000 });
    assert.match(await state().textContent(), /cache only/i);
    assert.match(await page.getByTestId('mode-reason').textContent(), /chosen in the dashboard/);
    assert.equal(await page.getByTestId('mode-cache-only').getAttribute('aria-checked'), 'true');
    let st = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.equal(st.mode.mode, 'cache_only');
    assert.equal(st.mode.chosen_by, 'dashboard');

    await page.getByTestId('mode-pass-through').click();
    await page.locator('[data-testid="overall-state"][data-state="paused"]').waitFor({ timeout: 5_000 });
    assert.match(await state().textContent(), /pass-through/i);
    st = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.equal(st.mode.mode, 'pass_through');
    assert.equal(st.paused, true);

    await page.getByTestId('mode-automatic').click();
    await page.waitForFunction(() => !['paused', 'cache-only'].includes(document.querySelector('[data-testid="overall-state"]').dataset.state), null, { timeout: 5_000 });
    assert.equal(await page.getByTestId('mode-reason').textContent(), '');
    st = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.equal(st.mode.mode, 'automatic');
    assert.equal(st.paused, false);
  });

  test('without the secret, the mode switch shows the 401 problem and changes nothing', async () => {
    const expected = await control(weir, 'PUT', '/_weir/api/mode', { body: { mode: 'pass_through' } });
    assert.equal(expected.status, 401);
    assert.match(expected.type, /application\/problem\+json/);
    const fresh = await browser.newContext();
    try {
      const p = await fresh.newPage();
      await p.goto(`${weir.base}/_weir/`);
      await p.getByTestId('readonly-notice').waitFor({ state: 'visible' });
      assert.match(await p.getByTestId('readonly-notice').textContent(), /weir serve/);
      const toggle = p.getByTestId('mode-pass-through');
      await p.waitForFunction(() => !document.querySelector('[data-testid="mode-pass-through"]').disabled);
      await toggle.click();
      const banner = p.getByTestId('error-banner');
      await banner.waitFor({ state: 'visible', timeout: 5_000 });
      assert.equal(await banner.getAttribute('role'), 'alert');
      const text = await banner.textContent();
      assert.ok(text.includes(expected.json.title), `banner shows the title "${expected.json.title}": ${text}`);
      assert.ok(text.includes(expected.json.detail), `banner shows the detail: ${text}`);
      assert.notEqual(await p.getByTestId('overall-state').getAttribute('data-state'), 'paused');
      assert.equal(await toggle.getAttribute('aria-checked'), 'false');
      assert.equal((await control(weir, 'GET', '/_weir/api/status')).json.mode.mode, 'automatic');
    } finally {
      await fresh.close();
    }
  });

  test('a page on another origin cannot read status or pause Weir', async () => {
    const fresh = await browser.newContext();
    try {
      const p = await fresh.newPage();
      await p.goto(`http://127.0.0.1:${upstream.port}/evil.html`);
      const out = await p.evaluate(async ({ base, secret }) => {
        const r = {};
        try {
          const res = await fetch(`${base}/_weir/api/status`);
          r.read = await res.text();
        } catch (e) {
          r.readError = String(e);
        }
        // Even with the right secret, a custom header needs a preflight that Weir never approves.
        try {
          await fetch(`${base}/_weir/api/pause`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-weir-secret': secret || 'guess' },
            body: '{"paused":true}',
          });
          r.preflighted = 'sent';
        } catch (e) {
          r.preflightError = String(e);
        }
        // A "simple" request goes out without a preflight; Weir must refuse it by its Origin.
        try {
          const res = await fetch(`${base}/_weir/api/pause`, { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: '{"paused":true}' });
          r.simple = res.type;
        } catch (e) {
          r.simpleError = String(e);
        }
        r.stream = await new Promise((resolve) => {
          const es = new EventSource(`${base}/_weir/api/events`);
          const done = (v) => { es.close(); resolve(v); };
          es.addEventListener('status', () => done('read'));
          es.onerror = () => done('error');
          setTimeout(() => done('timeout'), 5_000);
        });
        return r;
      }, { base: weir.base, secret: weir.secret });
      assert.equal(out.read, undefined, `another origin read the status: ${out.read}`);
      assert.match(out.readError, /TypeError|Failed to fetch/);
      assert.equal(out.preflighted, undefined, 'the preflighted POST must fail');
      assert.match(out.preflightError, /TypeError|Failed to fetch/);
      assert.notEqual(out.stream, 'read', 'another origin must not read the event stream');
      const st = await control(weir, 'GET', '/_weir/api/status');
      assert.equal(st.json.paused, false, `a cross-origin POST paused Weir (simple request: ${out.simple ?? out.simpleError})`);
    } finally {
      await fresh.close();
    }
  });

  test('a slow upstream shows degraded on its card and in the header, with the reason', async (t) => {
    const st = await control(weir, 'GET', '/_weir/api/status');
    if (!st.json.upstreams?.[0]?.breaker?.latency) return t.skip('status has no breaker latency baseline');
    const views = (n, tag) => Promise.all(Array.from({ length: n }, (_, i) =>
      viaProxy(weir.port, upstream.port, { path: `/agents/sessions/${tag}-${Date.now()}-${i}` })));
    // A fast baseline for the view class (distinct sessions: nothing comes from the cache).
    for (let i = 0; i < 12; i += 1) await views(1, 'fast');
    // Then 1.1 s answers: over the 1 s floor, far over 4× the usual, under the 5 s `slow_call`.
    upstream.behaviour.delayMs = 1100;
    try {
      await until('the breaker to report degraded', async () => {
        await views(6, 'slow');
        const s = await control(weir, 'GET', '/_weir/api/status');
        return s.json.upstreams[0].breaker.state === 'degraded';
      }, { timeoutMs: 30_000, everyMs: 50 });
    } finally {
      upstream.behaviour.delayMs = 0;
    }
    const s = await control(weir, 'GET', '/_weir/api/status');
    const b = s.json.upstreams[0].breaker;
    assert.equal(b.opens_total, 0, 'slow answers that succeed never open it');
    const view = b.latency.find((l) => l.class === 'view');
    assert.ok(view && view.p50_ms < 1000, JSON.stringify(b.latency));
    // The page learns it from the once-a-second status stream.
    await page.locator('[data-testid="breaker-test"][data-state="degraded"]').waitFor({ timeout: 15_000 });
    assert.match(await page.getByTestId('breaker-test').textContent(), /^degraded$/i);
    // The `breaker` event flips the badge at once; the reason comes with the next status tick.
    await page.locator('[data-testid="breaker-detail-test"]', { hasText: 'slower than usual' }).waitFor({ timeout: 15_000 });
    const detail = await page.getByTestId('breaker-detail-test').textContent();
    assert.match(detail, /view usually \d+ ms, slow from 1 s/);
    await page.locator('[data-testid="overall-state"][data-state="degraded"]').waitFor({ timeout: 5_000 });
    assert.match(await page.getByTestId('overall-state').textContent(), /test degraded: .*slower than usual/);
    assert.match(await page.getByTestId('timeline-test').textContent(), /closed → degraded/);
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.screenshot({ path: path.join(OUT_DIR, 'dashboard-degraded.png'), fullPage: true });
    // Fast again: healthy once the window says so.
    await until('the breaker to recover', async () => {
      await views(6, 'again');
      const r = await control(weir, 'GET', '/_weir/api/status');
      return r.json.upstreams[0].breaker.state === 'closed';
    }, { timeoutMs: 30_000, everyMs: 50 });
  });

  test('a failing upstream opens the breaker on its card', async (t) => {
    const st = await control(weir, 'GET', '/_weir/api/status');
    if (!st.json.upstreams?.[0]?.breaker) return t.skip('status has no upstreams[0].breaker yet (the lead adds the breaker to status)');
    upstream.behaviour.status = 500;
    await until('the breaker to open', async () => {
      for (let i = 0; i < 5; i += 1) {
        await viaProxy(weir.port, upstream.port, { path: `/agents/sessions/${Date.now()}-${i}` });
      }
      const s = await control(weir, 'GET', '/_weir/api/status');
      return s.json.upstreams[0].breaker.state === 'open';
    }, { timeoutMs: 30_000, everyMs: 50 });
    await page.locator('[data-testid="breaker-test"][data-state="open"]').waitFor({ timeout: 5_000 });
    assert.match(await page.getByTestId('breaker-test').textContent(), /^open$/i);
    await page.locator('[data-testid="overall-state"][data-state="breaker-open"]').waitFor({ timeout: 5_000 });
    // Closed → open, or through degraded on the way (a failure rate over 25 % first).
    assert.match(await page.getByTestId('timeline-test').textContent(), /(closed|degraded) → open/);
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.screenshot({ path: path.join(OUT_DIR, 'dashboard-breaker.png'), fullPage: true });
  });

  test('a queued create shows in the queue table and Cancel removes it', async (t) => {
    if (!weir.secret) return t.skip(NO_SECRET);
    const probe = await control(weir, 'GET', '/_weir/api/queue', { secret: weir.secret });
    if (probe.status === 404) return t.skip('GET /_weir/api/queue answers 404 (the create queue endpoint is not in the engine yet)');
    assert.equal(probe.status, 200, probe.text);
    const known = new Set((probe.json.items || []).map((i) => String(i.id)));
    upstream.behaviour.status = 503;
    const res = await viaProxy(weir.port, upstream.port, {
      method: 'POST', path: '/agents/swe/v1/jobs/octo/repo', body: { problem_statement: 'browser test' },
    });
    if (!weir.keychain && res.status === 503 && /queue_unavailable/.test(res.body)) {
      return t.skip('Weir cannot queue creates without an OS keychain: install dbus-x11 gnome-keyring libsecret-tools so the test starts Weir under scripts/with-keychain.sh');
    }
    const item = await until('the create to be queued', async () => {
      const q = await control(weir, 'GET', '/_weir/api/queue', { secret: weir.secret });
      return (q.json.items || []).find((i) => !known.has(String(i.id)) && ['queued', 'in_doubt', 'failed'].includes(i.state));
    }, { timeoutMs: 15_000 }).catch((e) => { throw new Error(`${e.message}; the create answered ${res.status}: ${res.body}`); });
    // The overview's "creates kept" counts it (the status's saved.creates_kept).
    const saved = (await control(weir, 'GET', '/_weir/api/status')).json.saved;
    assert.ok(saved.creates_kept >= 1, JSON.stringify(saved));
    await until('the overview to count it', async () => Number(await page.getByTestId('saved-kept').textContent()) >= 1);
    await page.getByTestId('nav-queue').click();
    const row = page.getByTestId(`queue-row-${item.id}`);
    await row.waitFor({ timeout: 5_000 });
    assert.match(await row.textContent(), /\/agents\/swe\/v1\/jobs\/octo\/repo/);
    await page.getByTestId(`queue-cancel-${item.id}`).click();
    await row.waitFor({ state: 'detached', timeout: 5_000 });
    const after = await control(weir, 'GET', '/_weir/api/queue', { secret: weir.secret });
    const state = (after.json.items || []).find((i) => String(i.id) === String(item.id))?.state;
    assert.ok(state === undefined || state === 'cancelled', `cancelled item is in state ${state}`);
    upstream.behaviour.status = 200;
  });
});
