// Builds every URL an installed @vscode/copilot-api can build, for scripts/check-clients.sh:
// each RequestType (and each AgentTask action, read from the package's own switch) with
// placeholder arguments, through the package's unchanged CAPIClient.makeRequest, with a
// recording fetcher so nothing leaves the process. Prints one JSON object a line:
//   {"type", "variant", "method", "url"}   a URL the package built
//   {"type", "variant", "error"}           a request type the package refused with these arguments
//   {"unknown_type": T}                    a RequestType this script has no arguments for (new)
// Usage: node build-urls.mjs <dir whose node_modules holds @vscode/copilot-api> <vars.json>
// The placeholders are the corpus's vars (tests/corpus/calls.json), so a built path can be
// compared with the corpus's paths as they are filled.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [root, varsFile] = process.argv.slice(2);
const pkgDir = join(root, 'node_modules/@vscode/copilot-api');
const pkgJson = JSON.parse(readFileSync(join(pkgDir, 'package.json')));
const main = join(pkgDir, pkgJson.main ?? 'dist/index.js');
const { CAPIClient, RequestType } = await import(pathToFileURL(main));
const vars = JSON.parse(readFileSync(varsFile));

const seen = [];
const fetcher = {
  async fetch(url, opts = {}) {
    seen.push({ url: String(url), method: opts.method });
    return new Response('{}', { status: 200, headers: { 'content-type': 'application/json' } });
  },
  async fetchWithPagination(url, opts = {}) {
    seen.push({ url: String(opts.buildUrl ? opts.buildUrl(url, opts.pageSize ?? 20, 1) : url), method: opts.method });
    return [];
  },
  createWebSocket(url) {
    seen.push({ url: String(url), method: 'GET' });
    return {};
  },
};

// The package's licence limits its use to VS Code and Code-OSS: the client is made without the
// licence string (it then names itself code-oss), with no HMAC secret and no integration id,
// as tests/node/copilot_api.test.mjs makes it. Only URLs are built; nothing is sent.
const client = new CAPIClient({
  name: 'copilot-chat', sessionId: 's', machineId: 'm', deviceId: 'd',
  vscodeVersion: vars.vscode_version, version: vars.chat_version, buildType: 'prod',
}, undefined, fetcher);
// A per-plan host, as a Copilot token names it, so the CAPI URLs land where clients send them.
client.updateDomains({ endpoints: { api: 'https://api.individual.githubcopilot.com' }, sku: 'copilot_for_individuals' }, undefined);

const { owner, repo } = vars;
const T = RequestType;
const get = 'GET';
const post = 'POST';
// [variant, method the caller passes, metadata]. Methods are the callers' (the package takes
// the method from the request options); POST where the call sends a body.
const plan = {
  CopilotToken: [['', get, {}]],
  CopilotNLToken: [['', get, {}]],
  ChatCompletions: [['', post, {}], ['model lab', post, { isModelLab: true }]],
  ChatResponses: [['', post, {}]],
  ChatMessages: [['', post, {}]],
  ProxyCompletions: [['', post, {}]],
  ProxyChatCompletions: [['', post, {}]],
  RemoteAgent: [['', post, {}]],
  RemoteAgentChat: [['', post, {}], ['slug', post, { slug: 'my-agent' }]],
  CodeReviewAgent: [['', post, {}]],
  CAPIEmbeddings: [['', post, {}]],
  DotcomEmbeddings: [['', post, {}]],
  EmbeddingsModels: [['', get, {}]],
  Models: [['', get, {}], ['model lab', get, { isModelLab: true }]],
  AutoModels: [['', get, {}]],
  Chunks: [['', post, {}]],
  EmbeddingsCodeSearch: [['', post, {}]],
  ListSkills: [['', get, {}]],
  SearchSkill: [['', post, { slug: 'my-skill' }]],
  ContentExclusion: [['', get, { repos: [`${owner}/${repo}`] }]],
  Telemetry: [['', post, {}]],
  CopilotUserInfo: [['', get, {}]],
  ModelPolicy: [['', post, { modelId: 'gpt-x' }]],
  ListModel: [['', get, { modelId: 'gpt-x' }]],
  SnippyMatch: [['', post, {}]],
  SnippyFilesForMatch: [['', post, {}]],
  CodingGuidelines: [['', get, { repoWithOwner: `${owner}/${repo}` }]],
  EmbeddingsIndex: [['', get, { repoWithOwner: `${owner}/${repo}` }]],
  ChatAttachmentUpload: [['', post, { uploadName: 'a.png', mimeType: 'image/png' }]],
  CopilotSessionLogs: [['', get, { sessionId: vars.session_id }]],
  CopilotSessionDetails: [['', get, { sessionId: vars.session_id }]],
  CopilotSessions: [
    ['all', get, {}], ['repo', get, { nwo: `${owner}/${repo}` }],
    ['open', get, { nwo: `${owner}/${repo}`, resourceState: 'draft,open' }], ['pr', get, { prId: vars.pr_id }],
  ],
  CopilotAgentJob: [
    ['create', post, { owner, repo, payload: { problem_statement: 'p', event_type: 'e', event_content: 'p' } }],
    ['job', get, { owner, repo, jobId: vars.job_id }],
    ['by session', get, { owner, repo, sessionId: vars.session_id }],
  ],
  CCAModelsList: [['', get, {}]],
  CopilotCustomAgents: [['', get, { owner, repo, exclude_invalid_config: true }]],
  CopilotCustomAgentsDetail: [['', get, { owner, repo, customAgentName: 'my-agent' }]],
  OrgCustomInstructions: [['', get, { orgLogin: owner }]],
  CopilotAgentMemory: [
    ['', get, { repo: `${owner}/${repo}` }], ['search', get, { repo: `${owner}/${repo}`, action: 'search', limit: 5 }],
    ['recent', get, { repo: `${owner}/${repo}`, action: 'recent' }], ['enabled', get, { repo: `${owner}/${repo}`, action: 'enabled' }],
  ],
  CopilotAgentJobEnabled: [['', get, { owner, repo }]],
  ModelRouter: [['', post, {}]],
  Auto: [['', post, {}]],
};

// AgentTask: every action in the package's own URL switch (so a new action shows up), each with
// every argument it may need; the method is the one VS Code's TaskApiHttpClient uses, POST for
// the actions it does not know.
const src = readFileSync(main, 'utf8');
const at = src.search(/_buildAgentTaskURL\(\w+\)\{/); // the definition, not a call
const fn = at < 0 ? '' : src.slice(at, at + 4000);
const actions = [...fn.slice(0, fn.indexOf('default:') > 0 ? fn.indexOf('default:') : fn.length).matchAll(/case"([a-z-]+)"/g)].map((m) => m[1]);
const taskGets = new Set(['list', 'list-for-repo', 'get', 'events']);
plan.AgentTask = (actions.length ? actions : ['create', 'list', 'list-for-repo', 'get', 'events', 'steer', 'create-pr', 'archive', 'unarchive'])
  .map((action) => [action, taskGets.has(action) ? get : post, { action, owner, repo, taskId: vars.session_id }]);
if (!actions.length) console.log(JSON.stringify({ unknown_type: 'AgentTask (its action switch was not found; the known actions were built)' }));

for (const type of Object.values(RequestType)) {
  const key = Object.keys(RequestType).find((k) => RequestType[k] === type);
  const variants = plan[key];
  if (!variants) console.log(JSON.stringify({ unknown_type: key }));
  for (const [variant, method, meta] of variants ?? [['(no arguments)', get, {}]]) {
    seen.length = 0;
    try {
      await client.makeRequest({ method, headers: {} }, { type, ...meta });
      for (const s of seen) console.log(JSON.stringify({ type: key, variant, method: s.method ?? method, url: s.url }));
      if (!seen.length) console.log(JSON.stringify({ type: key, variant, error: 'nothing sent' }));
    } catch (e) {
      console.log(JSON.stringify({ type: key, variant, error: String(e?.message ?? e).split('\n')[0] }));
    }
  }
}
