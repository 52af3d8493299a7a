// Runs and their configs side by side, and their learning curves against environment steps, the
// selected runs overlaid. #runs?runs=id,id picks the runs; by default the first eight.
import { api } from './api.js';
import { clear, errorBox, fmt, h, pct, routeTo, steps } from './dom.js';

/** The curves drawn, in order: [name, where it comes from, how to read a point]. */
const METRICS = [
  ['held-out score', 'eval', (l) => l.mean_score],
  ['held-out success %', 'eval', (l) => (typeof l.success_rate === 'number' ? l.success_rate * 100 : null)],
  ['training score', 'train', (l) => l.mean_score],
  ['loss', 'train', (l) => l.loss],
  ['clip fraction', 'train', (l) => l.clip_fraction],
  ['entropy (sampled tokens)', 'train', (l) => l.entropy],
  ['tip-follow rate', 'train', (l) => l.tips_followed],
];
const DEFAULT_SELECTION = 8;

export function runsView(root, ctx) {
  let params = new URLSearchParams();
  let showAllKeys = false;
  let defaults = null;
  let tableKey = null;
  const drawn = new Map(); // run id -> JSON of the metrics last drawn
  let chart = null;
  const tableBox = h('div', { class: 'panel' });
  const curvesBox = h('div', { class: 'panel' });
  const configBox = h('div', { class: 'panel' });
  root.append(h('section', { class: 'runs-view' }, tableBox, curvesBox, configBox));

  const runs = () => ctx.sources.filter((s) => s.kind === 'run');
  const selected = () => {
    const ids = (params.get('runs') ?? '').split(',').filter(Boolean);
    const known = runs();
    const chosen = ids.length ? known.filter((r) => ids.includes(r.id)) : known.slice(0, DEFAULT_SELECTION);
    return chosen;
  };
  const toggle = (id, on) => {
    const ids = new Set(selected().map((r) => r.id));
    if (on) ids.add(id);
    else ids.delete(id);
    routeTo('runs', { runs: [...ids].join(',') || 'none' });
  };

  function renderTable() {
    // Redrawn only when a run or the selection changed, so a checkbox is never replaced under the pointer.
    const key = JSON.stringify([runs(), selected().map((r) => r.id)]);
    if (key === tableKey) return;
    tableKey = key;
    clear(tableBox);
    tableBox.append(h('h2', {}, 'Runs'));
    const list = runs();
    if (list.length === 0) {
      tableBox.append(h('p', { class: 'muted' }, 'No training runs among the folders given.'));
      return;
    }
    const chosen = new Set(selected().map((r) => r.id));
    const compareLabel = (id) => ctx.sources.find((s) => s.id === id)?.label;
    tableBox.append(
      h(
        'table',
        { class: 'grid', id: 'runs-table' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['', 'run', 'algo', 'state', 'iteration', 'env steps', 'held-out score', 'success', 'compare'].map((c) => h('th', {}, c)),
          ),
        ),
        h(
          'tbody',
          {},
          list.map((r) => {
            const s = r.run;
            const algo = s?.config?.algo?.name ?? '–';
            return h(
              'tr',
              { dataset: { id: r.id }, class: chosen.has(r.id) ? 'chosen' : '' },
              h(
                'td',
                {},
                h('input', {
                  type: 'checkbox',
                  checked: chosen.has(r.id),
                  'aria-label': `overlay ${r.label}`,
                  onchange: (e) => toggle(r.id, e.target.checked),
                }),
              ),
              h('td', { class: 'mono', title: r.path }, r.label),
              h('td', {}, algo),
              h('td', {}, h('span', { class: `state state-${s?.state ?? 'unknown'}` }, s?.state ?? '?')),
              h('td', { class: 'num' }, s ? `${s.iterations_done} / ${s.iterations_planned ?? '?'}` : '–'),
              h('td', { class: 'num' }, steps(s?.env_steps)),
              h('td', { class: 'num' }, s?.last_eval ? fmt(s.last_eval.mean_score) : '–'),
              h('td', { class: 'num' }, s?.last_eval ? pct(s.last_eval.success_rate) : '–'),
              h('td', {}, r.compare ? (compareLabel(r.compare) ?? '') : ''),
            );
          }),
        ),
      ),
    );
    const problems = list.filter((r) => r.run?.problem).map((r) => r.run.problem);
    for (const p of problems) tableBox.append(errorBox(p));
  }

  async function renderCurves() {
    const chosen = selected();
    const answers = await Promise.all(
      chosen.map((r) =>
        api.metrics(r.id).then(
          (m) => ({ run: r, m }),
          (e) => ({ run: r, error: e.message }),
        ),
      ),
    );
    const key = JSON.stringify(
      answers.map((a) => [a.run.id, a.error ?? [a.m.train.length, a.m.evals.length, a.m.train.at(-1), a.m.evals.at(-1)]]),
    );
    if (drawn.get('key') === key && chart) return answers;
    drawn.set('key', key);
    clear(curvesBox);
    curvesBox.append(h('h2', {}, 'Learning curves ', h('span', { class: 'muted' }, 'against training environment steps')));
    for (const a of answers) if (a.error) curvesBox.append(errorBox(`${a.run.label}: ${a.error}`));
    for (const a of answers) for (const w of a.m?.warnings ?? []) curvesBox.append(h('div', { class: 'warning' }, w));
    const values = [];
    const counts = Object.fromEntries(METRICS.map(([name]) => [name, 0]));
    for (const a of answers) {
      if (!a.m) continue;
      for (const [name, kind, read] of METRICS) {
        const lines = kind === 'eval' ? a.m.evals : a.m.train;
        for (const l of lines) {
          const value = read(l);
          if (typeof value !== 'number' || !Number.isFinite(value)) continue;
          values.push({
            run: a.run.label,
            metric: name,
            steps: kind === 'eval' ? l.train_env_steps : l.env_steps,
            iteration: l.iteration,
            value,
          });
          counts[name]++;
        }
      }
    }
    const box = h('div', { id: 'curves', dataset: { points: JSON.stringify(counts), runs: String(answers.filter((a) => a.m).length) } });
    curvesBox.append(box);
    if (values.length === 0) {
      box.append(
        h(
          'p',
          { class: 'muted' },
          chosen.length
            ? 'No iteration logged yet: the curves appear as the runs write metrics.jsonl.'
            : 'Pick runs above to draw their curves.',
        ),
      );
      chart?.finalize();
      chart = null;
      return answers;
    }
    chart?.finalize();
    chart = await drawCurves(
      box,
      values,
      chosen.map((r) => r.label),
    );
    return answers;
  }

  async function renderConfigs(answers) {
    defaults ??= flatten(await api.configDefaults());
    clear(configBox);
    const withConfig = answers.filter((a) => a.m?.config);
    configBox.append(h('h2', {}, 'Configs side by side'));
    if (withConfig.length === 0) {
      configBox.append(h('p', { class: 'muted' }, 'No config.yaml in the selected runs.'));
      return;
    }
    const flat = withConfig.map((a) => flatten(a.m.config));
    const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].filter((k) => k !== 'run_dir').sort();
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const differs = (k) => flat.some((f) => !same(f[k], flat[0][k]));
    const notDefault = (k) => flat.some((f) => !same(f[k], defaults[k]));
    // By default: what tells the runs apart, and what any of them set away from the defaults.
    const shown = showAllKeys ? keys : keys.filter((k) => differs(k) || notDefault(k));
    configBox.append(
      h(
        'label',
        { class: 'toggle' },
        h('input', {
          type: 'checkbox',
          checked: showAllKeys,
          onchange: (e) => {
            showAllKeys = e.target.checked;
            void renderConfigs(answers);
          },
        }),
        ` every option (shown: ${keys.filter((k) => differs(k) || notDefault(k)).length} of ${keys.length} that differ between the runs or from the defaults; bold: differs between the runs)`,
      ),
    );
    configBox.append(
      h(
        'div',
        { class: 'scroll' },
        h(
          'table',
          { class: 'grid config', id: 'config-table' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', {}, 'option'),
              h('th', { class: 'muted' }, 'default'),
              withConfig.map((a) => h('th', { class: 'mono' }, a.run.label)),
            ),
          ),
          h(
            'tbody',
            {},
            shown.map((k) =>
              h(
                'tr',
                { class: differs(k) ? 'differs' : '' },
                h('td', { class: 'mono' }, k),
                h('td', { class: 'mono muted' }, defaults[k] === undefined ? '–' : JSON.stringify(defaults[k])),
                flat.map((f) =>
                  h('td', { class: `mono${same(f[k], defaults[k]) ? '' : ' changed'}` }, f[k] === undefined ? '–' : JSON.stringify(f[k])),
                ),
              ),
            ),
          ),
        ),
      ),
    );
  }

  async function refresh() {
    renderTable();
    const answers = await renderCurves();
    if (drawn.get('config') !== drawn.get('key')) {
      drawn.set('config', drawn.get('key'));
      await renderConfigs(answers);
    }
  }

  return {
    route: async (p) => {
      params = p;
      drawn.clear();
      tableKey = null;
      await refresh();
    },
    update: refresh,
    unmount: () => chart?.finalize(),
  };
}

function flatten(value, prefix = '', out = {}) {
  if (value && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else out[prefix] = value;
  return out;
}

/** One small chart per metric (independent y scales), the runs in colour; returns the Vega view. */
async function drawCurves(container, values, runOrder) {
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    data: { values },
    facet: {
      field: 'metric',
      type: 'nominal',
      sort: METRICS.map(([name]) => name),
      title: null,
      header: { labelFontSize: 13, labelFontWeight: 'bold', labelPadding: 4 },
    },
    columns: 3,
    spec: {
      width: 300,
      height: 160,
      mark: { type: 'line', point: { size: 28 }, strokeWidth: 2, tooltip: true },
      encoding: {
        x: { field: 'steps', type: 'quantitative', title: 'environment steps', axis: { format: '~s' } },
        y: { field: 'value', type: 'quantitative', title: null, scale: { zero: false }, axis: { format: '~r' } },
        color: {
          field: 'run',
          type: 'nominal',
          sort: runOrder,
          title: 'run',
          legend: { orient: 'top', labelLimit: 0, direction: 'vertical' },
        },
        detail: { field: 'run' },
      },
    },
    resolve: { scale: { y: 'independent' }, axis: { x: 'independent' } },
    config: { view: { stroke: '#ddd' }, axis: { labelFontSize: 11, titleFontSize: 11, titleColor: '#666' } },
  };
  const view = new vega.View(vega.parse(vegaLite.compile(spec).spec), { renderer: 'svg', container, hover: true });
  await view.runAsync();
  return view;
}
