// Number, ratio and time formatting. Anything missing shows as "—" rather than 0 or NaN, so a
// field the running Weir does not report yet never looks like a real reading.

export const DASH = '—';

const intFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const rateFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1, minimumFractionDigits: 1 });
const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

export function int(v) {
  return isNum(v) ? intFmt.format(v) : DASH;
}

export function rate(v) {
  return isNum(v) ? `${rateFmt.format(v)}/s` : DASH;
}

/** `part / whole` as a percentage; "—" while there is nothing to divide. */
export function ratio(part, whole) {
  if (!isNum(part) || !isNum(whole) || whole <= 0) return DASH;
  return `${Math.round((100 * part) / whole)}%`;
}

export function bytes(v) {
  if (!isNum(v)) return DASH;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let n = v;
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

function toDate(v) {
  if (v === undefined || v === null || v === '') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}

export function clock(v) {
  const d = toDate(v);
  return d ? timeFmt.format(d) : DASH;
}

export function dateTime(v) {
  const d = toDate(v);
  return d ? dateTimeFmt.format(d) : DASH;
}

/** "12 s ago", "3 min ago", "2 h ago". */
export function ago(v, now = Date.now()) {
  const d = toDate(v);
  if (!d) return DASH;
  const s = Math.max(0, Math.round((now - d.getTime()) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/** "in 12 s", "in 3 min", or "now" once the time has passed. */
export function until(v, now = Date.now()) {
  const d = toDate(v);
  if (!d) return DASH;
  const s = Math.round((d.getTime() - now) / 1000);
  if (s <= 0) return 'now';
  if (s < 60) return `in ${s} s`;
  if (s < 3600) return `in ${Math.floor(s / 60)} min`;
  return `in ${Math.floor(s / 3600)} h`;
}

/** A length of time: "40 s", "12 min", "3 h 5 min". */
export function duration(ms) {
  const s = Math.max(0, Math.round(Number(ms) / 1000));
  if (!Number.isFinite(s)) return DASH;
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  const m = Math.floor((s % 3600) / 60);
  return m ? `${Math.floor(s / 3600)} h ${m} min` : `${Math.floor(s / 3600)} h`;
}

/** "half_open" → "half open". */
export function words(v) {
  return v === undefined || v === null || v === '' ? DASH : String(v).replace(/_/g, ' ');
}

/** Only http(s) links from reported data become clickable (no `javascript:` URLs). */
export function safeHref(v) {
  try {
    const u = new URL(String(v));
    return u.protocol === 'https:' || u.protocol === 'http:' ? u.href : null;
  } catch {
    return null;
  }
}
