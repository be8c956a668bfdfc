// VS Code's agent calls built by the real @vscode/copilot-api 0.5.2 (the version microsoft/vscode's
// extensions/copilot depends on, ^0.5.2), checked against tests/corpus/calls.json for both
// cloud-session backends:
// - v1 (`vscode` entries: the jobs and sessions API on the Copilot API host), each request made
//   as octoKitServiceImpl.ts / copilotTokenManager.ts make it;
// - v2, the Task API (`vscode-tasks` entries on api.github.com/cmc_internal/api/agents), each
//   request made as VS Code's TaskApiHttpClient (extensions/copilot/src/extension/chatSessions/
//   vscode-node/taskApiBackend.ts) makes it: `makeRequest(init, {type: AgentTask, action, owner,
//   repo, taskId, searchParams})` with the method and headers that client sets.
// Checked: URL (host, path, query exactly as encoded), method, the headers (the package's own and
// the extension's), the body, and the paging. The package runs unchanged with its own fetcher;
// only the global fetch is replaced by a recorder, so nothing leaves the process.
// Run: node --test tests/node/ (tests/real_clients.rs does).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as capi from '@vscode/copilot-api';

const PINNED = '0.5.2';
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

// v1: what the extension passes per call (octoKitServiceImpl.ts / copilotTokenManager.ts), keyed
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

// v2: what TaskApiBackend asks TaskApiHttpClient for, keyed by corpus id: [method, action,
// {owner, repo, taskId, body, searchParams}]. vscode.tasks.user is octoKit's GET /user, not
// built by the package, so it is not here.
function taskRequests() {
  const { owner, repo } = vars;
  const taskId = vars.session_id;
  return {
    'vscode.tasks.list': ['GET', 'list', { searchParams: { per_page: 100 } }],
    'vscode.tasks.list_repo': ['GET', 'list-for-repo', { owner, repo, searchParams: { per_page: 100, creator_id: 1001 } }],
    'vscode.tasks.by_pr': ['GET', 'list-for-repo', {
      owner, repo,
      searchParams: { artifact_type: 'pull', artifact_id: Number(vars.pr_id), sort: 'created_at', direction: 'desc', per_page: 1 },
    }],
    'vscode.tasks.get': ['GET', 'get', { taskId }],
    'vscode.tasks.events': ['GET', 'events', { taskId, searchParams: { per_page: 100, page: 1 } }],
    'vscode.tasks.create': ['POST', 'create', { owner, repo, body: call('vscode.tasks.create').body }],
    'vscode.tasks.steer': ['POST', 'steer', { taskId, body: call('vscode.tasks.steer').body }],
    'vscode.tasks.pulls': ['POST', 'create-pr', { owner, repo, taskId }],
    'vscode.tasks.archive': ['POST', 'archive', { taskId }],
    'vscode.tasks.unarchive': ['POST', 'unarchive', { taskId }],
  };
}

// One Task API request as TaskApiHttpClient._request sends it: Bearer GitHub token and Accept
// always, Content-Type and a JSON body only with a body; the metadata carries only the parts
// that are set.
function taskRequest(RequestType, [method, action, opts]) {
  const init = { method, headers: { Authorization: `Bearer ${vars.github_token}`, Accept: 'application/json' } };
  if (opts.body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  const meta = { type: RequestType.AgentTask, action };
  for (const k of ['owner', 'repo', 'taskId', 'searchParams']) {
    if (opts[k] !== undefined) meta[k] = opts[k];
  }
  return [init, meta];
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

function client() {
  // No license string (the package's licence limits its use to VS Code and Code-OSS): the
  // package then names itself `code-oss` (a development build), so nobody accepts its terms on
  // anyone's behalf here. A licensed production build of the extension sends `vscode-chat`
  // instead, as the corpus records. No fetcher (the package's own, over the global fetch), no
  // HMAC secret, no integration id (0.5.2 refuses `vscode-chat` and `code-oss` there).
  const c = new capi.CAPIClient({
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

async function send(options, meta) {
  const rec = record();
  try {
    await client().makeRequest(structuredClone(options), meta);
  } finally {
    rec.restore();
  }
  return rec.seen;
}

const lower = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));
const wanted = (entry) => lower(Object.fromEntries(Object.entries(entry.headers).map(([k, v]) => [k, fill(v)])));

test(`the pinned @vscode/copilot-api is ${PINNED}`, () => {
  const pkg = JSON.parse(readFileSync(new URL('./node_modules/@vscode/copilot-api/package.json', import.meta.url)));
  assert.equal(pkg.version, PINNED);
});

test(`every VS Code v1 call in the corpus is what @vscode/copilot-api ${PINNED} builds`, async () => {
  const reqs = requests(capi.RequestType);
  const vscodeIds = corpus.calls.filter((c) => c.client === 'vscode').map((c) => c.id);
  assert.deepEqual(Object.keys(reqs).sort(), vscodeIds.sort(), 'every corpus entry is built here, and only those');
  for (const id of vscodeIds) {
    const entry = call(id);
    const seen = await send(...reqs[id]);
    assert.ok(seen.length >= 1, `${id}: nothing sent`);
    const first = seen[0];
    assert.equal(first.url, `https://${entry.host}${fill(entry.path_and_query)}`, `${id}: URL`);
    assert.equal(first.method, entry.method, `${id}: method`);
    const sent = lower(first.headers);
    const want = wanted(entry);
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

test(`every VS Code Task API call in the corpus is what @vscode/copilot-api ${PINNED} builds`, async () => {
  const reqs = taskRequests();
  const ids = corpus.calls.filter((c) => c.client === 'vscode-tasks' && c.id !== 'vscode.tasks.user').map((c) => c.id);
  assert.deepEqual(Object.keys(reqs).sort(), ids.sort(), 'every corpus entry is built here, and only those');
  for (const id of ids) {
    const entry = call(id);
    const seen = await send(...taskRequest(capi.RequestType, reqs[id]));
    assert.equal(seen.length, 1, `${id}: one request`);
    const [first] = seen;
    assert.equal(first.url, `https://${entry.host}${fill(entry.path_and_query)}`, `${id}: URL`);
    assert.equal(first.method, entry.method, `${id}: method`);
    // Exactly TaskApiHttpClient's headers: the package adds none to AgentTask requests (no API
    // version, no editor headers, no integration id).
    assert.deepEqual(lower(first.headers), wanted(entry), `${id}: headers`);
    if (entry.body) {
      assert.equal(lower(first.headers)['content-type'], 'application/json', `${id}: a body is JSON`);
      assert.deepEqual(JSON.parse(first.body), entry.body, `${id}: body`);
    } else {
      assert.equal(first.body, undefined, `${id}: no body`);
      assert.ok(!('content-type' in lower(first.headers)), `${id}: no Content-Type without a body`);
    }
  }
});

test('the Task API stays on the GitHub API host whatever Copilot API host the token names', async () => {
  // updateDomains moved the v1 calls to the per-plan host (checked above); the Task API's base
  // is the dotcom API, so a per-plan host never reaches it.
  const seen = await send(...taskRequest(capi.RequestType, taskRequests()['vscode.tasks.get']));
  assert.equal(new URL(seen[0].url).host, 'api.github.com');
  assert.equal(new URL(seen[0].url).pathname, `/cmc_internal/api/agents/tasks/${vars.session_id}`);
});

test('VS Code pages the session list by page_number/page_size and stops at a short page', async () => {
  const rec = record({ pageSize: 20, fullPages: 2 });
  let items;
  try {
    const [options, meta] = requests(capi.RequestType)['vscode.list.repo'];
    items = await client().makeRequest(options, meta);
  } finally {
    rec.restore();
  }
  const pages = rec.seen.map((s) => new URL(s.url).searchParams);
  assert.deepEqual(pages.map((p) => p.get('page_number')), ['1', '2', '3']);
  assert.ok(pages.every((p) => p.get('page_size') === '20'));
  assert.equal(items.length, 20 + 20 + 3, 'all items of all pages, without any has_next_page');
  assert.equal(rec.seen[1].url, `https://${call('vscode.list.repo').host}${fill(call('vscode.list.repo').path_and_query).replace('page_number=1', 'page_number=2')}`);
});
