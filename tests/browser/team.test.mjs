// The dashboard's Team panel against a real `weir serve`'s status: hidden without `[team]`;
// with `[team]` and no team key in the keychain, it says team signals are off and why.
//
//   cd tests/browser && npm ci && WEIR_BIN=/work/main/target/debug/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, atView, startUpstream, startWeir, until } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;

/** A loopback port nothing listens on (the NATS server of this test is "down"). */
async function deadPort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

describe('Team panel', { timeout: 120_000 }, () => {
  let upstream;
  let alone;
  let teamed;
  let browser;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    upstream = await startUpstream();
    alone = await startWeir(WEIR_BIN, upstream.port);
    teamed = await startWeir(WEIR_BIN, upstream.port, `[team]\nnats_url = "nats://127.0.0.1:${await deadPort()}"\n`);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await browser?.close();
    await alone?.stop();
    await teamed?.stop();
    await upstream?.close();
  });

  test('without [team] the panel stays hidden', async () => {
    const status = await fetch(`${alone.base}/_weir/api/status`).then((r) => r.json());
    assert.equal(status.team, null);
    const page = await browser.newPage();
    await page.goto(atView(alone.dashboard, 'traffic'));
    await until('the first status', async () => (await page.getByTestId('version').textContent())?.startsWith('v'));
    assert.equal(await page.getByTestId('team-section').isHidden(), true);
    await page.close();
  });

  test('with [team] the panel shows the link state and the reason from the status', async () => {
    const status = await fetch(`${teamed.base}/_weir/api/status`).then((r) => r.json());
    assert.ok(status.team, 'status.team is reported');
    assert.equal(status.team.connected, false);
    const page = await browser.newPage();
    await page.goto(atView(teamed.dashboard, 'traffic'));
    await until('the Team panel', async () => await page.getByTestId('team-section').isVisible());
    const link = page.getByTestId('team-link');
    assert.equal(await link.getAttribute('data-link'), status.team.link);
    assert.equal(await page.getByTestId('team-error').textContent(), status.team.error);
    const row = page.getByTestId('team-upstreams').locator('li[data-upstream="test"]');
    assert.match(await row.textContent(), /0 failing/);
    await page.close();
  });
});
