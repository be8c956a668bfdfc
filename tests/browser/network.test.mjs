// The dashboard's network line and metered override against a real `weir serve`: the label is
// the status's own `network.label`, the switch sets the override through the control API (kept
// in the data dir), and without the secret the 401 problem is shown and nothing changes.
// OS detection is off here (tests/network.rs covers NetworkManager on a private D-Bus).
//
//   cd tests/browser && npm ci && WEIR_BIN=/work/main/target/debug/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, atView, control, startUpstream, startWeir, until } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;

describe('Network line', { timeout: 120_000 }, () => {
  let upstream;
  let weir;
  let browser;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    upstream = await startUpstream();
    weir = await startWeir(WEIR_BIN, upstream.port, '[network]\ndetect_os = false\n');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
  });

  const label = (page) => page.getByTestId('network-label').textContent();

  test('shows the status label and forces metered on and back to auto', async (t) => {
    if (!weir.secret) return t.skip('weir serve printed no #secret= link');
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // At the overview (a first run would otherwise open the Set up view by itself).
    await page.goto(atView(weir.dashboard, 'overview'));
    await page.getByTestId('network').waitFor({ state: 'visible' });
    let st = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.equal(st.network.label, 'not metered (no OS information)');
    await until('the label', async () => (await label(page)) === `Network: ${st.network.label}`);
    assert.equal(await page.getByTestId('network-auto').getAttribute('aria-checked'), 'true');
    assert.equal(await page.getByTestId('network-label').getAttribute('title'), st.network.reason);

    await page.getByTestId('network-on').click();
    await until('metered (forced)', async () => (await label(page)) === 'Network: metered (forced)');
    assert.equal(await page.getByTestId('network-on').getAttribute('aria-checked'), 'true');
    assert.equal(await page.getByTestId('network').getAttribute('data-metered'), 'true');
    const n = (await control(weir, 'GET', '/_weir/api/network')).json;
    assert.equal(n.metered, true);
    assert.equal(n.forced, true);
    assert.equal(n.forced_by, 'dashboard');
    assert.match(await page.getByTestId('network-label').getAttribute('title'), /^forced in the dashboard/);
    // Kept for the next start.
    const saved = JSON.parse(fs.readFileSync(path.join(weir.dir, 'data', 'network.json'), 'utf8'));
    assert.equal(saved.forced, true);

    await page.getByTestId('network-off').click();
    await until('not metered (forced)', async () => (await label(page)) === 'Network: not metered (forced)');

    await page.getByTestId('network-auto').click();
    await until('back to auto', async () => (await label(page)) === 'Network: not metered (no OS information)');
    st = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.equal(st.network.forced, null);
    assert.equal(st.network.source, 'default');
    assert.deepEqual(errors, []);
    await page.close();
  });

  test('without the secret the switch shows the 401 problem and changes nothing', async () => {
    const expected = await control(weir, 'PUT', '/_weir/api/network', { body: { metered: true } });
    assert.equal(expected.status, 401);
    const fresh = await browser.newContext();
    try {
      const p = await fresh.newPage();
      await p.goto(`${weir.base}/_weir/`);
      await p.getByTestId('network').waitFor({ state: 'visible' });
      await p.getByTestId('network-on').click();
      const banner = p.getByTestId('error-banner');
      await banner.waitFor({ state: 'visible', timeout: 5_000 });
      const text = await banner.textContent();
      assert.ok(text.includes(expected.json.title), `banner shows "${expected.json.title}": ${text}`);
      assert.equal(await p.getByTestId('network-on').getAttribute('aria-checked'), 'false');
      assert.equal(await p.getByTestId('network-auto').getAttribute('aria-checked'), 'true');
      assert.equal((await control(weir, 'GET', '/_weir/api/network')).json.forced, null);
    } finally {
      await fresh.close();
    }
  });
});
