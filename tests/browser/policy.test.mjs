// The dashboard's Policy view against a real `weir serve`: an org policy file (named by
// WEIR_POLICY_FILE, in a temp dir) and the user's rules; the table the page shows is the
// engine's own `GET /_weir/api/policy` answer, refused loosening included.
//
//   cd tests/browser && npm ci && WEIR_BIN=/work/main/target/debug/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, startUpstream, startWeir, until } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;

describe('Policy view', { timeout: 120_000 }, () => {
  let upstream;
  let weir;
  let browser;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-policy-'));
    const org = path.join(dir, 'policy.toml');
    fs.writeFileSync(org, '[[policy]]\nrepo = "secret/*"\ncreate = "queue"\n');
    upstream = await startUpstream();
    process.env.WEIR_POLICY_FILE = org;
    try {
      weir = await startWeir(WEIR_BIN, upstream.port,
        '[[policy]]\nrepo = "secret/api"\ncreate = "local"\n\n[[policy]]\nnetwork = "metered"\nlist = "cache"\n');
    } finally {
      delete process.env.WEIR_POLICY_FILE;
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
  });

  test('shows the effective table for a repository and network, with the org rule binding', async () => {
    const api = await fetch(`${weir.base}/_weir/api/policy?repo=secret%2Fapi&network=metered`, { headers: { 'X-Weir-Secret': weir.secret } }).then((r) => r.json());
    const byFn = Object.fromEntries(api.rows.map((r) => [r.function, r]));
    assert.equal(byFn.create.action, 'queue');
    assert.equal(byFn.create.rule.source, 'org');
    assert.equal(byFn.list.action, 'cache');
    assert.equal(api.refused.length, 1);

    const page = await browser.newPage();
    await page.goto(weir.dashboard);
    await page.getByTestId('nav-policy').click();
    await page.getByTestId('policy-repo').fill('secret/api');
    await page.getByTestId('policy-network').selectOption('metered');
    await page.getByTestId('policy-form').getByRole('button', { name: 'Show' }).click();
    await until('the policy table', async () => (await page.getByTestId('policy-action-create').textContent()) === 'queue');
    for (const f of ['list', 'create', 'model']) {
      assert.equal(await page.getByTestId(`policy-action-${f}`).textContent(), byFn[f].action);
      const rule = await page.getByTestId(`policy-rule-${f}`).textContent();
      const want = byFn[f].rule.source === 'default' ? 'default' : `${byFn[f].rule.source}:${byFn[f].rule.index}`;
      assert.ok(rule.startsWith(want), `${f}: ${rule}`);
    }
    assert.match(await page.locator('tr[data-function="create"]').textContent(), /may not loosen/);
    assert.equal(await page.getByTestId('policy-refused').isHidden(), false);
    assert.match(await page.getByTestId('policy-refused').textContent(), /never loosened/);

    // Another repository: the user's local rule does not reach it, nothing binds.
    await page.getByTestId('policy-repo').fill('else/x');
    await page.getByTestId('policy-network').selectOption('any');
    await until('the other table', async () => (await page.getByTestId('policy-action-list').textContent()) === 'pass');
    assert.equal(await page.getByTestId('policy-action-create').textContent(), 'fallback');
    await page.close();
  });

  test('a slow answer to an older form state never overwrites the newer one', async () => {
    const page = await browser.newPage();
    // Answers for secret/api come late: Weir answers at once, the page gets it 1.5 s later.
    let slowSent = 0;
    let slowDelivered = 0;
    await page.route((u) => u.pathname === '/_weir/api/policy', async (route) => {
      if (new URL(route.request().url()).searchParams.get('repo') !== 'secret/api') return route.continue();
      slowSent += 1;
      const res = await route.fetch();
      await new Promise((r) => setTimeout(r, 1500));
      await route.fulfill({ response: res });
      slowDelivered += 1;
    });
    await page.goto(`${weir.dashboard}${weir.dashboard.includes('#') ? '&' : '#'}view=policy`);
    await page.getByTestId('policy-action-create').waitFor();
    // The older state: secret/api on a metered network (its create is the org's `queue`)...
    await page.getByTestId('policy-repo').fill('secret/api');
    await page.getByTestId('policy-network').selectOption('metered');
    // ...then at once the newer one, answered first.
    await page.getByTestId('policy-repo').fill('else/x');
    await page.getByTestId('policy-network').selectOption('any');
    await until('the newer table', async () => (await page.getByTestId('policy-action-create').textContent()) === 'fallback');
    assert.ok(slowSent >= 1, 'the older state was asked for');
    await until('the older answers to arrive', async () => slowDelivered === slowSent, { timeoutMs: 10_000 });
    // Give the page a moment to (wrongly) render them.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await page.getByTestId('policy-action-create').textContent(), 'fallback', 'a late answer for secret/api replaced the table');
    assert.equal(await page.getByTestId('policy-action-list').textContent(), 'pass');
    assert.equal(await page.getByTestId('policy-repo').inputValue(), 'else/x');
    await page.close();
  });
});
