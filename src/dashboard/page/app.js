// The page: four views behind hash routes (#runs, #trajectories, #memory, #compare), and a poll of
// the dashboard every two seconds so a live run's new iterations, episodes and tips appear on
// their own. Each view keeps the data it last drew and redraws only when the answer changed.
import { api } from './api.js';
import { clear, errorBox, h, readRoute } from './dom.js';
import { compareView } from './compare.js';
import { memoryView } from './memory.js';
import { runsView } from './runs.js';
import { trajectoriesView } from './trajectories.js';

const VIEWS = { runs: runsView, trajectories: trajectoriesView, memory: memoryView, compare: compareView };
const POLL_MS = 2000;

const ctx = { sources: [], cwd: '' };
let current = null;

function setLive(text, ok) {
  const el = document.getElementById('live');
  el.textContent = text;
  el.className = ok ? 'ok' : 'down';
}

function showProblems(problems) {
  const box = document.getElementById('problems');
  clear(box);
  box.hidden = problems.length === 0;
  for (const p of problems) box.append(errorBox(p));
}

async function loadSources() {
  const answer = await api.sources();
  ctx.sources = answer.sources;
  ctx.cwd = answer.cwd;
  showProblems(answer.problems);
}

async function mountRoute() {
  const { view, params } = readRoute();
  const name = VIEWS[view] ? view : 'runs';
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === name);
  if (current?.name === name) {
    await guarded(() => current.instance.route(params));
    return;
  }
  current?.instance.unmount?.();
  const root = clear(document.getElementById('view'));
  current = { name, instance: VIEWS[name](root, ctx) };
  await guarded(() => current.instance.route(params));
}

async function guarded(work) {
  try {
    await work();
  } catch (e) {
    document.getElementById('view').prepend(errorBox(e.message));
  }
}

async function poll() {
  try {
    await loadSources();
    setLive(`live · ${new Date().toLocaleTimeString()}`, true);
    if (current) await guarded(() => current.instance.update());
  } catch (e) {
    setLive(`dashboard not reachable (${e.message})`, false);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

async function start() {
  try {
    await loadSources();
    setLive(`live · ${new Date().toLocaleTimeString()}`, true);
  } catch (e) {
    setLive(`dashboard not reachable (${e.message})`, false);
  }
  window.addEventListener('hashchange', () => void mountRoute());
  await mountRoute();
  setTimeout(poll, POLL_MS);
}

if (!window.vega || !window.vegaLite)
  document.getElementById('view').append(h('div', { class: 'error' }, 'vega or vega-lite did not load: the charts cannot be drawn.'));
void start();
