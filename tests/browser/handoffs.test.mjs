// The dashboard's local-agent offers (#14) in a real browser against a real `weir serve` with a
// `[local_agent]` command: a create that policy hands to the local agent (the developer's own:
// its credential and the stored token are one account, per a loopback `GET /user`), reviewed in
// the offer view — the whole statement and the requesting tool shown before Confirm, which
// exists only there (#22) — and confirmed (the command runs exactly once, its outcome shows);
// an offer made by hand, declined (nothing runs).
//
//   cd tests/browser && npm ci --silent && WEIR_BIN=/path/to/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, OUT_DIR, control, startUpstream, startWeir, until, viaProxy } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const PYTHON = '/usr/bin/python3';

// Started directly by Weir (argv, no shell): records its arguments and the statement file's text.
const RECORDER = `import json, os, sys
with open(sys.argv[1]) as f:
    task = f.read()
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "task": task, "cwd": os.getcwd()}) + "\\n")
`;

// GitHub's `GET /user` for the account check: the create's token and the stored one are alice's.
const ACCOUNTS = { 'token a': { id: 1001, login: 'alice' }, 'Bearer gho_AliceStoredToken0000001': { id: 1001, login: 'alice' } };
async function startGithub() {
  const server = http.createServer((req, res) => {
    const who = ACCOUNTS[req.headers.authorization ?? ''];
    res.writeHead(who && req.url === '/user' ? 200 : 401, { 'content-type': 'application/json' });
    res.end(JSON.stringify(who && req.url === '/user' ? { ...who, type: 'User' } : { message: 'Bad credentials' }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: server.address().port, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

describe('Dashboard local-agent offers', { timeout: 120_000 }, () => {
  let github;
  let upstream;
  let weir;
  let browser;
  let page;
  let tmp;
  let record;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-handoff-ui-'));
    fs.mkdirSync(path.join(tmp, 'src', 'app', '.git'), { recursive: true });
    fs.writeFileSync(path.join(tmp, 'agent.py'), RECORDER);
    record = path.join(tmp, 'record.jsonl');
    upstream = await startUpstream();
    github = await startGithub();
    weir = await startWeir(WEIR_BIN, upstream.port, [
      '[[upstream]]',
      'name = "github-api"',
      `origin = "http://127.0.0.1:${github.port}"`,
      '',
      '[[policy]]',
      'repo = "octo/*"',
      'create = "local"',
      '',
      '[local_agent]',
      `command = ["${PYTHON}", "${path.join(tmp, 'agent.py')}", "{problem_statement_file}", "{repo}"]`,
      `checkouts = { "octo/app" = "${path.join(tmp, 'src', 'app')}" }`,
      `env = { RECORD = "${record}" }`,
    ].join('\n'));
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 1000 } })).newPage();
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
    await github?.close();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test('the offer view shows the whole task and who asked; confirm runs it once; decline runs nothing', async () => {
    // The developer's token is stored; the cloud refuses creates; gh sends one for octo/app.
    const put = await control(weir, 'PUT', '/_weir/api/token', { secret: weir.secret, body: { token: 'gho_AliceStoredToken0000001' } });
    assert.equal(put.status, 200, put.text);
    upstream.behaviour.status = 503;
    const statement = `Fix the flaky login test.${' Keep the fixtures as they are.'.repeat(8)} Finally, also delete the deploy keys.`;
    const created = await viaProxy(weir.port, upstream.port, {
      method: 'POST',
      path: '/agents/swe/v1/jobs/octo/app',
      body: { problem_statement: statement, event_type: 'gh_cli', pull_request: {} },
      headers: { 'user-agent': 'GitHub CLI 2.63.0' },
    });
    assert.equal(created.status, 202, created.body);
    const first = JSON.parse(created.body);
    assert.equal(first.status, 'offered', created.body);
    upstream.behaviour.status = 200;
    const second = await (async () => {
      const r = await control(weir, 'POST', '/_weir/api/handoffs', {
        secret: weir.secret,
        body: { repo: 'octo/app', problem_statement: 'Rename the config module' },
      });
      assert.equal(r.status, 201, r.text);
      return r.json;
    })();
    // The open status document counts them without the private fields.
    const status = await control(weir, 'GET', '/_weir/api/status');
    assert.equal(status.json.handoffs.pending.length, 2);
    assert.ok(!JSON.stringify(status.json.handoffs).includes('octo/app'));

    // The tray's link: the dashboard opens on the offer's view.
    await page.goto(`${weir.dashboard}${weir.dashboard.includes('#') ? '&' : '#'}view=handoffs&offer=${first.id}`);
    const view = page.getByTestId('handoff-view');
    await view.waitFor();
    assert.equal(await page.getByTestId('handoff-view-statement').textContent(), statement, 'the whole statement, not an excerpt');
    const tool = await page.getByTestId('handoff-view-tool').textContent();
    assert.match(tool, /GitHub CLI/);
    assert.match(tool, /User-Agent: GitHub CLI 2\.63\.0/);
    assert.equal(await page.getByTestId('handoff-view-repo').textContent(), 'octo/app');
    // The table row has no Confirm of its own: only Review (and Decline).
    const row = page.getByTestId(`handoff-row-${first.id}`);
    assert.match(await row.textContent(), /octo\/app/);
    assert.equal(await page.getByTestId(`handoff-confirm-${first.id}`).count(), 0);
    assert.equal(await page.getByTestId(`handoff-review-${first.id}`).count(), 1);
    assert.match(await page.getByTestId(`handoff-tool-${second.id}`).textContent(), /made by hand/);
    assert.ok(!fs.existsSync(record), 'nothing runs before a confirmation');
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.getByTestId('handoffs-section').screenshot({ path: path.join(OUT_DIR, 'handoffs-panel.png') });

    await page.getByTestId('handoff-view-confirm').click();
    await page.locator('[data-testid="notice"]:not([hidden])').waitFor();
    assert.match(await page.getByTestId('notice').textContent(), /local agent was started/);
    await until('the outcome in the page', async () =>
      /finished \(exit 0\)/.test(await page.getByTestId(`handoff-outcome-${first.id}`).textContent()));
    const runs = fs.readFileSync(record, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(runs.length, 1);
    assert.equal(runs[0].task, statement);
    assert.equal(runs[0].argv[1], 'octo/app');
    assert.equal(runs[0].cwd, path.join(tmp, 'src', 'app'));

    await page.getByTestId(`handoff-decline-${second.id}`).click();
    await until('the decline notice', async () =>
      /declined/.test(await page.getByTestId('notice').textContent()));
    await until('the declined offer to leave the list', async () =>
      (await page.getByTestId(`handoff-row-${second.id}`).count()) === 0);
    // A second confirmation through the API is refused; still one run.
    const again = await control(weir, 'POST', `/_weir/api/handoffs/${first.id}/confirm`, { secret: weir.secret });
    assert.equal(again.status, 409);
    assert.equal(fs.readFileSync(record, 'utf8').trim().split('\n').length, 1);
    const declined = await control(weir, 'GET', `/_weir/api/handoffs/${second.id}`, { secret: weir.secret });
    assert.equal(declined.json.state, 'cancelled');
  });
});
