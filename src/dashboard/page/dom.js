// DOM helpers. Text from runs (observations, tips, configs) only ever goes in through textContent,
// never as HTML, so a trajectory cannot inject markup into the page.

/** h('div', {class: 'x', onclick}, 'text', child, [more]) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked' || k === 'selected' || k === 'open') el[k] = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** A <select> of [value, label] pairs; `any` adds a first option with value ''. */
export function select(name, options, current, onchange, any = null) {
  const all = any === null ? options : [['', any], ...options];
  return h(
    'select',
    { name, onchange: (e) => onchange(e.target.value) },
    all.map(([value, label]) => h('option', { value: String(value), selected: String(value) === String(current ?? '') }, label)),
  );
}

export function fmt(x, digits = 1) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (typeof x !== 'number') return String(x);
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

export function pct(x) {
  return x === null || x === undefined ? '–' : `${(x * 100).toFixed(0)}%`;
}

export function steps(n) {
  if (n === null || n === undefined) return '–';
  return n >= 10_000 ? `${(n / 1000).toFixed(1)}k` : String(n);
}

export function errorBox(message) {
  return h('div', { class: 'error', role: 'alert' }, message);
}

/** Hash routes look like #view?key=value&...; this reads and writes them. */
export function readRoute() {
  const [view, query = ''] = location.hash.replace(/^#/, '').split('?');
  return { view: view || 'runs', params: new URLSearchParams(query) };
}

export function routeTo(view, params = {}, replace = false) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ''));
  const hash = `#${view}${q.toString() ? `?${q}` : ''}`;
  if (replace) history.replaceState(null, '', hash);
  else location.hash = hash;
}

export const MODE_LABEL = {
  plain: 'plain',
  'tips-on-policy': 'tips · on-policy',
  'tips-off-policy': 'tips · off-policy',
  tips: 'tips',
  reflexion: 'reflexion',
};

export function modeBadge(mode) {
  return h('span', { class: `badge mode-${mode}` }, MODE_LABEL[mode] ?? mode);
}
