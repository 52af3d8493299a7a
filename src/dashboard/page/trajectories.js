// The trajectory browser: a source's recorded episodes, filtered by file, iteration, task, mode and
// score, and one episode read as a chat: the environment's observations on the left, the agent's
// actions on the right, and beside each step the tips it was shown, folded, with the step marked
// when its action was one a tip named.
// #trajectories?source=ID&file=&iteration=&task=&mode=&min=&max=&tips=1&episode=FILE:LINE
import { api } from './api.js';
import { clear, errorBox, fmt, h, modeBadge, routeTo, select } from './dom.js';

const FILTER_KEYS = ['source', 'file', 'iteration', 'task', 'mode', 'min', 'max', 'tips'];

export function trajectoriesView(root, ctx) {
  let params = new URLSearchParams();
  let listKey = null;
  let openKey = null;
  const filters = h('div', { class: 'filters panel' });
  const list = h('div', { class: 'episode-list panel' });
  const detail = h('div', { class: 'episode panel', id: 'episode' });
  root.append(h('section', { class: 'trajectories-view' }, filters, h('div', { class: 'split' }, list, detail)));

  const candidates = () => ctx.sources.filter((s) => s.kind !== 'compare');
  const sourceId = () => params.get('source') || candidates()[0]?.id || null;
  const go = (changes) => {
    const next = Object.fromEntries([...params.entries()]);
    Object.assign(next, changes);
    routeTo('trajectories', next);
  };

  function renderFilters(answer) {
    clear(filters);
    const f = answer?.facets ?? { sources: [], iterations: [], tasks: [], modes: [] };
    const files = answer?.files ?? [];
    const field = (label, control) => h('label', {}, h('span', {}, label), control);
    filters.append(
      field(
        'source',
        select(
          'source',
          candidates().map((s) => [s.id, s.label]),
          sourceId(),
          (v) => routeTo('trajectories', { source: v }),
        ),
      ),
      field(
        'file',
        select(
          'file',
          files.map((x) => [x.index, `${x.name} (${x.episodes})`]),
          params.get('file'),
          (v) => go({ file: v, episode: '' }),
          'all files',
        ),
      ),
      field(
        'iteration / trial',
        select(
          'iteration',
          f.iterations.map((i) => [i, String(i)]),
          params.get('iteration'),
          (v) => go({ iteration: v, episode: '' }),
          'all',
        ),
      ),
      field(
        'task',
        select(
          'task',
          f.tasks.map((t) => [t, t]),
          params.get('task'),
          (v) => go({ task: v, episode: '' }),
          'all',
        ),
      ),
      field(
        'mode',
        select(
          'mode',
          f.modes.map((m) => [m, m]),
          params.get('mode'),
          (v) => go({ mode: v, episode: '' }),
          'all',
        ),
      ),
      field(
        'score ≥',
        h('input', {
          type: 'number',
          name: 'min',
          value: params.get('min') ?? '',
          size: 4,
          onchange: (e) => go({ min: e.target.value, episode: '' }),
        }),
      ),
      field(
        'score ≤',
        h('input', {
          type: 'number',
          name: 'max',
          value: params.get('max') ?? '',
          size: 4,
          onchange: (e) => go({ max: e.target.value, episode: '' }),
        }),
      ),
      h(
        'label',
        { class: 'toggle' },
        h('input', {
          type: 'checkbox',
          name: 'tips',
          checked: params.get('tips') === '1',
          onchange: (e) => go({ tips: e.target.checked ? '1' : '', episode: '' }),
        }),
        ' shown tips only',
      ),
    );
    for (const x of files) for (const p of x.problems) filters.append(errorBox(p));
    for (const x of files)
      if (x.cap)
        filters.append(
          h(
            'div',
            { class: 'warning' },
            `${x.path}: recording stopped at its size cap (${Math.round(x.cap.max_bytes / 2 ** 20)} MiB, trajectories.max_megabytes)`,
          ),
        );
  }

  async function renderList() {
    const id = sourceId();
    if (!id) {
      renderFilters(null);
      clear(list).append(h('p', { class: 'muted' }, 'No run, adapt output or trajectory file among the folders given.'));
      return;
    }
    const query = { limit: '300' };
    if (params.get('file')) query.file = params.get('file');
    if (params.get('iteration')) query.iteration = params.get('iteration');
    if (params.get('task')) query.task = params.get('task');
    if (params.get('mode')) query.mode = params.get('mode');
    if (params.get('min')) query.min_score = params.get('min');
    if (params.get('max')) query.max_score = params.get('max');
    if (params.get('tips')) query.tips = '1';
    const answer = await api.trajectories(id, query);
    const key = JSON.stringify([id, query, answer]);
    if (key === listKey) return;
    listKey = key;
    renderFilters(answer);
    clear(list);
    list.append(
      h(
        'h2',
        {},
        `Episodes `,
        h(
          'span',
          { class: 'muted' },
          `${answer.total} matching${answer.total > answer.episodes.length ? `, newest ${answer.episodes.length} shown` : ''}`,
        ),
      ),
    );
    if (answer.files.length === 0) {
      list.append(
        h(
          'p',
          { class: 'muted' },
          'No trajectory records here yet. Training writes trajectories/train.jsonl and eval.jsonl in its run folder; empo2 adapt writes trajectories.jsonl in its output.',
        ),
      );
      return;
    }
    const current = params.get('episode');
    list.append(
      h(
        'table',
        { class: 'grid clickable', id: 'episodes' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['played', 'task', 'mode', 'score', 'steps', 'tips', 'followed'].map((c) => h('th', {}, c)),
          ),
        ),
        h(
          'tbody',
          {},
          answer.episodes.map((e) => {
            const ref = `${e.file}:${e.line}`;
            return h(
              'tr',
              { dataset: { episode: ref }, class: ref === current ? 'chosen' : '', onclick: () => go({ episode: ref }) },
              h('td', { class: 'nowrap', title: answer.files[e.file]?.path ?? '' }, playedAt(e)),
              taskCell(e),
              h(
                'td',
                {},
                modeBadge(e.mode),
                playedWithEmptyMemory(e, e.tipped_steps) ? h('div', { class: 'muted memory-note' }, 'memory was empty') : null,
              ),
              h('td', { class: `num ${e.success ? 'success' : ''}` }, fmt(e.score)),
              h('td', { class: 'num' }, e.steps),
              h('td', { class: 'num' }, e.tipped_steps),
              h('td', { class: 'num' }, e.tipped_steps ? e.followed_steps : '–'),
            );
          }),
        ),
      ),
    );
  }

  async function renderEpisode() {
    const id = sourceId();
    const ref = params.get('episode');
    if (!id || !ref) {
      if (openKey !== null || !detail.firstChild) {
        openKey = null;
        clear(detail).append(h('p', { class: 'muted' }, 'Pick an episode to read it step by step, with the tips each step was shown.'));
      }
      return;
    }
    const key = `${id}/${ref}`;
    if (key === openKey) return;
    const [file, line] = ref.split(':');
    let answer;
    try {
      answer = await api.episode(id, file, line);
    } catch (e) {
      openKey = null;
      clear(detail).append(errorBox(e.message));
      return;
    }
    openKey = key;
    clear(detail).append(episodeChat(answer.episode, answer.file, answer.line, id));
  }

  async function refresh() {
    await renderList();
    await renderEpisode();
  }

  return {
    route: async (p) => {
      const changed = FILTER_KEYS.some((k) => (p.get(k) ?? '') !== (params.get(k) ?? ''));
      params = p;
      if (changed) listKey = null;
      else
        for (const row of list.querySelectorAll('tr[data-episode]'))
          row.classList.toggle('chosen', row.dataset.episode === p.get('episode'));
      await refresh();
    },
    update: refresh,
  };
}

/**
 * Whether a rollout meant to be shown tips was shown none because the memory was empty: tips are
 * written after each training iteration, so the first iteration, and an evaluation before it,
 * play with an empty memory. (Later, no tips may also mean none was similar enough: not said.)
 */
function playedWithEmptyMemory(e, tippedSteps) {
  if (!['tips-on-policy', 'tips-off-policy', 'tips'].includes(e.mode) || tippedSteps > 0) return false;
  return (e.source === 'train' && e.iteration === 1) || (e.source === 'eval' && e.iteration === 0);
}

/** Where an episode was played, in a few characters: the iteration, an evaluation, or an adapt trial. */
function playedAt(e) {
  if (e.source === 'adapt') return `trial ${e.trial}`;
  const at = e.iteration ?? '?';
  return e.source === 'eval' ? `eval @ ${at}` : `iter ${at}`;
}

function episodeChat(e, file, line, sourceId) {
  const where =
    e.source === 'adapt'
      ? `trial ${e.trial}`
      : e.source === 'train'
        ? `iteration ${e.iteration}`
        : `evaluation at iteration ${e.iteration ?? '?'}${e.checkpoint ? ` (${e.checkpoint})` : ''}`;
  const tipped = e.steps.filter((s) => s.tips.length > 0).length;
  const followed = e.steps.filter((s) => s.followed_tip === true).length;
  const emptyMemory = playedWithEmptyMemory(e, tipped);
  const head = h(
    'div',
    { class: 'episode-head' },
    h(
      'h2',
      {},
      `${e.task} #${e.variation} `,
      modeBadge(e.mode),
      ' ',
      h('span', { class: `badge ${e.success ? 'won' : 'lost'}` }, `score ${fmt(e.score)}${e.success ? ' · solved' : ''}`),
    ),
    h(
      'p',
      { class: 'muted' },
      `${e.source} · ${where}${e.env_steps !== null ? ` · ${e.env_steps} env steps` : ''} · ${e.steps.length} steps · ${tipped} shown tips · ${followed} followed a tip · ${file}:${line}`,
    ),
    emptyMemory
      ? h(
          'p',
          { class: 'muted', id: 'memory-note' },
          'The memory was empty when this episode was played (tips are written after each training iteration): no tips to show.',
        )
      : null,
    h('p', { class: 'task' }, e.description),
  );
  const rows = e.steps.map((s, t) => stepRow(e, s, t, sourceId, emptyMemory));
  const end = h(
    'div',
    { class: 'step final' },
    h(
      'div',
      { class: 'chat' },
      h('div', { class: 'bubble env' }, h('div', { class: 'who' }, 'environment · final'), h('pre', {}, e.final_observation)),
      h('div', { class: 'result' }, `Final score ${fmt(e.score)} ${e.success ? '(solved)' : '(not solved)'}`),
      judgeVerdict(e),
    ),
    h(
      'aside',
      { class: 'reflection' },
      e.reflection !== null
        ? [
            h('div', { class: 'who' }, e.mode === 'reflexion' ? 'plan the policy wrote' : 'tip the reflector wrote'),
            h('p', { id: 'reflection' }, e.reflection),
          ]
        : h('p', { class: 'muted' }, 'No reflection written for this episode.'),
    ),
  );
  // Reflexion: the variation's earlier plans open every prompt of the episode.
  const plans = e.plans_shown?.length
    ? h(
        'div',
        { class: 'plans', id: 'plans-shown' },
        h('div', { class: 'who' }, `${e.plans_shown.length} earlier plan${e.plans_shown.length === 1 ? '' : 's'} in every prompt`),
        e.plans_shown.map((p, i) => h('details', {}, h('summary', {}, `plan ${i + 1}`), h('p', {}, p))),
      )
    : null;
  return h('div', {}, head, plans, h('div', { class: 'steps' }, rows, end));
}

/** env.reward: judge: the judge's score relative to the episode's group, and its reason (or why the group was left out). */
function judgeVerdict(e) {
  if (e.judge)
    return h(
      'div',
      { class: 'judge', id: 'judge' },
      h('div', { class: 'who' }, `judge · ${fmt(e.judge.score, 2)} of 1, relative to its group (the training reward)`),
      h('p', {}, e.judge.reason),
    );
  if (e.left_out) return h('div', { class: 'judge muted', id: 'judge' }, `Left out of the update: ${e.left_out}`);
  return null;
}

function stepRow(e, s, t, sourceId, emptyMemory) {
  const before = t > 0 ? e.steps[t - 1].score : 0;
  const gained = s.score - before;
  const marker =
    s.followed_tip === true
      ? h('span', { class: 'badge followed', title: 'the action is one a shown tip named' }, '✓ followed a tip')
      : s.followed_tip === false
        ? h('span', { class: 'badge ignored' }, 'tips not followed')
        : null;
  // An agent played through the gateway (and any free-text environment) offers no valid actions: nothing to unfold.
  const valid =
    s.valid_action_count === 0
      ? null
      : h(
          'details',
          { class: 'valid' },
          h(
            'summary',
            {},
            `${s.valid_action_count} valid action${s.valid_action_count === 1 ? '' : 's'}${s.valid_actions.length < s.valid_action_count ? ` (first ${s.valid_actions.length} recorded)` : ''}`,
          ),
          h(
            'ul',
            {},
            s.valid_actions.map((a) => h('li', { class: a === s.action ? 'taken' : '' }, a)),
          ),
        );
  const retrieveLink =
    e.slot !== null
      ? h(
          'a',
          {
            class: 'retrieve-link',
            href: `#memory?${new URLSearchParams({
              source: sourceId,
              slot: e.slot,
              state: s.observation,
              taken: e.steps
                .slice(0, t)
                .map((x) => x.action)
                .join('\n'),
              score: String(before),
              valid: s.valid_actions.join('\n'),
            })}`,
            title: "what the run's memory as saved now would show in this state",
          },
          'retrieve from memory now →',
        )
      : null;
  const tips =
    s.tips.length === 0
      ? h(
          'aside',
          { class: 'tips none' },
          h(
            'span',
            { class: 'muted' },
            e.mode === 'plain' ? 'plain rollout: no tips shown' : emptyMemory ? 'no tips shown: the memory was empty' : 'no tips shown',
          ),
          retrieveLink,
        )
      : h(
          'aside',
          { class: 'tips' },
          h(
            'details',
            {},
            h(
              'summary',
              {},
              `${s.tips.length} tip${s.tips.length === 1 ? '' : 's'} shown`,
              s.tips[0].score !== null ? h('span', { class: 'muted' }, ` · best score ${fmt(bestScore(s.tips))}`) : null,
            ),
            h(
              'ol',
              {},
              s.tips.map((tip) =>
                h(
                  'li',
                  { class: tip.action !== null && tip.action === s.action ? 'tip named' : 'tip' },
                  h(
                    'div',
                    { class: 'tip-meta' },
                    `score ${fmt(tip.score)} · similarity ${fmt(tip.similarity, 2)}${tip.action !== null ? ` · action: ${tip.action}` : ''}`,
                  ),
                  h('div', { class: 'tip-text' }, tip.text),
                ),
              ),
            ),
          ),
          retrieveLink,
        );
  return h(
    'div',
    { class: `step${s.followed_tip === true ? ' followed' : ''}`, dataset: { step: String(t + 1) } },
    h(
      'div',
      { class: 'chat' },
      h('div', { class: 'bubble env' }, h('div', { class: 'who' }, `environment · step ${t + 1}`), h('pre', {}, s.observation), valid),
      h(
        'div',
        { class: 'bubble agent' },
        h('div', { class: 'who' }, 'agent', marker ? ' ' : '', marker),
        h('div', { class: 'action' }, s.action),
        h(
          'div',
          { class: 'reward' },
          `reward ${fmt(s.reward)} · score ${fmt(s.score)}${gained ? ` (${gained > 0 ? '+' : ''}${fmt(gained)})` : ''}`,
        ),
        s.rescored ? rescoredCandidates(s) : null,
      ),
    ),
    tips,
  );
}

/** Retrospex: the LLM's candidates of the step, with the likelihood, the critic's Q and the mixed score the action was chosen by. */
function rescoredCandidates(s) {
  const n = s.rescored.candidates.length;
  return h(
    'details',
    { class: 'valid rescored' },
    h('summary', {}, `${n} candidate${n === 1 ? '' : 's'} rescored by the critic · λ ${fmt(s.rescored.weight, 2)}`),
    h(
      'table',
      {},
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['action', 'likelihood', 'Q', 'score'].map((c) => h('th', {}, c)),
        ),
      ),
      h(
        'tbody',
        {},
        s.rescored.candidates.map((c) =>
          h(
            'tr',
            { class: c.action === s.action ? 'taken' : '' },
            h('td', {}, c.action),
            h('td', { class: 'num' }, fmt(c.likelihood, 3)),
            h('td', { class: 'num' }, fmt(c.q, 3)),
            h('td', { class: 'num' }, fmt(c.score, 3)),
          ),
        ),
      ),
    ),
  );
}

function bestScore(tips) {
  return Math.max(...tips.map((t) => t.score ?? -Infinity));
}

/**
 * A list row's task: family and variation, with the task's text as its tooltip, and shown under it when
 * it is short (a user's agent task such as {"word":"house"}, where "agent #5" alone says nothing).
 */
function taskCell(e) {
  const text = e.description ?? '';
  return h(
    'td',
    { class: 'nowrap', title: text },
    `${e.task} #${e.variation}`,
    text && text.length <= SHORT_DESCRIPTION ? h('div', { class: 'muted task-text' }, text) : null,
  );
}
const SHORT_DESCRIPTION = 40;
