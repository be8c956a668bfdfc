// The dashboard's Settings panel in a real browser against a real `weir serve`: saving edits
// into the config file Weir was started with (`--config`), the engine's 422 naming file, line
// and key, upstream origins refused (config-file only), and the keychain-backed GitHub token form.
//
//   cd tests/browser && npm ci --no-audit --no-fund
//   WEIR_BIN=/work/main/target/debug/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import {
  CHROMIUM, CHROMIUM_ARGS, OUT_DIR, atView, control, startUpstream, startWeir,
} from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const SAVED = /^Saved to (.+) and applied$/;

describe('Weir dashboard settings', { timeout: 180_000 }, () => {
  let upstream;
  let weir;
  let browser;
  let page;
  let original;
  const puts = [];
  const errors = [];

  before(async () => {
    assert.ok(WEIR_BIN, 'set WEIR_BIN to the built weir binary, e.g. WEIR_BIN=/work/main/target/debug/weir');
    assert.ok(fs.existsSync(WEIR_BIN), `WEIR_BIN=${WEIR_BIN} does not exist; run cargo build -p weir`);
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium`);
    upstream = await startUpstream();
    weir = await startWeir(WEIR_BIN, upstream.port);
    assert.ok(weir.secret, 'weir serve must print the dashboard link with #secret=');
    original = fs.readFileSync(weir.config, 'utf8');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
    page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('request', (r) => {
      if (r.method() === 'PUT' && new URL(r.url()).pathname === '/_weir/api/settings') puts.push(r.postDataJSON());
    });
    await page.goto(atView(weir.dashboard, 'settings'));
    await page.getByTestId('settings-form').waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('config-path').textContent(), weir.config);
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
  });

  /** Clicks Save and waits for the PUT's answer; returns the body the page sent. */
  async function save() {
    const before = puts.length;
    const answered = page.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === '/_weir/api/settings');
    await page.getByTestId('settings-save').click();
    await answered;
    assert.equal(puts.length, before + 1, 'Save sends exactly one PUT');
    return puts[puts.length - 1];
  }

  async function dismissBanner() {
    const banner = page.getByTestId('error-banner');
    if (await banner.isVisible()) await banner.locator('.banner-close').click();
  }

  test('shows the effective settings in the form', async () => {
    assert.equal(await page.getByTestId('upstream-name-1').inputValue(), 'test');
    assert.equal(await page.getByTestId('upstream-origin-1').inputValue(), `http://127.0.0.1:${upstream.port}`);
    assert.equal(await page.getByTestId('upstream-row-2').count(), 0);
    const doc = (await control(weir, 'GET', '/_weir/api/settings', { secret: weir.secret })).json;
    assert.equal(await page.getByTestId('setting-list-fresh_ttl').inputValue(), doc.effective.classes.list.fresh_ttl);
    assert.equal(await page.getByTestId('setting-view-fresh_ttl').inputValue(), doc.effective.classes.view.fresh_ttl);
    assert.equal(Number(await page.getByTestId('setting-breaker-minimum_calls').inputValue()), doc.effective.breaker.minimum_calls);
    assert.equal(Number(await page.getByTestId('setting-breaker-failure_rate_threshold').inputValue()), doc.effective.breaker.failure_rate_threshold);
    assert.equal(await page.getByTestId('settings-dirty').textContent(), '');
  });

  test('changing the list fresh TTL saves only that key into the config file', async () => {
    await page.getByTestId('setting-list-fresh_ttl').fill('30s');
    assert.equal(await page.getByTestId('settings-dirty').textContent(), 'Unsaved changes');
    const body = await save();
    assert.deepEqual(body, { classes: { list: { fresh_ttl: '30s' } } }, 'only the changed key is sent');
    const saved = page.getByTestId('settings-saved');
    await page.waitForFunction((re) => new RegExp(re).test(document.querySelector('[data-testid="settings-saved"]').textContent), SAVED.source, { timeout: 5_000 });
    assert.equal((await saved.textContent()).match(SAVED)[1], weir.config);
    assert.equal(await saved.getAttribute('role'), 'status');
    assert.equal(await page.getByTestId('error-banner').isVisible(), false);
    assert.equal(await page.getByTestId('settings-dirty').textContent(), '');

    const onDisk = fs.readFileSync(weir.config, 'utf8');
    assert.match(onDisk, /fresh_ttl = "30s"/);
    for (const line of original.split('\n').filter((l) => l.trim())) {
      assert.ok(onDisk.split('\n').includes(line), `the harness's line ${JSON.stringify(line)} is still in the file:\n${onDisk}`);
    }
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.locator('section[aria-labelledby="settings-h"]').screenshot({ path: path.join(OUT_DIR, 'dashboard-settings.png') });
  });

  test('the saved change is in force at once, and a file broken on disk is shown with file and line', async () => {
    const status = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.equal(status.settings.applied_from, 'api');
    assert.ok(status.settings.version >= 1);
    const doc = (await control(weir, 'GET', '/_weir/api/settings', { secret: weir.secret })).json;
    assert.equal(doc.effective.classes.list.fresh_ttl, '30s', 'the effective settings changed without a restart');

    const good = fs.readFileSync(weir.config, 'utf8');
    const broken = `${good.trimEnd()}\nbogus_key = 1\n`;
    const line = broken.trimEnd().split('\n').length;
    fs.writeFileSync(weir.config, broken);
    const live = page.getByTestId('settings-live');
    await live.waitFor({ state: 'visible', timeout: 15_000 });
    const text = await live.textContent();
    assert.ok(text.includes(`${weir.config}:${line}`), `names file and line: ${text}`);
    assert.ok(text.includes('previous settings are still in force'), text);
    assert.equal(await live.getAttribute('data-error'), 'true');
    const after = (await control(weir, 'GET', '/_weir/api/settings', { secret: weir.secret })).json;
    assert.equal(after.effective.classes.list.fresh_ttl, '30s', 'the old settings keep running');

    fs.writeFileSync(weir.config, good);
    await live.waitFor({ state: 'hidden', timeout: 15_000 });

    // A good edit on disk shows up in the form by itself (no unsaved edits here).
    fs.writeFileSync(weir.config, good.replace('fresh_ttl = "30s"', 'fresh_ttl = "45s"'));
    await page.waitForFunction(() => document.querySelector('[data-testid="setting-list-fresh_ttl"]').value === '45s', null, { timeout: 15_000 });
    assert.equal(await page.getByTestId('settings-dirty').textContent(), '');
    fs.writeFileSync(weir.config, good);
    await page.waitForFunction(() => document.querySelector('[data-testid="setting-list-fresh_ttl"]').value === '30s', null, { timeout: 15_000 });
  });

  test('changing an origin is refused with the 422 detail and leaves the file alone', async () => {
    const beforeBytes = fs.readFileSync(weir.config);
    await page.getByTestId('upstream-origin-1').fill('https://elsewhere.example');
    const body = await save();
    assert.deepEqual(body, { upstreams: [{ name: 'test', origin: 'https://elsewhere.example' }] });
    const banner = page.getByTestId('error-banner');
    await banner.waitFor({ state: 'visible', timeout: 5_000 });
    const text = await banner.textContent();
    assert.ok(text.includes('upstreams[0].origin'), `the banner names the key: ${text}`);
    assert.ok(text.includes('config file'), `and says where it can be changed: ${text}`);
    assert.equal(await page.getByTestId('settings-saved').textContent(), '', 'no saved message after a refusal');
    assert.ok(fs.readFileSync(weir.config).equals(beforeBytes), 'the config file is unchanged');
    assert.equal(await page.getByTestId('settings-dirty').textContent(), 'Unsaved changes');

    await dismissBanner();
    await page.getByTestId('settings-revert').click();
    assert.equal(await page.getByTestId('upstream-origin-1').inputValue(), `http://127.0.0.1:${upstream.port}`);
    assert.equal(await page.getByTestId('settings-dirty').textContent(), '');
  });

  test('adding an upstream row is refused: upstreams are config-file only', async () => {
    const beforeBytes = fs.readFileSync(weir.config);
    await page.getByTestId('upstream-add').click();
    await page.getByTestId('upstream-name-2').fill('extra');
    await page.getByTestId('upstream-origin-2').fill('http://127.0.0.1:9');
    await save();
    const banner = page.getByTestId('error-banner');
    await banner.waitFor({ state: 'visible', timeout: 5_000 });
    assert.ok((await banner.textContent()).includes('config file'));
    assert.ok(fs.readFileSync(weir.config).equals(beforeBytes), 'the config file is unchanged');
    await dismissBanner();
    await page.getByTestId('upstream-remove-2').click();
    assert.equal(await page.getByTestId('upstream-row-2').count(), 0);
    await page.getByTestId('settings-revert').click();
    assert.equal(await page.getByTestId('settings-dirty').textContent(), '');
  });

  test('without the secret, settings are neither shown nor saved, and the file is unchanged', async () => {
    const beforeBytes = fs.readFileSync(weir.config);
    const fresh = await browser.newContext();
    try {
      const p = await fresh.newPage();
      await p.goto(`${weir.base}/_weir/#view=settings`);
      // Reads need the secret too: the form stays hidden and the page says why.
      await p.getByTestId('settings-need-secret').waitFor({ state: 'visible', timeout: 10_000 });
      assert.match(await p.getByTestId('settings-need-secret').textContent(), /control secret/);
      assert.equal(await p.getByTestId('settings-form').isVisible(), false);
      // A save from this page (no secret) is refused with the 401 problem.
      const put = await p.evaluate(async () => {
        const r = await fetch('/_weir/api/settings', {
          method: 'PUT', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ classes: { view: { fresh_ttl: '9s' } } }),
        });
        return { status: r.status, type: r.headers.get('content-type'), body: await r.json() };
      });
      assert.equal(put.status, 401);
      assert.equal(put.type, 'application/problem+json');
      assert.equal(put.body.kind, 'unauthorized');
      assert.ok(fs.readFileSync(weir.config).equals(beforeBytes), 'the config file is unchanged');
    } finally {
      await fresh.close();
    }
  });

  test('a token is stored in the keychain and never shown back', async (t) => {
    if (!weir.keychain) return t.skip('no Secret Service here: install dbus-x11 gnome-keyring libsecret-tools so the harness starts Weir under scripts/with-keychain.sh');
    const token = `ghp_browser${crypto.randomBytes(12).toString('hex')}`;
    const state = page.getByTestId('token-state');
    await page.waitForFunction(() => document.querySelector('[data-testid="token-state"]').textContent === 'No token stored', null, { timeout: 5_000 });
    assert.equal(await page.getByTestId('token-remove').isDisabled(), true, 'nothing to remove yet');

    await page.getByTestId('token-input').fill(token);
    await page.getByTestId('token-store').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="token-state"]').textContent === 'A token is stored', null, { timeout: 5_000 });
    assert.equal(await page.getByTestId('token-input').inputValue(), '', 'the input is cleared');
    assert.equal(await page.getByTestId('error-banner').isVisible(), false);
    const status = await control(weir, 'GET', '/_weir/api/status');
    assert.equal(status.json.github_token_stored, true);
    assert.ok(!status.text.includes(token), 'the status document never carries the token');
    const everything = () => page.evaluate(() => document.documentElement.outerHTML
      + [...document.querySelectorAll('input, textarea')].map((i) => i.value).join('\n'));
    assert.ok(!(await page.content()).includes(token), 'the token is nowhere in the page HTML');
    assert.ok(!(await everything()).includes(token), 'nor in any input');

    // A page opened now learns it from the status stream alone.
    const fresh = await browser.newContext();
    try {
      const p = await fresh.newPage();
      await p.goto(`${weir.base}/_weir/`);
      await p.waitForFunction(() => document.querySelector('[data-testid="token-state"]').textContent === 'A token is stored', null, { timeout: 5_000 });
      assert.ok(!(await p.content()).includes(token));
    } finally {
      await fresh.close();
    }

    await page.getByTestId('token-remove').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="token-state"]').textContent === 'No token stored', null, { timeout: 5_000 });
    assert.equal(await state.getAttribute('data-stored'), 'false');
    assert.equal((await control(weir, 'GET', '/_weir/api/status')).json.github_token_stored, false);
    assert.ok(!(await everything()).includes(token));
    assert.deepEqual(errors, [], 'no script errors on the page');
  });
});
