// Tiny DOM helpers. Every piece of data goes in through textContent or setAttribute, never
// innerHTML, so nothing Weir or GitHub reports can inject markup into the dashboard.

const SVG_NS = 'http://www.w3.org/2000/svg';

function apply(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'text') el.textContent = String(value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** `h('td', {class: 'num', text: 3})` or `h('li', {}, child, 'text', ...)`. */
export function h(tag, attrs, ...children) {
  return append(apply(document.createElement(tag), attrs), children);
}

/** The SVG counterpart of `h`. */
export function s(tag, attrs, ...children) {
  return append(apply(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** The element with `data-testid`, which doubles as the page's stable hook for scripts. */
export function byTestId(id, root = document) {
  return root.querySelector(`[data-testid="${id}"]`);
}

/** Sets text only when it changed, so once-a-second updates do not disturb selection. */
export function setText(el, text) {
  const t = String(text);
  if (el && el.textContent !== t) el.textContent = t;
}

/** A CSS-safe token for use in data-testid values (upstream names come from the config). */
export function slug(name) {
  return String(name).replace(/[^A-Za-z0-9_-]/g, '_');
}
