// The dashboard's Agent sessions view and New task form in a real browser, against a real
// `weir serve` and a fake agents API (a loopback server with a session list that changes and a
// jobs endpoint that counts creates). The token is stored through the control API into the
// keychain (harness: a private gnome-keyring), as the token panel does.
//
//   cd tests/browser && npm ci && WEIR_BIN=/path/to/weir node --test

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, atView, control, startWeir, until } from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const TOKEN = 'gho_weirBrowserSessions0123456789';

/** The fake agents API: `sessions` is what the list answers; `creates` what POSTs it got. */
async function startAgents() {
  const state = {
    sessions: [
      { id: 's-1', state: 'in_progress', name: 'Fix the login bug', repository: 'octo/app', created_at: '2026-11-30T08:00:00Z', last_updated_at: '2026-11-30T08:05:00Z' },
      { id: 's-2', state: 'completed', name: 'Add a changelog', repository: 'octo/app', resource_type: 'pull', pull_request: { number: 42 }, created_at: '2026-11-29T10:00:00Z' },
      { id: 's-3', state: 'failed', name: 'Upgrade the toolchain', repository: 'octo/lib', created_at: '2026-11-28T10:00:00Z' },
    ],
    lists: 0,
    creates: [],
  };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const json = (status, body) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.headers.authorization !== `Bearer ${TOKEN}`) return json(401, { message: 'Bad credentials' });
      if (req.method === 'GET' && req.url.startsWith('/agents/sessions')) {
        state.lists += 1;
        return json(200, { sessions: state.sessions });
      }
      if (req.method === 'POST' && req.url.startsWith('/agents/swe/v1/jobs/')) {
        const raw = Buffer.concat(chunks).toString();
        const body = JSON.parse(raw || '{}');
        state.creates.push({ url: req.url, body, raw, headers: req.headers, key: req.headers['idempotency-key'] });
        if (state.down) return json(503, { message: 'Service Unavailable' });
        return json(201, { job_id: `job-${state.creates.length}`, session_id: `s-new-${state.creates.length}` });
      }
      return json(404, { message: 'Not Found' });
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    state,
    close: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve());
    }),
  };
}

describe('Agent sessions view and New task form', { timeout: 120_000 }, () => {
  let agents;
  let weir;
  let browser;
  let page;

  before(async () => {
    assert.ok(WEIR_BIN && fs.existsSync(WEIR_BIN), 'set WEIR_BIN to the built weir binary');
    agents = await startAgents();
    // A short list TTL so a changed session shows up within the test (the poller's floor is 5 s).
    weir = await startWeir(WEIR_BIN, agents.port, '[classes.list]\nfresh_ttl = "5s"\n');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 1000 } })).newPage();
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await agents?.close();
  });

  test('lists the sessions, updates them, and creates a task once', async (t) => {
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(atView(weir.dashboard, 'sessions'));
    await page.locator('[data-testid="connection"][data-connected="true"]').waitFor();
    // Before a token is stored, the view says how to turn it on and Weir polls nothing.
    await page.getByTestId('sessions-note').filter({ hasText: 'store a GitHub token' }).waitFor();
    assert.equal(agents.state.lists, 0);

    const stored = await control(weir, 'PUT', '/_weir/api/token', { body: { token: TOKEN }, secret: weir.secret });
    if (stored.status === 503) {
      t.skip('no OS keychain here: a token cannot be stored (the Rust tests cover this case)');
      return;
    }
    assert.equal(stored.status, 200, stored.text);

    const rows = page.getByTestId('session-row');
    await until('three session rows', async () => (await rows.count()) === 3);
    await page.getByTestId('sessions-summary').filter({ hasText: '1 running, 1 ready for review, 1 failed' }).waitFor();
    const first = rows.nth(0);
    assert.match(await first.textContent(), /Running/);
    assert.match(await first.textContent(), /octo\/app/);
    assert.match(await first.textContent(), /Fix the login bug/);
    const pr = rows.nth(1).getByTestId('session-pr');
    assert.equal(await pr.getAttribute('href'), 'https://github.com/octo/app/pull/42');
    assert.equal(await rows.nth(1).getByRole('link', { name: 'Add a changelog' }).getAttribute('href'),
      'https://github.com/octo/app/pull/42/agent-sessions/s-2');
    assert.match(await rows.nth(2).textContent(), /Failed/);

    // The agent finishes s-1 with a pull request: the view follows at the next poll.
    agents.state.sessions[0] = { ...agents.state.sessions[0], state: 'completed', resource_type: 'pull', pull_request: { number: 43 } };
    await page.getByTestId('sessions-summary').filter({ hasText: '2 ready for review, 1 failed' }).waitFor({ timeout: 30_000 });
    assert.equal(await rows.nth(0).getAttribute('data-group'), 'ready_for_review');

    // New task: a double click, then the same form sent again, make one create.
    await page.getByTestId('task-repository').fill('octo/app');
    await page.getByTestId('task-base').fill('main');
    await page.getByTestId('task-statement').fill('Add a dark mode toggle');
    await page.getByTestId('task-submit').dblclick();
    await page.locator('[data-testid="task-result"][data-outcome="created"]').waitFor();
    assert.match(await page.getByTestId('task-result').textContent(), /Created: s-new-1/);
    await page.getByTestId('task-submit').click();
    await page.getByTestId('task-result').filter({ hasText: 'not created twice' }).waitFor();
    assert.equal(agents.state.creates.length, 1, JSON.stringify(agents.state.creates));
    const [create] = agents.state.creates;
    assert.equal(create.url, '/agents/swe/v1/jobs/octo/app');
    assert.equal(create.body.problem_statement, 'Add a dark mode toggle');
    assert.equal(create.body.pull_request.base_ref, 'refs/heads/main');
    assert.ok(create.key, 'the form sends an Idempotency-Key');
    // What `gh agent-task create` sends (cli/cli pkg/cmd/agent-task/capi/job.go and
    // client.go): Go's encoding of capi.Job, gh's Copilot API headers, a bearer token.
    assert.equal(create.raw, '{"problem_statement":"Add a dark mode toggle","event_type":"gh_cli",'
      + '"created_at":"0001-01-01T00:00:00Z","updated_at":"0001-01-01T00:00:00Z",'
      + '"pull_request":{"id":0,"number":0,"base_ref":"refs/heads/main"}}');
    assert.equal(create.headers['content-type'], 'application/json');
    assert.equal(create.headers['copilot-integration-id'], 'copilot-4-cli');
    assert.equal(create.headers['x-github-api-version'], '2026-01-09');
    assert.equal(create.headers.authorization, `Bearer ${TOKEN}`);

    // Another task is another create.
    await page.getByTestId('task-statement').fill('Add a light mode toggle');
    await page.getByTestId('task-submit').click();
    await page.getByTestId('task-result').filter({ hasText: 'Created: s-new-2' }).waitFor();
    assert.equal(agents.state.creates.length, 2);

    // GitHub cannot take a task now: Weir queues it and the form names the queue item and
    // the provisional session gh can follow.
    agents.state.down = true;
    await page.getByTestId('task-statement').fill('Add a high-contrast toggle');
    await page.getByTestId('task-submit').click();
    await page.locator('[data-testid="task-result"][data-outcome="queued"]').waitFor();
    assert.match(await page.getByTestId('task-result').textContent(),
      /Queued as #\d+: .*gh agent-task view [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\./);
    agents.state.down = false;

    // The token never reaches the page, and the public status leaves titles out.
    assert.ok(!(await page.content()).includes(TOKEN));
    const status = await control(weir, 'GET', '/_weir/api/status');
    assert.ok(!status.text.includes('Fix the login bug'), 'titles are not in the public status');
    assert.deepEqual(errors, []);
  });
});
