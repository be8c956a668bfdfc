// The dashboard's local-agent offers (#14) in a real browser against a real `weir serve` with a
// `[local_agent]` command: two offers made through the control API, one confirmed in the page
// (the command runs exactly once, its outcome shows), one declined (nothing runs).
//
//   cd tests/browser && npm ci --silent && WEIR_BIN=/path/to/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, OUT_DIR, control, startUpstream, startWeir, until } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const PYTHON = '/usr/bin/python3';

// Started directly by Weir (argv, no shell): records its arguments and the statement file's text.
const RECORDER = `import json, os, sys
with open(sys.argv[1]) as f:
    task = f.read()
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "task": task, "cwd": os.getcwd()}) + "\\n")
`;

describe('Dashboard local-agent offers', { timeout: 120_000 }, () => {
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
    weir = await startWeir(WEIR_BIN, upstream.port, [
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
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test('confirm runs the local agent once; decline runs nothing', async () => {
    const offer = async (statement) => {
      const r = await control(weir, 'POST', '/_weir/api/handoffs', {
        secret: weir.secret,
        body: { repo: 'octo/app', problem_statement: statement },
      });
      assert.equal(r.status, 201, r.text);
      return r.json;
    };
    const first = await offer('Fix the flaky login test');
    const second = await offer('Rename the config module');
    assert.equal(first.state, 'offered');
    // The open status document counts them without the private fields.
    const status = await control(weir, 'GET', '/_weir/api/status');
    assert.equal(status.json.handoffs.pending.length, 2);
    assert.ok(!JSON.stringify(status.json.handoffs).includes('octo/app'));

    await page.goto(weir.dashboard);
    await page.getByTestId(`handoff-row-${first.id}`).waitFor();
    const row = page.getByTestId(`handoff-row-${first.id}`);
    assert.match(await row.textContent(), /octo\/app/);
    assert.match(await row.textContent(), /Fix the flaky login test/);
    assert.ok(!fs.existsSync(record), 'nothing runs before a confirmation');
    fs.mkdirSync(OUT_DIR, { recursive: true });
    await page.getByTestId('handoffs-section').screenshot({ path: path.join(OUT_DIR, 'handoffs-panel.png') });

    await page.getByTestId(`handoff-confirm-${first.id}`).click();
    await page.locator('[data-testid="notice"]:not([hidden])').waitFor();
    assert.match(await page.getByTestId('notice').textContent(), /local agent was started/);
    await until('the outcome in the page', async () =>
      /finished \(exit 0\)/.test(await page.getByTestId(`handoff-outcome-${first.id}`).textContent()));
    const runs = fs.readFileSync(record, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(runs.length, 1);
    assert.equal(runs[0].task, 'Fix the flaky login test');
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
