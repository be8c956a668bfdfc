// The dashboard's cache panel in a real browser against a real `weir serve`: it shows where the
// cache is kept (from the status document's `cache.persistence`) and "Clear cache" empties it
// in memory and on disk (`POST /_weir/api/cache/clear`).
//
//   cd tests/browser && npm ci --silent && WEIR_BIN=/path/to/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, OUT_DIR, atView, control, startUpstream, startWeir, until, viaProxy } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;

describe('Dashboard cache panel', { timeout: 120_000 }, () => {
  let upstream;
  let weir;
  let browser;
  let page;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    upstream = await startUpstream();
    weir = await startWeir(WEIR_BIN, upstream.port);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
  });

  test('shows where the cache is kept and clears it', async () => {
    for (const p of ['/agents/sessions', '/agents/sessions/s1']) {
      const res = await viaProxy(weir.port, upstream.port, { path: p });
      assert.equal(res.status, 200, res.body);
    }
    const status = await control(weir, 'GET', '/_weir/api/status');
    const persistence = status.json.cache.persistence;
    // With a keychain (scripts/with-keychain.sh) the cache is on disk; without one it says why.
    const hasKeychain = weir.keychain || Boolean(process.env.WEIR_KEYCHAIN_BUS);
    const expected = hasKeychain ? 'persisted' : 'memory_only';
    assert.equal(persistence.state, expected, JSON.stringify(persistence));

    await page.goto(atView(weir.dashboard, 'traffic'));
    const label = page.getByTestId('cache-persistence');
    await page.locator(`[data-testid="cache-persistence"][data-state="${expected}"]`).waitFor();
    const text = await label.textContent();
    if (expected === 'persisted') assert.match(text, /encrypted on disk: 2 entries/);
    else assert.match(text, /Memory only, lost on restart: no OS keychain/);
    await page.waitForFunction(() => document.querySelector('[data-testid="overview-cache-entries"]')?.textContent === '2');
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.screenshot({ path: path.join(OUT_DIR, 'cache-panel.png') });

    await page.getByTestId('cache-clear').click();
    await page.locator('[data-testid="notice"]:not([hidden])').waitFor();
    assert.match(await page.getByTestId('notice').textContent(), /Cache cleared: 2 entries/);
    await page.waitForFunction(() => document.querySelector('[data-testid="overview-cache-entries"]')?.textContent === '0');
    const afterClear = await control(weir, 'GET', '/_weir/api/status');
    assert.equal(afterClear.json.cache.entries, 0);
    if (expected === 'persisted') {
      await until('the disk rows to be gone', async () => (await control(weir, 'GET', '/_weir/api/status')).json.cache.persistence.entries === 0);
    }
    // The next request goes upstream again.
    const before = upstream.seen.length;
    await viaProxy(weir.port, upstream.port, { path: '/agents/sessions' });
    assert.equal(upstream.seen.length, before + 1);
  });
});
