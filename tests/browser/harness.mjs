// Fixtures for the dashboard browser test: a real loopback upstream that counts requests and
// can be told to fail, a real `weir serve` process in front of it, and Debian's Chromium
// driven by playwright-core.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const OUT_DIR = path.join(REPO, 'out');
export const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
export const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  // Never touch a keyring (the test may run inside a private Secret Service session).
  '--password-store=basic',
];

/** A page on the upstream's origin: a different origin from Weir (other port). */
const EVIL_HTML = '<!doctype html><meta charset="utf-8"><title>another origin</title><p>not Weir</p>';

/**
 * The fake upstream. `behaviour.status` is what it answers (200 by default); `behaviour.delayMs`
 * makes it slow. `seen` records every request it got.
 */
export async function startUpstream() {
  const behaviour = { status: 200, delayMs: 0 };
  const seen = [];
  let jobs = 0;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/evil.html') {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end(EVIL_HTML);
        return;
      }
      seen.push({ method: req.method, url: req.url, body: Buffer.concat(chunks).toString() });
      const reply = () => {
        if (res.destroyed) return;
        if (behaviour.status !== 200) {
          res.writeHead(behaviour.status, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ message: 'upstream told to fail' }));
          return;
        }
        const created = req.method === 'POST';
        if (created) jobs += 1;
        res.writeHead(created ? 201 : 200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(created ? { job_id: `job-${jobs}` } : { path: req.url, n: seen.length }));
      };
      if (behaviour.delayMs > 0) setTimeout(reply, behaviour.delayMs);
      else reply();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    behaviour,
    seen,
    close: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve());
    }),
  };
}

/** A port that was free a moment ago (Weir's config wants a fixed port). */
export async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/**
 * Starts `weir serve` with its own config and data dir (plus `extraConfig` TOML after the
 * upstream; `env` for the process); resolves once it printed the dashboard line. Returns the dashboard URL (with `#secret=` when Weir printed one).
 */
export async function startWeir(bin, upstreamPort, extraConfig = '', { origin, connectTo, env = {} } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-ui-test-'));
  const port = await freePort();
  const config = path.join(dir, 'config.toml');
  fs.writeFileSync(config, [
    `listen = "127.0.0.1:${port}"`,
    "default_upstreams = false",
    '',
    '[[upstream]]',
    'name = "test"',
    `origin = "${origin ?? `http://127.0.0.1:${upstreamPort}`}"`,
    ...(connectTo ? [`connect_to = "${connectTo}"`] : []),
    '',
    extraConfig,
  ].join('\n'));
  // Its stdout is a pipe: the dashboard link carries the secret only when asked to.
  const args = ['serve', '--print-secret', '--config', config, '--data-dir', path.join(dir, 'data')];
  const keychain = keychainWrapper();
  // detached: Weir (and, when wrapped, its private bus and keyring) get their own process group,
  // so stop() can end exactly the processes this test started.
  const child = spawn(keychain ?? bin, keychain ? [bin, ...args] : args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    // `env` overrides (a value of undefined removes the variable), e.g. a temporary HOME.
    env: Object.fromEntries(Object.entries({ ...process.env, WEIR_LOG: process.env.WEIR_LOG || 'weir=warn', ...env }).filter(([, v]) => v !== undefined)),
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const dashboard = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`weir serve printed no dashboard line within 30 s.\nstdout:\n${stdout}\nstderr:\n${stderr}`)), 30_000);
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/weir: dashboard and control API at (\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`weir serve exited with ${code} before it was ready.\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
  const secret = new URLSearchParams(new URL(dashboard).hash.slice(1)).get('secret');
  return {
    port,
    dir,
    // The file Weir was started with (`--config`): the settings panel saves into it.
    config,
    dashboard,
    secret,
    base: `http://127.0.0.1:${port}`,
    logs: () => ({ stdout, stderr }),
    keychain: Boolean(keychain),
    async stop() {
      signalGroup(child.pid, 'SIGTERM');
      const gone = await until('weir to stop', async () => !signalGroup(child.pid, 0), { timeoutMs: 10_000 }).catch(() => false);
      if (!gone) signalGroup(child.pid, 'SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Weir keeps queued creates' credentials in the OS keychain; on a headless box that needs a
 * Secret Service. Unless the test already runs inside one (scripts/with-keychain.sh sets
 * WEIR_KEYCHAIN_BUS), Weir is started through that script: a private D-Bus session with a
 * throwaway, unlocked gnome-keyring that never touches the developer's own keyring.
 */
function keychainWrapper() {
  if (process.env.WEIR_KEYCHAIN_BUS || process.env.WEIR_TEST_NO_KEYCHAIN) return null;
  const script = path.join(REPO, 'scripts', 'with-keychain.sh');
  const onPath = (tool) => (process.env.PATH || '').split(':').some((d) => d && fs.existsSync(path.join(d, tool)));
  return fs.existsSync(script) && onPath('dbus-run-session') && onPath('gnome-keyring-daemon') ? script : null;
}

/** Signals a whole process group; false once the group is gone. */
function signalGroup(pid, signal) {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * One request through Weir as an HTTP proxy (absolute-form request line), the way `gh` or
 * VS Code send plain-http traffic with HTTP_PROXY set.
 */
export function viaProxy(weirPort, upstreamPort, { method = 'GET', path: p, body, headers = {} }) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const req = http.request({
      host: '127.0.0.1',
      port: weirPort,
      method,
      path: `http://127.0.0.1:${upstreamPort}${p}`,
      headers: {
        host: `127.0.0.1:${upstreamPort}`,
        authorization: 'token a',
        ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
        ...headers,
      },
      agent: false,
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** A control-API call from Node (same as the tray would make). */
export async function control(weir, method, p, { body, secret } = {}) {
  const headers = {};
  if (secret) headers['x-weir-secret'] = secret;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(weir.base + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, type: res.headers.get('content-type') || '', json, text };
}

export async function until(what, fn, { timeoutMs = 15_000, everyMs = 100 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A dashboard link opened at one of its views (`#view=NAME`), keeping a `#secret=` it carries. */
export function atView(link, view) {
  return `${link}${link.includes('#') ? '&' : '#'}view=${view}`;
}
