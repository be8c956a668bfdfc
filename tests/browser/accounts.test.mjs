// The dashboard's Accounts panel against a real `weir serve`: three credentials of one GitHub
// account are resolved with `GET /user` at a fake GitHub (the `github-api` upstream), and the
// panel shows the account by its login, never a token.
//
//   cd tests/browser && npm ci --silent && WEIR_BIN=/path/to/debug/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, atView, startUpstream, startWeir, until, viaProxy } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const TOKENS = {
  gho_AliceVsCodeUiTest00000000000001: { id: 1001, login: 'alice', scopes: 'repo, workflow' },
  gho_AliceGhCliUiTest000000000000002: { id: 1001, login: 'alice', scopes: 'gist, read:org, repo' },
  github_pat_11AliceUiTestFineGrained03: { id: 1001, login: 'alice', scopes: '' },
};

/** A fake api.github.com: `/user` for the tokens above, 401 for anything else. */
async function startGithub() {
  const seen = [];
  const server = http.createServer((req, res) => {
    const token = String(req.headers.authorization || '').replace(/^(token|Bearer) /, '');
    seen.push(req.url);
    const who = TOKENS[token];
    if (req.url !== '/user' || !who) {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"message":"Bad credentials"}');
      return;
    }
    const headers = { 'content-type': 'application/json' };
    if (who.scopes) headers['x-oauth-scopes'] = who.scopes;
    res.writeHead(200, headers);
    res.end(JSON.stringify({ id: who.id, login: who.login }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: server.address().port, seen, close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }) };
}

describe('Accounts panel', { timeout: 120_000 }, () => {
  let upstream;
  let github;
  let weir;
  let browser;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    upstream = await startUpstream();
    github = await startGithub();
    weir = await startWeir(WEIR_BIN, upstream.port,
      `[[upstream]]\nname = "github-api"\norigin = "http://127.0.0.1:${github.port}"\n`);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await github?.close();
    await upstream?.close();
  });

  test('shows the account by login, its credentials and kinds, and no token', async () => {
    for (const token of Object.keys(TOKENS)) {
      const r = await viaProxy(weir.port, upstream.port, { path: '/agents/sessions?page_size=20', headers: { authorization: `token ${token}` } });
      assert.equal(r.status, 200);
    }
    const page = await browser.newPage();
    await page.goto(atView(weir.dashboard, 'traffic'));
    const row = page.getByTestId('account-alice');
    await until('the account row', async () => (await row.count()) === 1 && /3/.test(await row.locator('td').nth(1).textContent()));
    const cells = await row.locator('td').allTextContents();
    assert.equal(cells[0], 'alice');
    assert.equal(cells[1], '3');
    assert.equal(cells[2], 'OAuth app, fine-grained PAT');
    assert.match(cells[4], /^[0-9,]+$/, 'requests sent upstream');
    assert.match(await page.getByTestId('accounts-note').textContent(), /shared between tokens of one account and one OAuth app/);
    const html = await page.content();
    for (const token of Object.keys(TOKENS)) assert.ok(!html.includes(token.slice(4)), 'no token on the page');
    assert.equal(github.seen.filter((u) => u === '/user').length, 3, 'one /user per credential');
    await page.close();
  });
});
