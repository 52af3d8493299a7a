// The tip memory of a run (its latest checkpoint) or an adapt output: entries per slot, newest first,
// searchable, with their scores; and for a state typed or picked from an episode, the tips retrieval
// returns, computed by the dashboard with the trainer's own retrieval code and the run's settings.
// #memory?source=ID&slot=&q=&state=&taken=&score=&valid=
import { api } from './api.js';
import { clear, errorBox, fmt, h, routeTo, select } from './dom.js';

export function memoryView(root, ctx) {
  let params = new URLSearchParams();
  let shownKey = null;
  let retrievedKey = null;
  const head = h('div', { class: 'panel' });
  const entries = h('div', { class: 'panel' });
  const retrieval = h('div', { class: 'panel', id: 'retrieval' });
  root.append(h('section', { class: 'memory-view' }, head, h('div', { class: 'split' }, entries, retrieval)));

  const candidates = () => ctx.sources.filter((s) => s.kind === 'run' || s.kind === 'adapt');
  const sourceId = () => params.get('source') || candidates()[0]?.id || null;
  const go = (changes) => routeTo('memory', { ...Object.fromEntries(params.entries()), ...changes });

  async function render() {
    const id = sourceId();
    if (!id) {
      clear(head).append(h('p', { class: 'muted' }, 'No run or adapt output among the folders given.'));
      return;
    }
    let answer;
    try {
      answer = await api.memory(id, { slot: params.get('slot') ?? '', q: params.get('q') ?? '', limit: '300' });
    } catch (e) {
      const key = `error:${id}:${e.message}`;
      if (key === shownKey) return;
      shownKey = key;
      clear(head).append(h('h2', {}, 'Tip memory'), sourcePicker(id), errorBox(e.message));
      clear(entries);
      clear(retrieval);
      return;
    }
    const key = JSON.stringify([id, params.get('slot'), params.get('q'), answer]);
    if (key !== shownKey) {
      shownKey = key;
      renderHead(id, answer);
      renderEntries(answer);
      renderRetrievalForm(id, answer);
      retrievedKey = null;
    }
    await retrieve(id, answer);
  }

  function sourcePicker(id) {
    return h(
      'label',
      {},
      h('span', {}, 'memory of '),
      select(
        'source',
        candidates().map((s) => [s.id, s.label]),
        id,
        (v) => routeTo('memory', { source: v }),
      ),
    );
  }

  function renderHead(id, m) {
    const f = m.filters;
    const filters = [
      f.skip_taken_actions && 'skip taken actions',
      f.valid_actions_only && 'valid actions only',
      f.match_progress && 'match progress',
      f.min_tip_score !== null && `score > ${f.min_tip_score}`,
      f.tip_order === 'best_last' && 'best tip last',
    ].filter(Boolean);
    clear(head).append(
      h('h2', {}, 'Tip memory'),
      sourcePicker(id),
      h(
        'p',
        { class: 'muted' },
        `${m.file} · ${m.total} entries in ${m.slots.length} slot${m.slots.length === 1 ? '' : 's'} (one per ${m.slot_per}) · ${m.embedder} embedder · capacity ${m.settings.capacity} per slot · cosine > ${m.settings.threshold} · top ${m.settings.topK}` +
          (filters.length ? ` · filters: ${filters.join(', ')}` : ''),
      ),
      h(
        'div',
        { class: 'slots', id: 'slots' },
        m.slots.map((s) =>
          h(
            'button',
            { class: s.name === m.slot ? 'slot chosen' : 'slot', onclick: () => go({ slot: s.name }) },
            `${s.name} `,
            h('span', { class: 'count' }, String(s.size)),
          ),
        ),
      ),
    );
  }

  function renderEntries(m) {
    clear(entries);
    let timer = null;
    const search = h('input', {
      type: 'search',
      name: 'q',
      placeholder: 'search tips and actions',
      value: params.get('q') ?? '',
      oninput: (e) => {
        clearTimeout(timer);
        timer = setTimeout(() => go({ q: e.target.value }), 300);
      },
    });
    entries.append(
      h(
        'h2',
        {},
        `Slot ${m.slot ?? '–'} `,
        h(
          'span',
          { class: 'muted' },
          `${m.matching} ${params.get('q') ? 'matching' : 'entries'}, newest first${m.matching > m.entries.length ? ` (first ${m.entries.length})` : ''}`,
        ),
      ),
      search,
    );
    entries.append(
      h(
        'div',
        { class: 'scroll-tall' },
        h(
          'table',
          { class: 'grid', id: 'memory-entries' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ['#', 'score', 'action', 'progress', 'tip'].map((c) => h('th', {}, c)),
            ),
          ),
          h(
            'tbody',
            {},
            m.entries.map((e) =>
              h(
                'tr',
                {},
                h('td', { class: 'num muted' }, e.order),
                h('td', { class: 'num' }, fmt(e.score)),
                h('td', { class: 'mono' }, e.action ?? '–'),
                h('td', { class: 'num' }, fmt(e.progress)),
                h('td', { class: 'tip-text' }, e.text),
              ),
            ),
          ),
        ),
      ),
    );
  }

  function renderRetrievalForm(id, m) {
    clear(retrieval);
    const form = h(
      'form',
      {
        id: 'retrieve-form',
        onsubmit: (ev) => {
          ev.preventDefault();
          const data = new FormData(ev.target);
          go({
            slot: data.get('slot'),
            state: data.get('state'),
            taken: data.get('taken'),
            score: data.get('score'),
            valid: data.get('valid'),
          });
        },
      },
      h(
        'label',
        {},
        h('span', {}, 'slot'),
        select(
          'slot',
          m.slots.map((s) => [s.name, s.name]),
          params.get('slot') ?? m.slot,
          () => {},
        ),
      ),
      h(
        'label',
        { class: 'wide' },
        h('span', {}, 'state (the observation)'),
        h('textarea', { name: 'state', rows: 4, required: true }, params.get('state') ?? ''),
      ),
      h(
        'label',
        {},
        h('span', {}, 'actions taken so far, one per line'),
        h('textarea', { name: 'taken', rows: 3 }, params.get('taken') ?? ''),
      ),
      h('label', {}, h('span', {}, 'valid actions, one per line'), h('textarea', { name: 'valid', rows: 3 }, params.get('valid') ?? '')),
      h(
        'label',
        {},
        h('span', {}, 'score so far'),
        h('input', { type: 'number', name: 'score', value: params.get('score') ?? '0', step: 'any' }),
      ),
      h('button', { type: 'submit' }, 'Retrieve'),
    );
    retrieval.append(
      h('h2', {}, 'What would this state be shown?'),
      h(
        'p',
        { class: 'muted' },
        "Retrieval as training does it (MemoryRuntime.tipSource, with this run's embedder, threshold, top-k and filters). Open a step of an episode with “retrieve from memory now” to fill it in.",
      ),
      form,
      h('div', { id: 'retrieved' }),
    );
  }

  async function retrieve(id, m) {
    const state = params.get('state');
    const out = retrieval.querySelector('#retrieved');
    if (!out) return;
    if (!state) {
      if (retrievedKey !== 'none') clear(out);
      retrievedKey = 'none';
      return;
    }
    const lines = (v) =>
      (v ?? '')
        .split('\n')
        .map((x) => x.trim())
        .filter(Boolean);
    const query = {
      slot: params.get('slot') || m.slot,
      state,
      taken: lines(params.get('taken')),
      score_so_far: Number(params.get('score') || 0),
      valid_actions: lines(params.get('valid')),
    };
    const key = JSON.stringify([id, query, m.total, m.file]);
    if (key === retrievedKey) return;
    retrievedKey = key;
    let answer;
    try {
      answer = await api.retrieve(id, query);
    } catch (e) {
      clear(out).append(errorBox(e.message));
      return;
    }
    clear(out).append(
      h(
        'h3',
        {},
        `${answer.tips.length} tip${answer.tips.length === 1 ? '' : 's'} retrieved from slot ${query.slot}`,
        h('span', { class: 'muted' }, ' (in prompt order)'),
      ),
      answer.tips.length === 0
        ? h('p', { class: 'muted' }, 'Nothing above the similarity threshold passes the filters: this state would be shown no tip.')
        : h(
            'table',
            { class: 'grid', id: 'retrieved-tips' },
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ['rank', 'score', 'similarity', 'action', 'tip'].map((c) => h('th', {}, c)),
              ),
            ),
            h(
              'tbody',
              {},
              answer.tips.map((t, i) =>
                h(
                  'tr',
                  {},
                  h('td', { class: 'num' }, i + 1),
                  h('td', { class: 'num' }, fmt(t.score)),
                  h('td', { class: 'num' }, fmt(t.similarity, 3)),
                  h('td', { class: 'mono' }, t.action ?? '–'),
                  h('td', { class: 'tip-text' }, t.text),
                ),
              ),
            ),
          ),
    );
  }

  return {
    route: async (p) => {
      params = p;
      await render();
    },
    update: render,
  };
}
