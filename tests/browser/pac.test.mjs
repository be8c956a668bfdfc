// Weir's PAC in a real Chromium, and what happens when Weir is gone. A managed host
// (api.weir-pac.test, mapped to a loopback stand-in with --host-resolver-rules; Weir reaches it
// through `connect_to`) is loaded through Weir while it runs; then Weir is stopped and the same
// Chromium, which keeps the PAC it fetched, still loads the page: the PAC's `; DIRECT` sends it
// straight to the stand-in. A Chromium started while Weir is stopped cannot fetch the PAC at
// all and goes DIRECT (a PAC URL set on the command line is not mandatory).
//
//   cd tests/browser && npm ci --no-audit --no-fund
//   WEIR_BIN=/path/to/target/debug/weir node --test pac.test.mjs

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, control, startWeir } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const HOST = 'api.weir-pac.test';

/** The managed host's stand-in: an HTML page, and every request it got (with whether Weir sent it). */
async function startStandIn() {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ url: req.url, viaWeir: Boolean(req.headers['x-request-id']), host: req.headers.host });
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><meta charset="utf-8"><title>stand-in</title><p id="who">the managed host</p>');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    seen,
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(() => resolve()); }),
  };
}

describe('PAC with Weir running and stopped', { timeout: 180_000 }, () => {
  let standIn;
  let weir;
  const browsers = [];

  before(async () => {
    assert.ok(WEIR_BIN, 'set WEIR_BIN to the built weir binary');
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium`);
    standIn = await startStandIn();
    weir = await startWeir(WEIR_BIN, standIn.port, '', {
      origin: `http://${HOST}:${standIn.port}`,
      connectTo: `127.0.0.1:${standIn.port}`,
    });
  });

  after(async () => {
    for (const b of browsers) await b.close().catch(() => {});
    await weir?.stop();
    await standIn?.close();
  });

  async function launch() {
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [
        ...CHROMIUM_ARGS,
        `--proxy-pac-url=http://127.0.0.1:${weir.port}/proxy.pac`,
        `--host-resolver-rules=MAP ${HOST} 127.0.0.1`,
      ],
    });
    browsers.push(browser);
    return browser.newPage();
  }

  const url = () => `http://${HOST}:${standIn.port}/pac-check`;
  const lastCheck = () => standIn.seen.filter((s) => s.url === '/pac-check').at(-1);

  let page;

  test('the PAC sends the managed host to Weir, with DIRECT as the fallback', async () => {
    const pac = await control(weir, 'GET', '/proxy.pac');
    assert.equal(pac.status, 200);
    assert.ok(pac.text.includes(`host === "${HOST}") return "PROXY 127.0.0.1:${weir.port}; DIRECT";`), pac.text);

    page = await launch();
    const res = await page.goto(url());
    assert.equal(res.status(), 200);
    assert.equal(await page.locator('#who').textContent(), 'the managed host');
    assert.equal(lastCheck().viaWeir, true, 'Weir forwarded it (it adds X-Request-Id)');
    const status = (await control(weir, 'GET', '/_weir/api/status')).json;
    assert.ok(status.upstreams[0].totals.client_requests >= 1, 'Weir counted the request');
  });

  test('with Weir stopped, the same Chromium (PAC already fetched) loads the page DIRECT', async () => {
    const before = standIn.seen.length;
    await weir.stop();
    const res = await page.goto(url());
    assert.equal(res.status(), 200);
    assert.equal(await page.locator('#who').textContent(), 'the managed host');
    assert.ok(standIn.seen.length > before, 'the stand-in got the request');
    assert.equal(lastCheck().viaWeir, false, 'straight to the stand-in, not through Weir');
  });

  test('a Chromium started while Weir is stopped (no PAC to fetch) goes DIRECT too', async () => {
    const fresh = await launch();
    const res = await fresh.goto(url());
    assert.equal(res.status(), 200);
    assert.equal(await fresh.locator('#who').textContent(), 'the managed host');
    assert.equal(lastCheck().viaWeir, false);
  });
});
