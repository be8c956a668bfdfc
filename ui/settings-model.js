// What the Settings form edits, without any DOM: the editable fields, the form values taken
// from `GET /_weir/api/settings`, and the patch that holds only what the user changed (the
// engine rewrites just those keys in the config file and keeps everything else).

export const CLASSES = [
  { id: 'list', label: 'List calls' },
  { id: 'view', label: 'View calls' },
];

export const CLASS_KNOBS = [
  { id: 'fresh_ttl', label: 'Fresh for', hint: 'How long a cached answer is served without asking GitHub' },
  { id: 'stale_while_revalidate', label: 'Then stale while revalidating', hint: 'How long a stale answer may still be served while Weir refreshes it (after waiting up to revalidate_wait for the refresh)' },
  { id: 'stale_if_error', label: 'Stale if GitHub fails', hint: 'How long a stale answer may stand in when GitHub errors or the breaker is open' },
  { id: 'slow_call', label: 'Slow call above', hint: 'Calls slower than this count as slow for the circuit breaker' },
];

/** `kind`: `fraction` (0–1], `count` (whole number ≥ 1) or `duration` ("5s"). */
export const BREAKER_FIELDS = [
  { id: 'failure_rate_threshold', label: 'Open at failure rate', kind: 'fraction', hint: 'Share of recent calls that failed, 0–1 (0.5 = 50%)' },
  { id: 'slow_call_rate_threshold', label: 'Open at slow-call rate', kind: 'fraction', hint: 'Share of recent calls that were slow, 0–1' },
  { id: 'minimum_calls', label: 'Minimum calls', kind: 'count', hint: 'Calls in the window before the rates count' },
  { id: 'open_wait', label: 'Wait before probing', kind: 'duration', hint: 'How long the breaker stays open before it lets probes through' },
  { id: 'half_open_probes', label: 'Probes when half open', kind: 'count', hint: 'Successful probes needed to close again' },
];

const text = (v) => (v === undefined || v === null ? '' : String(v).trim());

/** A client-side mistake, shaped like the problem documents the banner shows. */
export class FormError extends Error {
  constructor(detail) {
    super(detail);
    this.problem = { title: 'Check the settings', detail };
  }
}

/**
 * Form values (all strings, as the inputs hold them) from the `effective` part of
 * `GET /_weir/api/settings`. Missing parts become empty strings.
 */
export function fromEffective(effective) {
  const e = effective && typeof effective === 'object' ? effective : {};
  const ups = Array.isArray(e.upstreams) ? e.upstreams : [];
  const classes = {};
  for (const c of CLASSES) {
    classes[c.id] = {};
    for (const k of CLASS_KNOBS) classes[c.id][k.id] = text(e.classes?.[c.id]?.[k.id]);
  }
  const breaker = {};
  for (const f of BREAKER_FIELDS) breaker[f.id] = text(e.breaker?.[f.id]);
  return {
    upstreams: ups.map((u) => ({ name: text(u?.name), origin: text(u?.origin), fallback: text(u?.fallback) })),
    classes,
    breaker,
  };
}

function breakerValue(field, raw) {
  if (field.kind === 'duration') {
    if (!raw) throw new FormError(`breaker.${field.id} needs a duration such as "5s"`);
    return raw;
  }
  const n = Number(raw);
  if (raw === '' || !Number.isFinite(n)) throw new FormError(`breaker.${field.id} must be a number, got "${raw}"`);
  if (field.kind === 'count' && !Number.isInteger(n)) throw new FormError(`breaker.${field.id} must be a whole number, got ${raw}`);
  return n;
}

function sameNumber(a, b) {
  return a !== '' && b !== '' && Number(a) === Number(b);
}

/**
 * The PUT body for what differs between `base` and `cur` (both from `fromEffective` or the
 * form), or null when nothing changed. The upstream list is sent whole when any row changed,
 * since the engine replaces the list. Throws FormError for values that cannot be sent.
 */
export function diff(base, cur) {
  const patch = {};
  const rows = cur.upstreams.map((u) => ({ name: text(u.name), origin: text(u.origin), fallback: text(u.fallback) }));
  if (JSON.stringify(rows) !== JSON.stringify(base.upstreams)) {
    rows.forEach((u, i) => {
      if (!u.name || !u.origin) throw new FormError(`upstream ${i + 1} needs a name and an origin`);
    });
    const names = rows.map((u) => u.name);
    const dup = names.find((n, i) => names.indexOf(n) !== i);
    if (dup) throw new FormError(`two upstreams are named "${dup}"; names must be unique`);
    patch.upstreams = rows.map((u) => (u.fallback ? u : { name: u.name, origin: u.origin }));
  }
  for (const c of CLASSES) {
    for (const k of CLASS_KNOBS) {
      const v = text(cur.classes[c.id][k.id]);
      if (v === base.classes[c.id][k.id]) continue;
      if (!v) throw new FormError(`classes.${c.id}.${k.id} needs a duration such as "15s"`);
      patch.classes ??= {};
      patch.classes[c.id] ??= {};
      patch.classes[c.id][k.id] = v;
    }
  }
  for (const f of BREAKER_FIELDS) {
    const v = text(cur.breaker[f.id]);
    const was = base.breaker[f.id];
    if (v === was || (f.kind !== 'duration' && sameNumber(v, was))) continue;
    patch.breaker ??= {};
    patch.breaker[f.id] = breakerValue(f, v);
  }
  return Object.keys(patch).length ? patch : null;
}
