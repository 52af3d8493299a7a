/**
 * Zero-shot play of a real model against the random policy, on held-out variations of the three
 * environments, with constrained and free-text decoding (the table of results/smollm2-zero-shot/). For each cell (environment,
 * task, policy) it records every episode's score and actions, the action distribution (first word of
 * each action, and the share of actions outside the valid list), and the wall time per episode; where
 * the model scores at or below random it writes two traced episodes (the whole dialogue) to look at.
 *
 *   npx tsx bench/zero-shot.ts --model models/smollm2-135m-instruct [--engine torch|tfjs]
 *     [--sets builtin,scienceworld,webshop] [--policies constrained,free,random] [--temperature 1]
 *     [--builtin-episodes 10] [--sw-tasks boil,...] [--sw-variations 5] [--webshop-goals 50]
 *     [--random-rollouts 10] [--set key=value ...] [--out results/real-model/zero-shot]
 *
 * Cells already in <out>/cells are kept (re-running resumes); the report is <out>/zero-shot.md.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createEnv, environmentCorpus, Rng, type Config, type Env } from '../src/index.ts';
import {
  applyOverride,
  ConfigSchema,
  createTrainingEngine,
  environmentCount,
  EpisodeProgress,
  initBackend,
  rolloutSettings,
  runEpisodesInChunks,
  validateConfig,
  type Episode,
  type PolicyEngine,
  type RolloutJob,
} from '../src/internals.ts';

const { values: a } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/smollm2-135m-instruct' },
    engine: { type: 'string', default: 'torch' },
    sets: { type: 'string', default: 'builtin,scienceworld,webshop' },
    policies: { type: 'string', default: 'constrained,free,random' },
    temperature: { type: 'string', default: '1' },
    'builtin-episodes': { type: 'string', default: '10' },
    'sw-tasks': {
      type: 'string',
      default: 'find-living-thing,find-non-living-thing,lifespan-longest-lived,measure-melting-point-known-substance,test-conductivity',
    },
    'sw-variations': { type: 'string', default: '5' },
    'webshop-goals': { type: 'string', default: '50' },
    'random-rollouts': { type: 'string', default: '10' },
    set: { type: 'string', short: 's', multiple: true, default: [] },
    out: { type: 'string', default: 'results/real-model/zero-shot' },
  },
});

type Policy = 'constrained' | 'free' | 'random';
interface EpisodeRecord {
  variation: number;
  score: number;
  success: boolean;
  actions: string[];
  /** Per action: whether it was one of the valid actions of its state. */
  valid: boolean[];
}
interface Cell {
  set: string;
  task: string;
  policy: Policy;
  temperature: number;
  seconds: number;
  episodes: EpisodeRecord[];
}

const SETS: Record<string, { env: Partial<Config['env']>; tasks: (env: Env) => string[]; variations: number }> = {
  builtin: { env: { name: 'builtin' }, tasks: (env) => env.tasks(), variations: Number(a['builtin-episodes']) },
  scienceworld: {
    env: { name: 'scienceworld', max_instances: 5, options: { simplification: 'easy' } },
    tasks: () => a['sw-tasks']!.split(','),
    variations: Number(a['sw-variations']),
  },
  webshop: { env: { name: 'webshop', max_instances: 25 }, tasks: () => ['webshop'], variations: Number(a['webshop-goals']) },
};
const sets = a.sets!.split(',').filter(Boolean);
const policies = a.policies!.split(',').filter(Boolean) as Policy[];
for (const s of sets) if (!SETS[s]) throw new Error(`--sets: unknown set "${s}" (known: ${Object.keys(SETS).join(', ')})`);
for (const p of policies) if (!['constrained', 'free', 'random'].includes(p)) throw new Error(`--policies: unknown policy "${p}"`);
const temperature = Number(a.temperature);
const out = a.out!;
mkdirSync(join(out, 'cells'), { recursive: true });
mkdirSync(join(out, 'traces'), { recursive: true });
const cellFile = (set: string, task: string, policy: Policy) => join(out, 'cells', `${set}-${task}-${policy}.json`);
const partialCellFile = (set: string, task: string, policy: Policy) => join(out, 'cells', `${set}-${task}-${policy}.partial.json`);

function configFor(set: string, policy: Policy): Config {
  const raw: Record<string, unknown> = {
    model: { path: a.model, engine: a.engine, torch: { device: 'cpu' } },
    env: { ...SETS[set].env, eval_split: 'test' },
    rollout: { constrained: policy === 'constrained', eval_temperature: temperature },
  };
  for (const o of a.set!) applyOverride(raw, o);
  return validateConfig(raw, 'bench/zero-shot.ts');
}

let engine = null as { engine: PolicyEngine; close(): Promise<void> } | null;
async function policyEngine(cfg: Config): Promise<PolicyEngine> {
  if (!engine) {
    await initBackend();
    engine = await createTrainingEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
  }
  return engine.engine;
}

/**
 * The random policy: uniform over the valid actions; on WebShop's search page it searches the instruction
 * (as bench/webshop.ts). --random-rollouts episodes per variation, since it is cheap and noisy.
 */
async function randomEpisodes(env: Env, task: string, variations: number[], rng: Rng): Promise<EpisodeRecord[]> {
  const records: EpisodeRecord[] = [];
  for (const variation of variations.flatMap((v) => Array.from({ length: Number(a['random-rollouts']) }, () => v))) {
    const r = await env.reset(task, variation, 0);
    const instruction = r.task;
    let valid = r.validActions;
    const rec: EpisodeRecord = { variation, score: 0, success: false, actions: [], valid: [] };
    for (let t = 0; t < env.maxSteps(task) && valid.length > 0; t++) {
      const action = valid[0].startsWith('search[') ? `search[${instruction}]` : rng.pick(valid);
      const s = await env.step(action);
      rec.actions.push(action);
      rec.valid.push(true);
      rec.score = s.score;
      valid = s.validActions;
      if (s.done) break;
    }
    rec.success = rec.score >= 100;
    records.push(rec);
  }
  return records;
}

function record(e: Episode, validOf: (e: Episode, t: number) => readonly string[]): EpisodeRecord {
  return {
    variation: e.variation,
    score: e.score,
    success: e.success,
    actions: e.steps.map((s) => s.action),
    valid: e.steps.map((s, t) => validOf(e, t).includes(s.action)),
  };
}

async function runCell(set: string, task: string, policy: Policy): Promise<Cell> {
  const cfg = configFor(set, policy);
  const probe = await createEnv({ ...cfg.env, tasks: cfg.env.name === 'scienceworld' ? [task] : cfg.env.tasks });
  const variations = probe.variations(task, 'test').slice(0, SETS[set].variations);
  const t0 = performance.now();
  if (policy === 'random') {
    const episodes = await randomEpisodes(probe, task, variations, new Rng(cells.length + 1));
    await probe.close();
    return { set, task, policy, temperature, seconds: (performance.now() - t0) / 1000, episodes };
  }
  const eng = await policyEngine(cfg);
  const envs: Env[] = [probe];
  try {
    while (envs.length < environmentCount(cfg, variations.length))
      envs.push(await createEnv({ ...cfg.env, tasks: cfg.env.name === 'scienceworld' ? [task] : cfg.env.tasks }));
    const jobs: RolloutJob[] = variations.map((variation, i) => ({ task, variation, group: i }));
    // Valid actions per step are what the observation listed; the environment re-lists them, so replay is not needed:
    // rollouts record the valid actions through a wrapping env.
    const seen = new Map<string, string[][]>();
    const wrapped = envs.map((env) => watchValid(env, seen));
    const validOf = (e: Episode, t: number) => seen.get(`${e.task}:${e.variation}`)?.[t] ?? [];
    // A long cell (WebShop free text: hours on one core) saves every finished chunk of env.max_instances
    // episodes and resumes after the last one; each chunk keeps the seed it has in one uninterrupted run.
    const partialFile = partialCellFile(set, task, policy);
    const partial = existsSync(partialFile)
      ? (JSON.parse(readFileSync(partialFile, 'utf8')) as { seconds: number; chunk: number; episodes: EpisodeRecord[] })
      : null;
    if (partial && partial.chunk !== envs.length) {
      throw new Error(
        `${partialFile} was made with ${partial.chunk} episodes in lockstep, this run has ${envs.length} (env.max_instances): use the same, or delete the file to start the cell again`,
      );
    }
    const done: EpisodeRecord[] = partial?.episodes ?? [];
    let seconds = partial?.seconds ?? 0;
    if (partial) console.log(`${set} ${task} ${policy}: resuming after ${done.length} of ${jobs.length} episodes (${partialFile})`);
    for (let start = done.length; start < jobs.length; start += envs.length) {
      const t1 = performance.now();
      const part = jobs.slice(start, start + envs.length);
      const progress = new EpisodeProgress(part, { label: `${set} ${task} ${policy}` });
      const { episodes } = await runEpisodesInChunks(wrapped, eng, part, {
        settingsFor: (s) => rolloutSettings(cfg, true, 2_024 + start + s),
        progress,
      });
      progress.finish();
      if (start === 0) {
        // Two whole dialogues as the model saw them, to look at when a score is low.
        const traces = episodes.slice(0, 2).map((e) => {
          const last = e.steps.at(-1);
          const dialogue = last ? eng.tokenizer.decode([...last.prompt, ...last.response]) : '(no step)';
          return `=== ${e.task} variation ${e.variation}: score ${e.score}\n${dialogue}\n--- final observation: ${e.finalObservation}\n`;
        });
        writeFileSync(join(out, 'traces', `${set}-${task}-${policy}.txt`), traces.join('\n'));
      }
      done.push(...episodes.map((e) => record(e, validOf)));
      seconds += (performance.now() - t1) / 1000;
      writeFileSync(partialFile, JSON.stringify({ seconds, chunk: envs.length, episodes: done }) + '\n');
      const mean = done.reduce((sum, e) => sum + e.score, 0) / done.length;
      console.log(
        `${set} ${task} ${policy}: ${done.length}/${jobs.length} episodes, mean score so far ${mean.toFixed(1)}, ${(seconds / done.length).toFixed(1)} s per episode`,
      );
    }
    return { set, task, policy, temperature, seconds, episodes: done };
  } finally {
    await Promise.all(envs.map((e) => e.close()));
  }
}

/** An env that remembers the valid actions each state offered, per (task, variation). */
function watchValid(env: Env, seen: Map<string, string[][]>): Env {
  let key = '';
  return Object.assign(Object.create(env) as Env, {
    reset: async (task: string, variation: number, seed?: number) => {
      const r = await env.reset(task, variation, seed);
      key = `${task}:${variation}`;
      seen.set(key, [r.validActions]);
      return r;
    },
    step: async (action: string) => {
      const r = await env.step(action);
      seen.get(key)!.push(r.validActions);
      return r;
    },
  });
}

const cells: Cell[] = [];
for (const set of sets) {
  const probe = await createEnv({ ...ConfigSchema.parse({ env: SETS[set].env }).env });
  const tasks = SETS[set].tasks(probe);
  await probe.close();
  for (const task of tasks) {
    for (const policy of policies) {
      const file = cellFile(set, task, policy);
      if (existsSync(file)) {
        cells.push(JSON.parse(readFileSync(file, 'utf8')) as Cell);
        continue;
      }
      const cell = await runCell(set, task, policy);
      writeFileSync(file, JSON.stringify(cell) + '\n');
      rmSync(partialCellFile(set, task, policy), { force: true });
      cells.push(cell);
      const s = summary(cell);
      console.log(
        `${set} ${task} ${policy}: score ${s.score.toFixed(1)}, success ${(s.success * 100).toFixed(0)}%, ${s.perEpisode.toFixed(1)} s per episode`,
      );
    }
  }
}
if (engine) await engine.close();

function summary(c: Cell) {
  const n = c.episodes.length;
  const actions = c.episodes.flatMap((e) => e.actions);
  const verbs = new Map<string, number>();
  for (const act of actions) {
    const verb = act.split(/[\s[]/)[0].toLowerCase() || '(empty)';
    verbs.set(verb, (verbs.get(verb) ?? 0) + 1);
  }
  const top = [...verbs.entries()]
    .sort((x, y) => y[1] - x[1])
    .slice(0, 4)
    .map(([v, k]) => `${v} ${Math.round((100 * k) / Math.max(1, actions.length))}%`)
    .join(', ');
  const invalid = c.episodes.flatMap((e) => e.valid).filter((v) => !v).length / Math.max(1, actions.length);
  return {
    n,
    score: c.episodes.reduce((s, e) => s + e.score, 0) / Math.max(1, n),
    success: c.episodes.filter((e) => e.success).length / Math.max(1, n),
    top,
    invalid,
    steps: actions.length / Math.max(1, n),
    perEpisode: c.seconds / Math.max(1, n),
  };
}

const lines = [
  `Zero-shot \`${a.model}\` (engine ${a.engine}) at temperature ${temperature} on held-out (test) variations, against the random policy.${a.set!.length ? ` Overrides: ${a.set!.map((x) => `\`${x}\``).join(' ')}.` : ''}`,
  '',
];
lines.push(
  '| set | task | policy | episodes | score | success | steps/episode | actions (first word) | not a valid action | s/episode |',
  '|---|---|---|---|---|---|---|---|---|---|',
);
for (const c of cells) {
  const s = summary(c);
  lines.push(
    `| ${c.set} | ${c.task} | ${c.policy} | ${s.n} | ${s.score.toFixed(1)} | ${(s.success * 100).toFixed(0)}% | ${s.steps.toFixed(1)} | ${s.top} | ${(s.invalid * 100).toFixed(0)}% | ${c.policy === 'random' ? '–' : s.perEpisode.toFixed(1)} |`,
  );
}
const report = lines.join('\n') + '\n';
writeFileSync(join(out, 'zero-shot.md'), report);
console.log('\n' + report);
