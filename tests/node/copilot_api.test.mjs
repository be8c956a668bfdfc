// VS Code's agent calls built by the real @vscode/copilot-api (the version VS Code's Copilot Chat
// pins), checked against tests/corpus/calls.json: URL (host, path, query exactly as encoded),
// method, the headers the package and the extension set, the body, and the paging. The package
// runs unchanged with its own fetcher; only the global fetch is replaced by a recorder, so
// nothing leaves the process. Each request is made as src/platform/github/common/
// octoKitServiceImpl.ts (microsoft/vscode-copilot-chat@31acd00a) makes it.
// Run: node --test tests/node/ (tests/real_clients.rs does).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as pinned from '@vscode/copilot-api';
import * as latest from 'copilot-api-latest';

const corpus = JSON.parse(readFileSync(new URL('../corpus/calls.json', import.meta.url)));
const vars = corpus.vars;
const fill = (s) => s.replace(/\{([a-z_]+)\}/g, (m, k) => {
  assert.ok(k in vars, `no value for placeholder ${m}`);
  return vars[k];
});
const call = (id) => {
  const c = corpus.calls.find((x) => x.id === id);
  assert.ok(c, `no corpus call ${id}`);
  return c;
};

// What the extension passes per call (octoKitServiceImpl.ts / copilotTokenManager.ts), keyed
// by corpus id: [request options, request metadata].
function requests(RequestType) {
  const bearer = { Authorization: `Bearer ${vars.github_token}` };
  const get = () => ({ method: 'GET', headers: { ...bearer } });
  const { owner, repo } = vars;
  const nwo = `${owner}/${repo}`;
  return {
    'vscode.list.repo': [get(), { type: RequestType.CopilotSessions, nwo, resourceState: undefined }],
    'vscode.list.repo_open': [get(), { type: RequestType.CopilotSessions, nwo, resourceState: 'draft,open' }],
    'vscode.list.all_open': [get(), { type: RequestType.CopilotSessions, nwo: undefined, resourceState: 'draft,open' }],
    'vscode.session': [get(), { type: RequestType.CopilotSessionDetails, sessionId: vars.session_id }],
    'vscode.pr_sessions': [get(), { type: RequestType.CopilotSessions, prId: vars.pr_id }],
    'vscode.logs': [get(), { type: RequestType.CopilotSessionLogs, sessionId: vars.session_id }],
    'vscode.job_by_session': [get(), { type: RequestType.CopilotAgentJob, owner, repo, sessionId: vars.session_id }],
    'vscode.job_poll': [get(), { type: RequestType.CopilotAgentJob, owner, repo, jobId: vars.job_id }],
    'vscode.create': [
      { method: 'POST', body: JSON.stringify(call('vscode.create').body), headers: { ...bearer } },
      { type: RequestType.CopilotAgentJob, owner, repo, apiVersion: 'v1', payload: call('vscode.create').body },
    ],
    'vscode.enabled': [get(), { type: RequestType.CopilotAgentJobEnabled, owner, repo }],
    'vscode.custom_agents': [get(), {
      type: RequestType.CopilotCustomAgents, owner, repo,
      target: undefined, exclude_invalid_config: true, dedupe: undefined, include_sources: undefined,
    }],
    'vscode.custom_agent': [get(), {
      type: RequestType.CopilotCustomAgentsDetail, owner, repo, version: undefined, customAgentName: 'my-agent',
    }],
    'vscode.cca_models': [get(), { type: RequestType.CCAModelsList }],
    'vscode.token': [
      { headers: { Authorization: `token ${vars.github_token}`, 'X-GitHub-Api-Version': '2025-04-01' } },
      { type: RequestType.CopilotToken },
    ],
    'vscode.copilot_user': [
      { headers: { Authorization: `token ${vars.github_token}`, 'X-GitHub-Api-Version': '2025-04-01' } },
      { type: RequestType.CopilotUserInfo },
    ],
  };
}

// Replaces the global fetch with a recorder. Session lists answer full pages of `pageSize`
// items `fullPages` times, then a short page: the package must stop there by itself.
function record({ pageSize = 20, fullPages = 1 } = {}) {
  const seen = [];
  const real = globalThis.fetch;
  globalThis.fetch = async (url, init = {}) => {
    seen.push({ url: String(url), method: init.method ?? 'GET', headers: { ...(init.headers ?? {}) }, body: init.body });
    const u = new URL(String(url));
    let body = {};
    if (u.pathname === '/agents/sessions') {
      const page = Number(u.searchParams.get('page_number'));
      const n = page <= fullPages ? pageSize : 3;
      body = { sessions: Array.from({ length: n }, (_, i) => ({ id: `s-${page}-${i}` })) };
    }
    return new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
  };
  return { seen, restore: () => { globalThis.fetch = real; } };
}

function client(pkg) {
  // No license string: the package then names itself `code-oss` (a development build), so
  // nobody accepts its terms on anyone's behalf here. A licensed production build of the
  // extension sends `vscode-chat` instead, as the corpus records.
  const c = new pkg.CAPIClient({
    name: 'copilot-chat',
    sessionId: vars.vscode_session,
    machineId: vars.machine_id,
    deviceId: vars.device_id,
    vscodeVersion: vars.vscode_version,
    version: vars.chat_version,
    buildType: 'prod',
  }, undefined);
  // The token answer names the per-plan host (endpoints.api), as the fake's does.
  c.updateDomains({ endpoints: { api: `https://${call('vscode.session').host}` }, sku: 'copilot_for_individuals' }, undefined);
  return c;
}

const lower = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));

test('every VS Code call in the corpus is what @vscode/copilot-api 0.2.18 builds', async () => {
  const reqs = requests(pinned.RequestType);
  const vscodeIds = corpus.calls.filter((c) => c.client === 'vscode').map((c) => c.id);
  assert.deepEqual(Object.keys(reqs).sort(), vscodeIds.sort(), 'every corpus entry is built here, and only those');
  for (const id of vscodeIds) {
    const entry = call(id);
    const rec = record();
    try {
      const [options, meta] = reqs[id];
      await client(pinned).makeRequest(structuredClone(options), meta);
    } finally {
      rec.restore();
    }
    assert.ok(rec.seen.length >= 1, `${id}: nothing sent`);
    const first = rec.seen[0];
    assert.equal(first.url, `https://${entry.host}${fill(entry.path_and_query)}`, `${id}: URL`);
    assert.equal(first.method, entry.method, `${id}: method`);
    const sent = lower(first.headers);
    const want = lower(Object.fromEntries(Object.entries(entry.headers).map(([k, v]) => [k, fill(v)])));
    assert.deepEqual(Object.keys(sent).sort(), Object.keys(want).sort(), `${id}: the headers set`);
    for (const [k, v] of Object.entries(want)) {
      if (k === 'copilot-integration-id') {
        assert.equal(v, 'vscode-chat', `${id}: the corpus records the licensed build`);
        assert.equal(sent[k], 'code-oss', `${id}: unlicensed, the package says code-oss`);
      } else {
        assert.equal(sent[k], v, `${id}: ${k}`);
      }
    }
    if (entry.body) {
      assert.deepEqual(JSON.parse(first.body), entry.body, `${id}: body`);
    }
  }
});

test('VS Code pages the session list by page_number/page_size and stops at a short page', async () => {
  const rec = record({ pageSize: 20, fullPages: 2 });
  let items;
  try {
    const [options, meta] = requests(pinned.RequestType)['vscode.list.repo'];
    items = await client(pinned).makeRequest(options, meta);
  } finally {
    rec.restore();
  }
  const pages = rec.seen.map((s) => new URL(s.url).searchParams);
  assert.deepEqual(pages.map((p) => p.get('page_number')), ['1', '2', '3']);
  assert.ok(pages.every((p) => p.get('page_size') === '20'));
  assert.equal(items.length, 20 + 20 + 3, 'all items of all pages, without any has_next_page');
  assert.equal(rec.seen[1].url, `https://${call('vscode.list.repo').host}${fill(call('vscode.list.repo').path_and_query).replace('page_number=1', 'page_number=2')}`);
});

test('the newest @vscode/copilot-api builds the same URLs (its headers may differ)', async () => {
  const reqsPinned = requests(pinned.RequestType);
  const reqsLatest = requests(latest.RequestType);
  for (const id of Object.keys(reqsPinned)) {
    const urls = [];
    for (const [pkg, reqs] of [[pinned, reqsPinned], [latest, reqsLatest]]) {
      const rec = record();
      try {
        const [options, meta] = reqs[id];
        await client(pkg).makeRequest(structuredClone(options), meta);
      } finally {
        rec.restore();
      }
      urls.push([rec.seen[0].url, lower(rec.seen[0].headers)['x-github-api-version']]);
    }
    assert.equal(urls[1][0], urls[0][0], `${id}: URL differs between 0.2.18 and the newest`);
    if (urls[1][1] !== urls[0][1]) {
      console.log(`${id}: X-GitHub-Api-Version ${urls[0][1]} (0.2.18) -> ${urls[1][1]} (newest)`);
    }
  }
});
