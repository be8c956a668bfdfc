// The drift report of scripts/check-clients.sh (its header states the rules). Reads the URLs
// build-urls.mjs built, their classes from `weir routes --classify`, the corpus, the
// acknowledged list (known.json) and the versions; prints the report; exits 1 on drift.
// Usage: node report.mjs <built.jsonl> <classified.tsv> <calls.json> <known.json> <versions.json>
import { readFileSync } from 'node:fs';

const [builtFile, classFile, corpusFile, knownFile, versionsFile] = process.argv.slice(2);
const lines = (f) => readFileSync(f, 'utf8').split('\n').filter((l) => l.trim());
const built = lines(builtFile).map((l) => JSON.parse(l));
const corpus = JSON.parse(readFileSync(corpusFile));
const known = JSON.parse(readFileSync(knownFile)).urls;
const versions = JSON.parse(readFileSync(versionsFile));
const fill = (s) => s.replace(/\{([a-z_]+)\}/g, (m, k) => corpus.vars[k] ?? m);
const pathOf = (pq) => fill(pq).split('?')[0];

// `METHOD URL<TAB>class<TAB>upstream` → class, by `METHOD URL`.
const classOf = new Map(lines(classFile).map((l) => {
  const [req, cls, upstream] = l.split('\t');
  return [req, { cls, upstream }];
}));
const FAMILIES = ['/agents', '/cmc_internal', '/copilot_internal'];
const agentFamily = (p) => FAMILIES.some((f) => p === f || p.startsWith(`${f}/`));

const drift = [];
const acknowledged = [];
const managed = [];
const notAgent = [];
const unmanaged = [];

for (const v of versions.packages) {
  if (v.newer) drift.push(`new version: ${v.name} ${v.installed} (pinned ${v.pinned})`);
}
for (const b of built) {
  if (b.unknown_type) drift.push(`new request type in @vscode/copilot-api: ${b.unknown_type} (built with no arguments below, if it could be)`);
  else if (b.error) drift.push(`${b.type}${b.variant ? ` (${b.variant})` : ''}: the package did not build it: ${b.error}`);
}
const seen = new Set();
for (const b of built.filter((x) => x.url)) {
  const req = `${b.method} ${b.url}`;
  if (seen.has(req)) continue;
  seen.add(req);
  const u = new URL(b.url);
  const path = u.pathname;
  const name = `${b.type}${b.variant ? ` (${b.variant})` : ''}`;
  const c = classOf.get(req);
  if (!c) { drift.push(`${req}: weir routes --classify gave no class`); continue; }
  const row = `${b.method.padEnd(6)} ${b.url}  ${c.cls}  [${name}]`;
  if (c.cls === 'unmanaged') { unmanaged.push(row); continue; }
  if (!agentFamily(path)) { notAgent.push(row); continue; }
  const inCorpus = corpus.calls.filter((x) => x.method === b.method && `${x.host}` === u.host && pathOf(x.path_and_query) === path);
  const inCorpusAnyHost = corpus.calls.filter((x) => x.method === b.method && pathOf(x.path_and_query) === path);
  const ack = known.find((k) => k.method === b.method && fill(k.path) === path);
  if (ack && !inCorpusAnyHost.length) {
    acknowledged.push(`${row}  — ${ack.why}`);
    if (c.cls !== 'other') drift.push(`${req}: acknowledged in known.json as passed through, but Weir classes it ${c.cls}`);
    continue;
  }
  managed.push(row);
  if (!inCorpusAnyHost.length) {
    drift.push(`${req}: not in tests/corpus/calls.json (by method and path) [${name}], Weir classes it ${c.cls}`);
    continue;
  }
  const classes = new Set(inCorpusAnyHost.map((x) => x.class));
  if (c.cls === 'other' && !classes.has('other')) {
    drift.push(`${req}: Weir classes it other, the corpus says ${[...classes].join('/')} [${name}]`);
  } else if (!classes.has(c.cls)) {
    drift.push(`${req}: Weir classes it ${c.cls}, the corpus says ${[...classes].join('/')} [${name}]`);
  }
  if (!inCorpus.length) drift.push(`${req}: in the corpus only for another host (${inCorpusAnyHost.map((x) => x.host).join(', ')})`);
}

const out = [];
out.push(`Packages: ${versions.packages.map((v) => `${v.name} ${v.installed}${v.newer ? ` (pinned ${v.pinned}: NEW)` : v.installed === v.pinned ? ' (pinned)' : ` (pinned ${v.pinned})`}`).join(', ')}`);
out.push('', `Agent-API calls the package builds, with Weir's class (${managed.length}):`, ...managed.map((r) => `  ${r}`));
out.push('', `Acknowledged agent-family URLs, not cloud-session calls (known.json; ${acknowledged.length}):`, ...acknowledged.map((r) => `  ${r}`));
out.push('', `Other calls the package builds on hosts Weir manages (not agent calls; classified, not flagged; ${notAgent.length}):`, ...notAgent.map((r) => `  ${r}`));
out.push('', `On hosts Weir does not manage (tunnelled untouched; ${unmanaged.length}):`, ...unmanaged.map((r) => `  ${r}`));
if (versions.cli_fragments) {
  out.push('', `@github/copilot ${versions.cli_version}: seen path fragments in its code (not classified: the closed binary assembles its URLs; ${versions.cli_fragments.length}):`);
  out.push(...versions.cli_fragments.map((f) => `  ${f}`));
} else if (versions.cli_note) {
  out.push('', `@github/copilot: ${versions.cli_note}`);
}
out.push('');
if (drift.length) {
  out.push(`DRIFT (${drift.length}):`, ...drift.map((d) => `  ${d}`));
} else {
  out.push('No drift: every agent-API URL the package builds is in the corpus with the class Weir gives it.');
}
console.log(out.join('\n'));
process.exit(drift.length ? 1 : 0);
