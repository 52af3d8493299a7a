// A `compare` output folder as it was written: its learning-curve plot and results.md (tables,
// headings, notes), with links to its runs in the runs view. #compare?source=ID
import { api } from './api.js';
import { clear, errorBox, h, routeTo, select } from './dom.js';

export function compareView(root, ctx) {
  let params = new URLSearchParams();
  let shownKey = null;
  const box = h('div', { class: 'panel compare' });
  root.append(h('section', { class: 'compare-view' }, box));

  const candidates = () => ctx.sources.filter((s) => s.kind === 'compare');
  const sourceId = () => params.get('source') || candidates()[0]?.id || null;

  async function render() {
    const id = sourceId();
    if (!id) {
      if (shownKey !== 'none')
        clear(box).append(
          h('h2', {}, 'Compare outputs'),
          h(
            'p',
            { class: 'muted' },
            'No compare output among the folders given (a folder with results.md and curves.csv, as empo2 compare --out writes).',
          ),
        );
      shownKey = 'none';
      return;
    }
    let answer;
    try {
      answer = await api.source(id);
    } catch (e) {
      clear(box).append(errorBox(e.message));
      shownKey = null;
      return;
    }
    const key = JSON.stringify(answer.compare) + answer.runs.join();
    if (key === shownKey) return;
    shownKey = key;
    const c = answer.compare;
    clear(box).append(
      h('h2', {}, 'Compare output'),
      h(
        'label',
        {},
        h('span', {}, 'folder '),
        select(
          'source',
          candidates().map((s) => [s.id, s.label]),
          id,
          (v) => routeTo('compare', { source: v }),
        ),
      ),
      answer.runs.length
        ? h(
            'p',
            {},
            h('a', { href: `#runs?runs=${answer.runs.join(',')}` }, `overlay its ${answer.runs.length} runs' curves in the runs view →`),
          )
        : h('p', { class: 'muted' }, 'Its run folders are not here, only the report.'),
      c.plot
        ? h('img', {
            class: 'plot',
            id: 'compare-plot',
            src: `/api/sources/${id}/plot.svg?v=${encodeURIComponent(key.length)}`,
            alt: 'learning curves of the compared configs',
          })
        : h('p', { class: 'muted' }, 'No learning_curve.svg in this folder.'),
      c.results_md
        ? markdown(c.results_md)
        : c.results_csv
          ? csvTable(c.results_csv)
          : h('p', { class: 'muted' }, 'No results.md or results.csv in this folder.'),
      h('p', { class: 'muted' }, `Files: ${c.files.join(', ')}`),
    );
  }

  return {
    route: async (p) => {
      params = p;
      shownKey = null;
      await render();
    },
    update: render,
  };
}

function csvTable(rows) {
  const [head, ...body] = rows;
  return h(
    'table',
    { class: 'grid' },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        head.map((c) => h('th', {}, c)),
      ),
    ),
    h(
      'tbody',
      {},
      body.map((r) =>
        h(
          'tr',
          {},
          r.map((c) => h('td', {}, c)),
        ),
      ),
    ),
  );
}

/** The Markdown compare writes: headings, pipe tables, bullet lists, paragraphs, `code`. Built as DOM, never as HTML. */
function markdown(text) {
  const out = h('div', { class: 'markdown', id: 'results-md' });
  const lines = text.split('\n');
  for (let i = 0; i < lines.length;) {
    const line = lines[i];
    if (line.trim() === '') {
      i++;
    } else if (/^#{1,6} /.test(line)) {
      const level = Math.min(6, line.match(/^#+/)[0].length + 1);
      out.append(h(`h${level}`, {}, inline(line.replace(/^#+ /, ''))));
      i++;
    } else if (line.startsWith('|')) {
      const rows = [];
      while (i < lines.length && lines[i].startsWith('|')) rows.push(lines[i++]);
      const cells = (r) =>
        r
          .replace(/^\||\|$/g, '')
          .split('|')
          .map((c) => c.trim());
      const [head, , ...body] = rows;
      out.append(
        h(
          'table',
          { class: 'grid' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              cells(head).map((c) => h('th', {}, inline(c))),
            ),
          ),
          h(
            'tbody',
            {},
            body.map((r) =>
              h(
                'tr',
                {},
                cells(r).map((c) => h('td', {}, inline(c))),
              ),
            ),
          ),
        ),
      );
    } else if (/^- /.test(line)) {
      const items = [];
      while (i < lines.length && /^- /.test(lines[i])) items.push(lines[i++].slice(2));
      out.append(
        h(
          'ul',
          {},
          items.map((t) => h('li', {}, inline(t))),
        ),
      );
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() !== '' && !/^(#|\||- )/.test(lines[i])) para.push(lines[i++]);
      out.append(h('p', {}, inline(para.join(' '))));
    }
  }
  return out;
}

/** `code` and **bold** inside a line. */
function inline(text) {
  return text
    .split(/(`[^`]+`|\*\*[^*]+\*\*)/)
    .map((part) =>
      part.startsWith('`') && part.endsWith('`') && part.length > 1
        ? h('code', {}, part.slice(1, -1))
        : part.startsWith('**') && part.endsWith('**') && part.length > 3
          ? h('strong', {}, part.slice(2, -2))
          : part,
    );
}
