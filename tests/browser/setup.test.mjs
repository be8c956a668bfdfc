// The dashboard's Set up view in a real browser against a real `weir serve` whose HOME is a
// temporary directory: it opens by itself on the first run, and its steps move from needed to
// done as the checks pass — the browsers' NSS database trusted by its button (real certutil),
// VS Code pointed at Weir by the real `weir setup vscode` outside the page, the shell profile
// line and git's http.proxy by their buttons and taken back out by their undo, the GitHub
// token stored in the (private) keychain. The API behind it needs the control secret and
// refuses foreign origins.
//
//   cd tests/browser && npm ci --no-audit --no-fund
//   WEIR_BIN=/work/main/target/debug/weir node --test setup.test.mjs

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import {
  CHROMIUM, CHROMIUM_ARGS, control, startUpstream, startWeir, until,
} from './harness.mjs';

const WEIR_BIN = process.env.WEIR_BIN;
const onPath = (tool) => (process.env.PATH || '').split(':').some((d) => d && fs.existsSync(path.join(d, tool)));

describe('Weir dashboard Set up view', { timeout: 180_000 }, () => {
  let upstream;
  let weir;
  let browser;
  let page;
  let home;
  const errors = [];

  before(async () => {
    assert.ok(WEIR_BIN, 'set WEIR_BIN to the built weir binary, e.g. WEIR_BIN=/work/main/target/debug/weir');
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium`);
    assert.ok(onPath('certutil'), 'certutil is missing: apt-get install -y --no-install-recommends libnss3-tools');
    assert.ok(onPath('git'), 'git is missing');
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-setup-home-'));
    upstream = await startUpstream();
    // An HTTPS upstream, so Weir intercepts and has a CA to trust (reached on loopback only).
    weir = await startWeir(WEIR_BIN, upstream.port, '', {
      origin: 'https://api.githubcopilot.com',
      connectTo: `127.0.0.1:${upstream.port}`,
      env: {
        HOME: home, SHELL: '/bin/bash', XDG_CONFIG_HOME: undefined, GIT_CONFIG_GLOBAL: undefined,
        GIT_CONFIG_NOSYSTEM: '1',
      },
    });
    assert.ok(weir.keychain, 'this test needs the private keychain (scripts/with-keychain.sh: dbus-run-session, gnome-keyring)');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 1000 } })).newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(weir.dashboard);
  });

  after(async () => {
    await browser?.close();
    await weir?.stop();
    await upstream?.close();
    if (home) fs.rmSync(home, { recursive: true, force: true });
  });

  const step = (id) => page.getByTestId(`setup-step-${id}`);
  const stateOf = (id) => step(id).getAttribute('data-state');
  async function waitState(id, want) {
    await until(`step ${id} to be ${want}`, async () => (await stateOf(id)) === want, { timeoutMs: 20_000 });
  }
  async function act(action) {
    const answered = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === `/_weir/api/setup/${action}`);
    await page.getByTestId(`setup-action-${action}`).click();
    const res = await answered;
    assert.equal(res.status(), 200, `${action}: ${await res.text()}`);
  }

  test('opens by itself on the first run, with every step and its live state', async () => {
    await page.getByTestId('setup-section').waitFor({ state: 'visible' });
    await page.getByTestId('setup-step-token').waitFor();
    const ids = await page.getByTestId('setup-steps').locator('> li').evaluateAll((els) => els.map((e) => e.dataset.testid));
    assert.deepEqual(ids, ['keychain', 'ca_system', 'ca_browsers', 'shell', 'vscode', 'git', 'token', 'login'].map((i) => `setup-step-${i}`));
    assert.equal(await stateOf('keychain'), 'done');
    // The system store needs admin rights: the exact command to copy, no button.
    assert.equal(await stateOf('ca_system'), 'needed');
    const sys = await page.getByTestId('setup-command-ca_system').textContent();
    assert.match(sys, /^(sudo )?cp \S+weir-ca\.pem \/usr\/local\/share\/ca-certificates\/weir-ca\.crt && (sudo )?update-ca-certificates$/);
    assert.equal(await step('ca_system').locator('button.primary').count(), 0);
    // No NSS database in the fresh HOME yet: not possible, and why.
    assert.equal(await stateOf('ca_browsers'), 'not_possible');
    assert.match(await page.getByTestId('setup-detail-ca_browsers').textContent(), /no browser certificate database/);
    for (const id of ['shell', 'vscode', 'git', 'token']) assert.equal(await stateOf(id), 'needed', id);
    assert.ok(['needed', 'not_possible'].includes(await stateOf('login')));
  });

  test('trusts the CA in the browsers\' NSS database with its button', async () => {
    const db = path.join(home, '.pki', 'nssdb');
    fs.mkdirSync(db, { recursive: true });
    execFileSync('certutil', ['-N', '-d', `sql:${db}`, '--empty-password']);
    await page.getByTestId('setup-refresh').click();
    await waitState('ca_browsers', 'needed');
    assert.match(await page.getByTestId('setup-command-ca_browsers').textContent(), /^certutil -d sql:\S+nssdb -A -t C,, -n 'Weir local CA' -i \S+weir-ca\.pem$/);
    await act('trust-browsers');
    await waitState('ca_browsers', 'done');
    // The database holds exactly the CA Weir serves with (same bytes as its certificate file).
    const listed = execFileSync('certutil', ['-L', '-d', `sql:${db}`, '-n', 'Weir local CA', '-a']).toString();
    const der = (pem) => Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
    const caFile = path.join(weir.dir, 'data', 'ca', 'weir-ca.pem');
    assert.ok(der(listed).equals(der(fs.readFileSync(caFile, 'utf8'))), 'the NSS database holds Weir\'s CA');
  });

  test('VS Code pointed at Weir outside the page shows as done, and its undo takes it out', async () => {
    const settings = path.join(home, '.config', 'Code', 'User', 'settings.json');
    assert.equal(await page.getByTestId('setup-command-vscode').textContent(), `weir setup vscode --apply --settings ${settings}`);
    fs.mkdirSync(path.dirname(settings), { recursive: true });
    fs.writeFileSync(settings, '{\n  // mine\n  "editor.fontSize": 13\n}\n');
    execFileSync(WEIR_BIN, ['setup', 'vscode', '--apply', '--settings', settings, '--config', weir.config], { env: { ...process.env, HOME: home } });
    // No click: the open view checks again by itself.
    await waitState('vscode', 'done');
    await act('vscode-undo');
    await waitState('vscode', 'needed');
    const text = fs.readFileSync(settings, 'utf8');
    assert.ok(!text.includes('http.proxy'), text);
    assert.ok(text.includes('// mine') && text.includes('"editor.fontSize": 13'), text);
  });

  test('the shell profile line and git\'s http.proxy by their buttons, each with its undo', async () => {
    const rc = path.join(home, '.bashrc');
    fs.writeFileSync(rc, "alias ll='ls -l'\n");
    await act('shell');
    await waitState('shell', 'done');
    assert.equal(fs.readFileSync(rc, 'utf8').match(/^eval "\$\(weir env --if-running\)"$/gm)?.length, 1);
    await act('shell-undo');
    await waitState('shell', 'needed');
    assert.equal(fs.readFileSync(rc, 'utf8'), "alias ll='ls -l'\n");

    await act('git');
    await waitState('git', 'done');
    const gitconfig = path.join(home, '.gitconfig');
    const get = () => execFileSync('git', ['config', '--file', gitconfig, '--get', 'http.proxy']).toString().trim();
    assert.equal(get(), weir.base);
    await act('git-undo');
    await waitState('git', 'needed');
    assert.throws(get, 'http.proxy is unset again');
  });

  test('the GitHub token stored from the view turns its step done', async () => {
    await page.getByTestId('setup-token-input').fill('ghp_setupViewToken123');
    await page.getByTestId('setup-token-store').click();
    await waitState('token', 'done');
    const st = (await control(weir, 'GET', '/_weir/api/status', { secret: weir.secret })).json;
    assert.equal(JSON.stringify(st).includes('ghp_setupViewToken123'), false, 'the token is never sent back');
  });

  test('start at login writes the same entry the tray\'s check mark reads, and removes it', async () => {
    const entry = path.join(home, '.config', 'autostart', 'Weir.desktop');
    if ((await stateOf('login')) === 'not_possible') {
      // scripts/test.sh builds the tray next to weir first: there, this branch is a failure.
      assert.equal(process.env.WEIR_EXPECT_TRAY, undefined, 'weir-tray was built next to weir, yet the step is not possible');
      assert.match(await page.getByTestId('setup-detail-login').textContent(), /no tray app/);
      return;
    }
    await act('login');
    await waitState('login', 'done');
    assert.match(fs.readFileSync(entry, 'utf8'), /^Exec=\S*weir-tray$/m);
    await act('login-undo');
    await waitState('login', 'needed');
    assert.equal(fs.existsSync(entry), false);
  });

  test('the setup API needs the secret and refuses other origins and unknown actions', async () => {
    assert.equal((await control(weir, 'GET', '/_weir/api/setup')).status, 401);
    assert.equal((await control(weir, 'POST', '/_weir/api/setup/git')).status, 401);
    const foreign = await fetch(`${weir.base}/_weir/api/setup/git`, {
      method: 'POST', headers: { 'x-weir-secret': weir.secret, origin: 'http://evil.example' },
    });
    assert.equal(foreign.status, 403);
    const unknown = await control(weir, 'POST', '/_weir/api/setup/format-disk', { secret: weir.secret });
    assert.equal(unknown.status, 404);
    assert.match(unknown.type, /application\/problem\+json/);
    assert.match(unknown.json.detail, /no set-up action `format-disk`/);
    assert.equal(fs.existsSync(path.join(home, '.gitconfig')) && fs.readFileSync(path.join(home, '.gitconfig'), 'utf8').includes('proxy = '), false);
  });

  test('shown once: a reload does not open it, #view=setup and the Set up button do', async () => {
    const doc = (await control(weir, 'GET', '/_weir/api/setup', { secret: weir.secret })).json;
    assert.equal(doc.first_run, false);
    await page.reload();
    await page.getByTestId('overall-state').waitFor();
    await page.waitForLoadState('networkidle');
    assert.equal(await page.getByTestId('setup-section').isVisible(), false);
    await page.getByTestId('open-setup').click();
    await page.getByTestId('setup-step-keychain').waitFor();
    const url = new URL(page.url());
    await page.goto(`${url.origin}${url.pathname}#view=setup`);
    await page.reload();
    await page.getByTestId('setup-step-keychain').waitFor();
    assert.equal(await stateOf('ca_browsers'), 'done');
    assert.deepEqual(errors, []);
  });
});
