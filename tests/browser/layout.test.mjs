// The dashboard's layout against a real `weir serve`: the overview first, a tab per view with
// its own address, every view at the tray's window width (1,100 px), a narrow browser (800 px)
// and a wide one (1,400 px) with nothing running past the page, the header on one line, and the
// OS's dark mode. Screenshots of every view at every width go to <repo>/out/ (not committed).
//
//   cd tests/browser && npm ci && WEIR_BIN=/work/main/target/debug/weir node --test layout.test.mjs

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, OUT_DIR, control, startUpstream, startWeir, until, viaProxy } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const WIDTHS = [800, 1100, 1400];
const VIEWS = ['overview', 'sessions', 'queue', 'traffic', 'policy', 'settings', 'setup'];

/** The dashboard link at a view (the link carries `#secret=…`; the view joins it). */
function at(weir, view) {
  return `${weir.dashboard}${weir.dashboard.includes('#') ? '&' : '#'}view=${view}`;
}

/**
 * What runs past the page: the document's own width, and every shown element whose right edge,
 * cut by the scroll boxes around it (a wide table scrolls inside its box), lies past the
 * viewport. Each as "tag.class[testid] right=…".
 */
function overflowing(page) {
  return page.evaluate(() => {
    const vw = window.innerWidth;
    const out = [];
    if (document.documentElement.scrollWidth > vw) out.push(`document scrollWidth=${document.documentElement.scrollWidth} > ${vw}`);
    for (const el of document.body.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      let right = r.right;
      for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
        const ox = getComputedStyle(a).overflowX;
        if (ox !== 'visible') right = Math.min(right, a.getBoundingClientRect().right);
      }
      if (right > vw + 0.5) {
        out.push(`${el.tagName.toLowerCase()}.${[...el.classList].join('.')}[${el.dataset.testid ?? ''}] right=${Math.round(right)} > ${vw}`);
      }
    }
    return out;
  });
}

/** Parts of the header that wrapped onto a second line (each should be one line high). */
function wrappedInHeader(page) {
  return page.evaluate(() => {
    const lh = (el) => {
      const cs = getComputedStyle(el);
      const v = parseFloat(cs.lineHeight);
      return Number.isFinite(v) ? v : parseFloat(cs.fontSize) * 1.45;
    };
    const out = [];
    const parts = document.querySelectorAll('.topbar .brand, .topbar [data-testid="connection"], .topbar .mode-switch .btn, .topbar nav a:not([hidden])');
    for (const el of parts) {
      const cs = getComputedStyle(el);
      const inner = el.getBoundingClientRect().height - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom)
        - parseFloat(cs.borderTopWidth) - parseFloat(cs.borderBottomWidth);
      if (inner > lh(el) * 1.5) out.push(`${el.textContent.trim()} is ${Math.round(inner)} px high`);
    }
    // The header's own line: brand, badge and mode switch side by side (the state beside them,
    // or on a line of its own in a narrow window).
    const row = [...document.querySelector('.topbar-row').children].filter((c) => !c.classList.contains('state')).map((c) => c.getBoundingClientRect());
    const top = Math.min(...row.map((r) => r.top));
    const bottom = Math.max(...row.map((r) => r.bottom));
    for (const r of row) if (r.top >= bottom || r.bottom <= top) out.push('a header item sits on its own line');
    // Nothing in it is cut by the window.
    for (const el of document.querySelectorAll('.topbar-row *')) {
      if (el.getBoundingClientRect().right > window.innerWidth + 0.5) out.push(`${el.textContent.trim()} runs out of the window`);
    }
    return out;
  });
}

describe('Dashboard layout', { timeout: 300_000 }, () => {
  let upstream;
  let weir;
  let browser;
  let home;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    upstream = await startUpstream();
    // Its own HOME: the Set up view's checks read shell files, VS Code and git settings there.
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-layout-home-'));
    weir = await startWeir(WEIR_BIN, upstream.port, '', { env: { HOME: home } });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    fs.mkdirSync(OUT_DIR, { recursive: true });
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
    if (home) fs.rmSync(home, { recursive: true, force: true });
  });

  test('the overview shows the state, what was saved, the queue and the sessions', async () => {
    // One list answered from the cache, one joined: calls the upstream never got.
    for (let i = 0; i < 4; i += 1) {
      const res = await viaProxy(weir.port, upstream.port, { path: '/agents/sessions' });
      assert.equal(res.status, 200, res.body);
    }
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    await page.goto(at(weir, 'overview'));
    await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
    assert.equal(await page.getByTestId('view-overview').isVisible(), true);
    for (const v of VIEWS.filter((x) => x !== 'overview')) {
      assert.equal(await page.getByTestId(`view-${v}`).isVisible(), false, `${v} is hidden on the overview`);
    }
    assert.equal(await page.getByTestId('nav-overview').getAttribute('aria-current'), 'page');
    // The figures are the status document's own `saved`.
    const st = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.ok(st.saved.upstream_calls_avoided >= 1, JSON.stringify(st.saved));
    assert.ok(st.saved.window_secs < 3600, JSON.stringify(st.saved));
    await until('the saved figures', async () => Number((await page.getByTestId('saved-avoided').textContent()).replace(/\D/g, '')) === st.saved.upstream_calls_avoided);
    assert.equal(await page.getByTestId('saved-hidden').textContent(), String(st.saved.failures_hidden));
    assert.equal(await page.getByTestId('saved-kept').textContent(), String(st.saved.creates_kept));
    assert.match(await page.getByTestId('saved-window').textContent(), /^since Weir started \(\d+ (s|min) ago\)$/);
    assert.match(await page.getByTestId('overall-state').textContent(), /All good/);
    await until('the queue line', async () => (await page.getByTestId('glance-queue-text').textContent()) === 'Nothing waiting');
    assert.equal(await page.getByTestId('glance-sessions-text').textContent(), 'Off: no GitHub token stored');
    assert.match(await page.getByTestId('glance-upstream-test').textContent(), /closed\s+test/);
    await page.close();
  });

  test('each view has its own address, and the tabs, reload and Back follow it', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    await page.goto(at(weir, 'overview'));
    await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
    for (const v of ['sessions', 'queue', 'traffic', 'policy', 'settings']) {
      await page.getByTestId(`nav-${v}`).click();
      await page.getByTestId(`view-${v}`).waitFor({ state: 'visible' });
      assert.equal(new URLSearchParams(new URL(page.url()).hash.slice(1)).get('view'), v);
      assert.equal(await page.getByTestId('view-overview').isVisible(), false);
      assert.equal(await page.getByTestId(`nav-${v}`).getAttribute('aria-current'), 'page');
    }
    // The secret left the address bar on the first load: the views' links never carry it.
    assert.ok(!page.url().includes('secret='), page.url());
    await page.reload();
    await page.getByTestId('view-settings').waitFor({ state: 'visible' });
    await page.goBack();
    await page.getByTestId('view-policy').waitFor({ state: 'visible' });
    // The tray's offer link opens the Queue view.
    await page.goto(at(weir, 'handoffs'));
    await page.getByTestId('view-queue').waitFor({ state: 'visible' });
    await page.close();
  });

  test('Set up shows as a tab while a step is needed, and opens when asked', async () => {
    const setup = (await control(weir, 'GET', '/_weir/api/setup', { secret: weir.secret })).json;
    const needed = setup.steps.filter((s) => s.state === 'needed').length;
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    await page.goto(at(weir, 'overview'));
    await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
    await until('the set-up check', async () => (await page.getByTestId('glance-setup').isVisible()) === (needed > 0));
    assert.equal(await page.getByTestId('open-setup').isVisible(), needed > 0);
    if (needed > 0) assert.match(await page.getByTestId('glance-setup-text').textContent(), new RegExp(`^${needed} set-up step`));
    await page.goto(at(weir, 'setup'));
    await page.getByTestId('setup-step-keychain').waitFor();
    assert.equal(await page.getByTestId('open-setup').isVisible(), true, 'the tab shows while its view is open');
    // Its first card starts below the sticky header, at the top of the page and scrolled.
    const gap = await page.evaluate(() => {
      const card = document.querySelector('[data-testid="setup-steps"] > li').getBoundingClientRect();
      return card.top - document.querySelector('[data-testid="topbar"]').getBoundingClientRect().bottom;
    });
    assert.ok(gap >= 0, `the first step starts ${-gap} px under the header`);
    // The ✕ goes back to the overview.
    await page.getByTestId('setup-close').click();
    await page.getByTestId('view-overview').waitFor({ state: 'visible' });
    // Asked for from the Settings view (whether or not a step is needed).
    await page.getByTestId('nav-settings').click();
    await page.getByTestId('settings-open-setup').click();
    await page.getByTestId('view-setup').waitFor({ state: 'visible' });
    await page.close();
  });

  for (const width of WIDTHS) {
    test(`every view fits ${width} px: nothing overflows, the header stays on one line`, async () => {
      const page = await browser.newPage({ viewport: { width, height: 900 } });
      await page.goto(at(weir, 'overview'));
      await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
      // The Set up tab is there (steps are needed in this test's fresh HOME): the widest header.
      await page.getByTestId('open-setup').waitFor({ state: 'visible' });
      for (const view of VIEWS) {
        await page.getByTestId(view === 'setup' ? 'open-setup' : `nav-${view}`).click();
        await page.getByTestId(`view-${view}`).waitFor({ state: 'visible' });
        if (view === 'setup') await page.getByTestId('setup-step-keychain').waitFor();
        if (view === 'settings') await page.getByTestId('settings-form').waitFor();
        if (view === 'traffic') await page.getByTestId('upstream-test').waitFor();
        if (view === 'policy') await page.getByTestId('policy-action-create').waitFor();
        assert.deepEqual(await overflowing(page), [], `${view} at ${width} px`);
        assert.deepEqual(await wrappedInHeader(page), [], `the header of ${view} at ${width} px`);
        if (view === 'setup') {
          // Long commands wrap inside their step's card.
          const outside = await page.evaluate(() => [...document.querySelectorAll('[data-testid^="setup-command-"]')]
            .filter((c) => c.getBoundingClientRect().right > c.closest('li').getBoundingClientRect().right + 0.5)
            .map((c) => c.dataset.testid));
          assert.deepEqual(outside, [], `commands past their card at ${width} px`);
        }
        await page.screenshot({ path: path.join(OUT_DIR, `layout-${view}-${width}.png`), fullPage: true });
      }
      // A long state line (cache only, and why) wraps inside its pill, never the header.
      await page.getByTestId('nav-overview').click();
      await page.getByTestId('mode-cache-only').click();
      await page.locator('[data-testid="overall-state"][data-state="cache-only"]').waitFor();
      await page.getByTestId('mode-reason').filter({ hasText: 'dashboard' }).waitFor();
      assert.deepEqual(await overflowing(page), [], `cache only at ${width} px`);
      assert.deepEqual(await wrappedInHeader(page), [], `the header in cache only at ${width} px`);
      await page.screenshot({ path: path.join(OUT_DIR, `layout-cache-only-${width}.png`) });
      await page.getByTestId('mode-automatic').click();
      await page.locator('[data-testid="overall-state"][data-state="ok"]').waitFor();
      await page.close();
    });
  }

  test('the Set up view drops a slow check that is older than a step done since', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    // The view's first check (sent as it opens) is answered 1.5 s late; later ones at once.
    let gets = 0;
    let lateDelivered = false;
    await page.route((u) => u.pathname === '/_weir/api/setup', async (route) => {
      if (route.request().method() !== 'GET' || (gets += 1) !== 1) return route.continue();
      const res = await route.fetch();
      await new Promise((r) => setTimeout(r, 1500));
      await route.fulfill({ response: res });
      lateDelivered = true;
    });
    await page.goto(at(weir, 'setup'));
    const git = page.getByTestId('setup-step-git');
    await git.waitFor();
    assert.equal(await git.getAttribute('data-state'), 'needed');
    await page.getByTestId('setup-action-git').click();
    await until('git to be done', async () => (await git.getAttribute('data-state')) === 'done');
    assert.equal(lateDelivered, false, 'the step was done before the slow check came back');
    await until('the slow check to arrive', async () => lateDelivered, { timeoutMs: 10_000 });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await git.getAttribute('data-state'), 'done', 'the late answer from before the step showed it needed again');
    // Put it back for the other tests.
    await page.getByTestId('setup-action-git-undo').click();
    await until('git to be needed', async () => (await git.getAttribute('data-state')) === 'needed');
    await page.close();
  });

  test('follows the OS\'s dark mode', async () => {
    const bg = async (scheme) => {
      const context = await browser.newContext({ viewport: { width: 1100, height: 800 }, colorScheme: scheme });
      try {
        const page = await context.newPage();
        await page.goto(at(weir, 'overview'));
        await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
        await page.getByTestId('saved-avoided').waitFor();
        await page.screenshot({ path: path.join(OUT_DIR, `layout-overview-1100-${scheme}.png`), fullPage: true });
        assert.deepEqual(await overflowing(page), []);
        return await page.evaluate(() => [getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color]);
      } finally {
        await context.close();
      }
    };
    const luma = (rgb) => {
      const [r, g, b] = rgb.match(/\d+/g).map(Number);
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const [lightBg, lightText] = await bg('light');
    const [darkBg, darkText] = await bg('dark');
    assert.ok(luma(lightBg) > 200 && luma(lightText) < 80, `light: ${lightBg} / ${lightText}`);
    assert.ok(luma(darkBg) < 50 && luma(darkText) > 180, `dark: ${darkBg} / ${darkText}`);
  });
});
