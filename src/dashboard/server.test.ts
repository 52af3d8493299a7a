/**
 * The dashboard's server without a browser: which folders it recognises, the routes the page uses
 * (metrics, trajectory filters, one episode, the memory and retrieval through the trainer's code),
 * live reading of files that grow, and what it refuses: missing folders, damaged files, bad
 * parameters, other hosts and origins, non-loopback binds, and paths that try to leave it.
 * The run folders are written by hand here; the browser test trains a real one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { loadConfig } from '../config/load.ts';
import { resolveAlgo } from '../config/schema.ts';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import { NoveltyList } from '../memory/novelty.ts';
import { TrajectorySummaryReflector } from '../memory/reflector.ts';
import { TipMemory } from '../memory/store.ts';
import type { EpisodeRecord } from '../trajectory/format.ts';
import { TrajectoryWriter } from '../trajectory/writer.ts';
import { MemoryRuntime } from '../trainer/memory-runtime.ts';
import type { Episode } from '../run/records.ts';
import { startDashboard, type RunningDashboard } from './server.ts';
import { discoverSources } from './sources.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-dashboard-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const runsDir = join(root, 'runs');
const runDir = join(runsDir, 'empo2-seed0');
const compareDir = join(root, 'results', 'cmp');
const adaptDir = join(runDir, 'checkpoints', 'iter-000002', 'adapt-fetch');
const cfg = loadConfig(null, [
  `run_dir=${runDir}`,
  'algo.name=empo2',
  'algo.p=1',
  'memory.reflector=summary',
  'memory.top_k=3',
  'train.iterations=4',
  'experimental.skip_taken_actions=true',
]);

function record(iteration: number, task: string, mode: EpisodeRecord['mode'], score: number, tipped: boolean): EpisodeRecord {
  return {
    type: 'episode',
    source: 'train',
    iteration,
    trial: null,
    env_steps: iteration * 40,
    checkpoint: null,
    index: 0,
    group: 0,
    task,
    variation: 1,
    description: `Do the ${task} task.`,
    mode,
    slot: task,
    steps: [
      {
        observation: 'You are in the hall. A red box is here.',
        valid_actions: ['open red box', 'go north'],
        valid_action_count: 2,
        tips: tipped
          ? [
              {
                text: 'The action you took was open red box; you finally scored 35/100.',
                score: 35,
                similarity: 0.9,
                action: 'open red box',
              },
            ]
          : [],
        action: 'open red box',
        reward: score,
        score,
        followed_tip: tipped ? true : null,
      },
    ],
    final_observation: 'The box is open.',
    score,
    success: false,
    reflection: tipped ? 'Open the box first.' : null,
    time: '2025-01-01T00:00:00.000Z',
  };
}

const memoryEpisode: Episode = {
  task: 'power',
  variation: 0,
  group: 0,
  description: 'Find a battery and turn on the lamp.',
  steps: [
    {
      observation: 'You are in the hall. A red box is here.',
      action: 'open red box',
      reward: 10,
      score: 10,
      prompt: [],
      tipSpan: null,
      response: [],
      logprobs: [],
    },
    {
      observation: 'The red box holds a battery.',
      action: 'take battery',
      reward: 25,
      score: 35,
      prompt: [],
      tipSpan: null,
      response: [],
      logprobs: [],
    },
  ],
  finalObservation: 'You carry a battery.',
  score: 35,
  success: false,
};

async function writeRun(): Promise<void> {
  mkdirSync(join(runDir, 'checkpoints', 'iter-000002'), { recursive: true });
  writeFileSync(join(runDir, 'config.yaml'), toYaml(cfg));
  writeFileSync(
    join(runDir, 'metrics.jsonl'),
    [
      { type: 'eval', iteration: 0, train_env_steps: 0, mean_score: 5, success_rate: 0, per_task: [] },
      {
        type: 'train',
        iteration: 1,
        env_steps: 40,
        mean_score: 10,
        success_rate: 0,
        loss: 0.1,
        clip_fraction: 0.02,
        entropy: 2.5,
        tips_followed: null,
      },
      {
        type: 'train',
        iteration: 2,
        env_steps: 80,
        mean_score: 20,
        success_rate: 0.1,
        loss: 0.05,
        clip_fraction: 0.03,
        entropy: 2.1,
        tips_followed: 0.5,
      },
      { type: 'eval', iteration: 2, train_env_steps: 80, mean_score: 15, success_rate: 0.1, per_task: [] },
    ]
      .map((l) => JSON.stringify(l) + '\n')
      .join(''),
  );
  const writer = TrajectoryWriter.fresh(join(runDir, 'trajectories', 'train.jsonl'), { maxBytes: 2 ** 20 });
  writer.append(record(1, 'power', 'plain', 0, false));
  writer.append(record(1, 'clue', 'plain', 30, false));
  writer.append(record(2, 'power', 'tips-off-policy', 35, true));
  writer.append(record(2, 'clue', 'tips-on-policy', 10, true));
  // The memory of the latest checkpoint, written by the trainer's own code.
  const memory = new MemoryRuntime(cfg, resolveAlgo(cfg), {
    embedder: new HashedNgramEmbedder({ dim: cfg.memory.dim }),
    reflector: new TrajectorySummaryReflector(),
    tips: new TipMemory(cfg.memory.dim, { capacity: 100, threshold: 0.5, topK: 3 }),
    novelty: new NoveltyList(0.9),
  });
  await memory.write([memoryEpisode]);
  writeFileSync(join(runDir, 'checkpoints', 'iter-000002', 'memory.json'), JSON.stringify(memory.toJSON()));
  writeFileSync(join(runDir, 'checkpoints', 'latest.json'), JSON.stringify({ checkpoint: 'iter-000002' }));
  // An adaptation of that checkpoint, where adapt puts it by default.
  mkdirSync(adaptDir, { recursive: true });
  writeFileSync(join(adaptDir, 'adapt.json'), JSON.stringify({ method: 'tips', task: 'fetch', memory: cfg.memory, trials: [] }));
  TrajectoryWriter.fresh(join(adaptDir, 'trajectories.jsonl'), { maxBytes: 2 ** 20 }).append({
    ...record(0, 'fetch', 'tips', 5, true),
    source: 'adapt',
    iteration: null,
    trial: 1,
  });
}

function writeCompare(): void {
  mkdirSync(compareDir, { recursive: true });
  writeFileSync(join(compareDir, 'results.md'), '# Comparison: a vs b\n\n| config | runs |\n|---|---|\n| a | 3/3 |\n');
  writeFileSync(join(compareDir, 'results.csv'), 'config,final_score\n"a, quoted",1.5\n');
  writeFileSync(join(compareDir, 'curves.csv'), 'config,train_env_steps,runs,mean_score\na,0,3,20\n');
  writeFileSync(join(compareDir, 'learning_curve.svg'), '<svg xmlns="http://www.w3.org/2000/svg"><text>curve</text></svg>');
}

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: () => any;
}

/** A raw HTTP request, so tests can send the Host and Origin headers a browser would. */
function call(url: string, o: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Reply> {
  return new Promise((resolvePromise, reject) => {
    const req = request(url, { method: o.method ?? 'GET', headers: o.headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolvePromise({ status: res.statusCode!, headers: res.headers, text, json: () => JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(o.body);
  });
}

let dashboard: RunningDashboard;
const idOf = (kind: string) => dashboard.sources().find((s) => s.kind === kind)!.id;
const api = (path: string, o?: Parameters<typeof call>[1]) => call(`${dashboard.url}${path}`, o);

beforeAll(async () => {
  await writeRun();
  writeCompare();
  dashboard = await startDashboard({ paths: [runsDir, join(root, 'results')], port: 0, cwd: root });
});
afterAll(() => dashboard?.close());

describe('discoverSources', () => {
  it('recognises runs, the adapt outputs in their checkpoints, and compare outputs, searching folders that are none of them', () => {
    const found = discoverSources([runsDir, join(root, 'results')], root);
    expect(found.map((s) => [s.kind, s.label])).toEqual([
      ['run', join('runs', 'empo2-seed0')],
      ['adapt', join('runs', 'empo2-seed0', 'checkpoints', 'iter-000002', 'adapt-fetch')],
      ['compare', join('results', 'cmp')],
    ]);
    expect(new Set(found.map((s) => s.id)).size).toBe(3);
    // Ids depend on the path only: the page's links survive a new search.
    expect(discoverSources([runDir], root)[0].id).toBe(found[0].id);
  });

  it('refuses, by name, a path that does not exist, a folder with nothing to show, and a file that is not records', () => {
    expect(() => discoverSources([join(root, 'nope')], root)).toThrow(`${join(root, 'nope')} does not exist`);
    mkdirSync(join(root, 'empty', 'a', 'b'), { recursive: true });
    expect(() => discoverSources(['empty'], root)).toThrow(
      /^empty: no training run \(metrics\.jsonl, config\.yaml\), compare output .* up to 4 folders below it$/,
    );
    writeFileSync(join(root, 'notes.txt'), 'x');
    expect(() => discoverSources(['notes.txt'], root)).toThrow(/notes\.txt is a file but not trajectory records/);
    expect(() => discoverSources([], join(root, 'empty'))).toThrow(/no folder given and .*runs does not exist/);
    expect(discoverSources([join(runDir, 'trajectories', 'train.jsonl')], root).map((s) => s.kind)).toEqual(['records']);
  });
});

describe('startDashboard refuses', () => {
  it('to listen on anything but loopback', async () => {
    await expect(startDashboard({ paths: [runsDir], host: '0.0.0.0', port: 0 })).rejects.toThrow(
      /--host 0\.0\.0\.0: .*loopback only \(127\.0\.0\.1, ::1 or localhost\).*ssh -L/,
    );
    await expect(startDashboard({ paths: [runsDir], host: '192.168.1.5', port: 0 })).rejects.toThrow(/loopback only/);
  });

  it('a bad port, and a port in use', async () => {
    await expect(startDashboard({ paths: [runsDir], port: 70000 })).rejects.toThrow(/--port must be an integer from 0 to 65535, got 70000/);
    const port = Number(new URL(dashboard.url).port);
    await expect(startDashboard({ paths: [runsDir], port })).rejects.toThrow(`port ${port} on 127.0.0.1 is in use`);
  });
});

describe('dashboard routes', () => {
  it('serves the page, its scripts and the vega builds from node_modules, and a summary of every source', async () => {
    const page = await api('/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.text).toContain('/vendor/vega-lite.min.js');
    expect(page.headers['content-security-policy']).toMatch(/default-src 'self'/);
    for (const name of ['app.js', 'api.js', 'dom.js', 'runs.js', 'trajectories.js', 'memory.js', 'compare.js', 'style.css'])
      expect((await api(`/app/${name}`)).status, name).toBe(200);
    const vega = await api('/vendor/vega.min.js');
    expect(vega.status).toBe(200);
    expect(vega.text.length).toBeGreaterThan(100_000);
    const sources = (await api('/api/sources')).json();
    const run = sources.sources.find((s: { kind: string }) => s.kind === 'run');
    expect(run.run).toMatchObject({
      iterations_done: 2,
      iterations_planned: 4,
      env_steps: 80,
      last_eval: { iteration: 2, mean_score: 15 },
      state: 'running',
    });
    expect(run.run.config.algo.name).toBe('empo2');
  });

  it('metrics: the train and eval lines, with every field the curves read', async () => {
    const m = (await api(`/api/sources/${idOf('run')}/metrics`)).json();
    expect(m.train.map((l: { iteration: number; entropy: number }) => [l.iteration, l.entropy])).toEqual([
      [1, 2.5],
      [2, 2.1],
    ]);
    expect(m.evals.map((l: { train_env_steps: number }) => l.train_env_steps)).toEqual([0, 80]);
    expect((await api(`/api/sources/${idOf('compare')}/metrics`)).json().error).toMatch(/is a compare folder, not a training run/);
  });

  it('trajectories: filters by iteration, task, mode, score and shown tips, newest first, with the facets to filter by', async () => {
    const id = idOf('run');
    const list = async (q: string) => (await api(`/api/sources/${id}/trajectories?${q}`)).json();
    const all = await list('');
    expect(all.facets).toEqual({
      sources: ['train'],
      iterations: [1, 2],
      tasks: ['clue', 'power'],
      modes: ['plain', 'tips-on-policy', 'tips-off-policy'],
    });
    expect(all.episodes.map((e: { line: number }) => e.line)).toEqual([4, 3, 2, 1]);
    expect(all.episodes[0]).not.toHaveProperty('offset');
    const lines = async (q: string) => (await list(q)).episodes.map((e: { line: number }) => e.line);
    expect(await lines('iteration=2')).toEqual([4, 3]);
    expect(await lines('task=power')).toEqual([3, 1]);
    expect(await lines('mode=tips-off-policy')).toEqual([3]);
    expect(await lines('min_score=10&max_score=30')).toEqual([4, 2]);
    expect(await lines('tips=1')).toEqual([4, 3]);
    expect(await lines('limit=1&offset=1')).toEqual([3]);
    const bad = await api(`/api/sources/${id}/trajectories?mode=greedy`);
    expect(bad.status).toBe(400);
    expect(bad.json().error).toBe('mode must be one of plain, tips-on-policy, tips-off-policy, tips, reflexion, got "greedy"');
    expect((await api(`/api/sources/${id}/trajectories?min_score=lots`)).json().error).toBe('min_score must be a number, got "lots"');
    expect((await api(`/api/sources/${id}/trajectories?limit=100000`)).status).toBe(400);
  });

  it('one episode in full; an unknown episode, file or source is a 404 naming it', async () => {
    const id = idOf('run');
    const got = (await api(`/api/sources/${id}/episodes/0/3`)).json();
    expect(got.episode).toEqual(record(2, 'power', 'tips-off-policy', 35, true));
    expect(got.file).toBe(join(runDir, 'trajectories', 'train.jsonl'));
    const missing = await api(`/api/sources/${id}/episodes/0/99`);
    expect([missing.status, missing.json().error]).toEqual([
      404,
      `${join(runDir, 'trajectories', 'train.jsonl')} has no episode on line 99`,
    ]);
    expect((await api(`/api/sources/${id}/episodes/5/1`)).json().error).toMatch(/has no trajectory file number 5/);
    const unknown = await api('/api/sources/0123456789ab/trajectories');
    expect([unknown.status, unknown.json().error]).toEqual([
      404,
      'no source with id 0123456789ab (the folder may have been removed; reload the page)',
    ]);
  });

  it("reads a live run's files again as they grow: a new iteration's metrics and episodes show up", async () => {
    const id = idOf('run');
    appendFileSync(
      join(runDir, 'metrics.jsonl'),
      JSON.stringify({ type: 'train', iteration: 3, env_steps: 120, mean_score: 25, success_rate: 0, loss: 0.01 }) + '\n',
    );
    const writer = TrajectoryWriter.resume(join(runDir, 'trajectories', 'train.jsonl'), 2, { maxBytes: 2 ** 20 });
    writer.append(record(3, 'clue', 'plain', 40, false));
    expect((await api(`/api/sources/${id}/metrics`)).json().train.map((l: { iteration: number }) => l.iteration)).toEqual([1, 2, 3]);
    const after = (await api(`/api/sources/${id}/trajectories?iteration=3`)).json();
    expect(after.episodes.map((e: { line: number; score: number }) => [e.line, e.score])).toEqual([[5, 40]]);
  });

  it('a damaged metrics or trajectory line is skipped with a warning naming file and line; the rest is shown', async () => {
    const id = idOf('run');
    const file = join(runDir, 'metrics.jsonl');
    // One damaged line in the middle (not a last line cut short), and one of the wrong shape.
    appendFileSync(
      file,
      '{"type": "train", "iter\n' +
        JSON.stringify({ type: 'eval', iteration: 'three' }) +
        '\n' +
        JSON.stringify({ type: 'train', iteration: 4, env_steps: 160 }) +
        '\n',
    );
    const m = await api(`/api/sources/${id}/metrics`);
    expect(m.status).toBe(200);
    expect(m.json().train.map((l: { iteration: number }) => l.iteration)).toEqual([1, 2, 3, 4]);
    expect(m.json().evals.map((l: { iteration: number }) => l.iteration)).toEqual([0, 2]);
    expect(m.json().warnings).toEqual([
      expect.stringMatching(new RegExp(`^${escape(file)}:6: skipped: not valid JSON`)),
      expect.stringMatching(new RegExp(`^${escape(file)}:7: skipped: unexpected eval line \\(iteration: `)),
    ]);
    // The runs table counts the run's iterations rather than showing it empty.
    const listed = (await api('/api/sources')).json().sources.find((s: { id: string }) => s.id === id);
    expect(listed.run).toMatchObject({ iterations_done: 4, env_steps: 160, problem: null });
    appendFileSync(
      join(runDir, 'trajectories', 'train.jsonl'),
      'not json\n' + JSON.stringify(record(4, 'clue', 'plain', 50, false)) + '\n',
    );
    const list = (await api(`/api/sources/${id}/trajectories`)).json();
    expect(list.files[0].problems).toEqual([
      expect.stringMatching(new RegExp(`^${escape(join(runDir, 'trajectories', 'train.jsonl'))}:6: not valid JSON`)),
    ]);
    expect(list.episodes[0]).toMatchObject({ line: 7, iteration: 4 });
  });
});

describe('memory routes', () => {
  it("lists the latest checkpoint's memory per slot, newest first, searchable", async () => {
    const id = idOf('run');
    const m = (await api(`/api/sources/${id}/memory`)).json();
    expect(m.file).toBe(join(runDir, 'checkpoints', 'iter-000002', 'memory.json'));
    expect(m.slots).toEqual([{ name: 'power', size: 2 }]);
    expect(m.entries.map((e: { action: string }) => e.action)).toEqual(['take battery', 'open red box']);
    expect(m.filters.skip_taken_actions).toBe(true);
    const searched = (await api(`/api/sources/${id}/memory?q=BATTERY`)).json();
    expect(searched.entries.map((e: { action: string }) => e.action)).toEqual(['take battery']);
    const unknown = await api(`/api/sources/${id}/memory?slot=clue`);
    expect([unknown.status, unknown.json().error]).toEqual([400, `${m.file} has no slot "clue" (slots: power)`]);
    expect((await api(`/api/sources/${idOf('compare')}/memory`)).json().error).toMatch(/only runs and adapt outputs have a tip memory/);
    expect((await api(`/api/sources/${idOf('adapt')}/memory`)).json().error).toMatch(/adapt-fetch has no memory\.json/);
  });

  it('retrieves for a chosen state exactly what the trainer would show, with its filters', async () => {
    const id = idOf('run');
    const state = 'You are in the hall. A red box is here.';
    const retrieve = (body: object) =>
      api(`/api/sources/${id}/retrieve`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const got = (await retrieve({ slot: 'power', state, taken: ['take battery'] })).json();
    const runtime = await MemoryRuntime.forRetrieval(
      loadConfig(join(runDir, 'config.yaml')),
      join(runDir, 'checkpoints', 'iter-000002', 'memory.json'),
    );
    const [expected] = await runtime.tipSource()([
      {
        episode: 0,
        job: { task: 'power', variation: 0, group: 0 },
        state,
        taken: ['take battery'],
        scoreSoFar: 0,
        validActions: [],
        oracleAction: () => null,
      },
    ]);
    runtime.dispose();
    expect(got.tips).toEqual(expected);
    // skip_taken_actions is on in this run: the taken action's tip is left out.
    expect(got.tips.map((t: { action: string }) => t.action)).toEqual(['open red box']);
    expect(got.tips[0].similarity).toBeCloseTo(1, 5);
    const bad = await retrieve({ slot: 'power', state: '' });
    expect([bad.status, bad.json().error]).toEqual([400, expect.stringMatching(/^retrieve: state: /)]);
    expect((await retrieve({ slot: 'nope', state })).json().error).toMatch(/has no slot "nope"/);
    const notJson = await api(`/api/sources/${id}/retrieve`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: '{"slot":',
    });
    expect([notJson.status, notJson.json().error]).toEqual([400, expect.stringMatching(/^retrieve: the body is not JSON/)]);
    const text = await api(`/api/sources/${id}/retrieve`, {
      method: 'POST',
      headers: { 'Content-Type': 'text/plain' },
      body: JSON.stringify({ slot: 'power', state }),
    });
    expect(text.status).toBe(415);
    const huge = await api(`/api/sources/${id}/retrieve`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ slot: 'power', state: 'x'.repeat(300_000) }),
    });
    expect(huge.status).toBe(413);
  });
});

describe('compare and adapt sources', () => {
  it('a compare output: its report, tables and plot', async () => {
    const id = idOf('compare');
    const c = (await api(`/api/sources/${id}`)).json().compare;
    expect(c.results_md).toContain('# Comparison: a vs b');
    expect(c.results_csv).toEqual([
      ['config', 'final_score'],
      ['a, quoted', '1.5'],
    ]);
    expect(c.plot).toBe(true);
    const plot = await api(`/api/sources/${id}/plot.svg`);
    expect([plot.status, plot.headers['content-type'], plot.text]).toEqual([
      200,
      'image/svg+xml',
      '<svg xmlns="http://www.w3.org/2000/svg"><text>curve</text></svg>',
    ]);
    expect((await api(`/api/sources/${idOf('run')}/plot.svg`)).status).toBe(404);
  });

  it("an adapt output: its report and its trials' episodes", async () => {
    const id = idOf('adapt');
    expect((await api(`/api/sources/${id}`)).json().adapt).toMatchObject({ method: 'tips', task: 'fetch' });
    const list = (await api(`/api/sources/${id}/trajectories`)).json();
    expect(list.facets.iterations).toEqual([1]);
    expect(list.episodes.map((e: { source: string; trial: number; mode: string }) => [e.source, e.trial, e.mode])).toEqual([
      ['adapt', 1, 'tips'],
    ]);
  });
});

describe('what the dashboard refuses', () => {
  it('paths that leave it, unknown routes and methods, and never a file outside its own list', async () => {
    for (const path of [
      '/app/../../package.json',
      '/app/..%2F..%2Fpackage.json',
      '/app/%2e%2e/%2e%2e/package.json',
      '/vendor/..%2Fpackage.json',
      '/app/style.css%00.js',
      '/api/sources/..%2F..%2F',
    ]) {
      const r = await api(path);
      expect(r.status, path).toBeGreaterThanOrEqual(400);
      expect(r.text, path).not.toContain('"devDependencies"');
    }
    expect((await api('/app/..%2F..%2Fpackage.json')).json().error).toMatch(/leaves the dashboard/);
    expect((await api('/app/secrets.js')).json().error).toBe('no page file secrets.js');
    expect((await api('/etc/passwd')).status).toBe(404);
    const post = await api('/api/sources', { method: 'POST' });
    expect([post.status, post.headers.allow]).toEqual([405, 'GET']);
  });

  it('requests under another host name (DNS rebinding) or from another origin', async () => {
    const port = new URL(dashboard.url).port;
    const rebound = await api('/api/sources', { headers: { Host: `evil.example:${port}` } });
    expect([rebound.status, rebound.json().error]).toEqual([
      403,
      `Host "evil.example:${port}" does not name this dashboard: open it as ${dashboard.url} or with localhost`,
    ]);
    expect((await api('/api/sources', { headers: { Host: `localhost:${port}` } })).status).toBe(200);
    const foreign = await api('/api/sources', { headers: { Origin: 'http://evil.example' } });
    expect(foreign.status).toBe(403);
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
