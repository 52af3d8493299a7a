/**
 * How often the stand-in writer (oracle-writer.ts) places real episodes, before and after placing by the
 * rooms and things the prompt's observations show (RUNS.md, the deviation on placement). Each episode of the given trajectory files
 * (the trainer's trajectory records: src/trajectory/format.ts) is rendered as the trainer asks its writer:
 * `reflectionPrompt` of the episode as `trajectoryOf` reads it (task: the episode's description), the last
 * 12 steps. Counted per family: placed (and of those, placed on the true episode's plan), ambiguous (several
 * fit, different plans), unplaced; "before" is the writer as first committed (task text, then first
 * observation), "after" adds the check of what the last 12 steps show (`place` in oracle-writer.ts).
 *
 *   npx tsx results/strong-writer/placement-check.ts FILE.jsonl...
 */
import { readFileSync } from 'node:fs';
// Deep on purpose: the trainer's own reflection prompt, so each episode is rendered as the trainer asks its writer.
import { reflectionPrompt } from '../../src/memory/reflector.ts';
import { indexEpisodes, place, type Placement } from './oracle-writer.ts';

/** The writer's own history length (src/trainer/memory-runtime.ts REFLECTION_HISTORY_STEPS). */
const HISTORY_STEPS = 12;
const FAMILIES = ['power', 'clue', 'unlock'];

interface Record_ {
  type: string;
  task: string;
  variation: number;
  description: string;
  steps: { observation: string; action: string; score: number }[];
  final_observation: string;
  score: number;
  success: boolean;
}

const files = process.argv.slice(2);
if (files.length === 0) throw new Error('usage: placement-check.ts FILE.jsonl...');
const t0 = performance.now();
const index = await indexEpisodes(FAMILIES);
const startup = (performance.now() - t0) / 1000;
const planOf = new Map([...index.values()].flat().map((e) => [`${e.family}#${e.variation}`, e.plan.join('|')]));

type Row = {
  episodes: number;
  long: number;
  placed: number;
  correct: number;
  ambiguous: number;
  unplaced: number;
  /** Candidates that fit: where placed by the rooms shown, and where ambiguous. */
  fit: { consistent: number[]; ambiguous: number[] };
};
const empty = (): Row => ({
  episodes: 0,
  long: 0,
  placed: 0,
  correct: 0,
  ambiguous: 0,
  unplaced: 0,
  fit: { consistent: [], ambiguous: [] },
});
const rows = { before: new Map<string, Row>(), after: new Map<string, Row>() };
let seconds = 0;
let prompts = 0;
for (const file of files)
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const r = JSON.parse(line) as Record_;
    if (r.type !== 'episode' || !FAMILIES.includes(r.task)) continue;
    const prompt = reflectionPrompt(
      {
        task: r.description,
        steps: r.steps.map((s) => ({ observation: s.observation, action: s.action, score: s.score })),
        finalObservation: r.final_observation,
        score: r.score,
        success: r.success,
      },
      HISTORY_STEPS,
    );
    const truth = planOf.get(`${r.task}#${r.variation}`)!;
    for (const [when, consistency] of [
      ['before', false],
      ['after', true],
    ] as const) {
      const t = performance.now();
      const p: Placement = place(index, prompt, { consistency });
      if (consistency) {
        seconds += (performance.now() - t) / 1000;
        prompts++;
      }
      for (const key of [r.task, 'all']) {
        const row = rows[when].get(key) ?? empty();
        rows[when].set(key, row);
        row.episodes++;
        if (r.steps.length > HISTORY_STEPS) row.long++;
        if (p.how === 'ambiguous') row.ambiguous++;
        else if (p.how === 'unplaced') row.unplaced++;
        else {
          row.placed++;
          if (p.episodes[0].plan.join('|') === truth) row.correct++;
        }
        if (p.how === 'consistent' || p.how === 'ambiguous') row.fit[p.how].push(p.episodes.length);
      }
    }
  }

const pct = (n: number, d: number) => (d ? `${((100 * n) / d).toFixed(1)}%` : '–');
console.log(`files: ${files.join(', ')}`);
console.log(
  `start-up (index, layouts and plans of ${[...index.values()].flat().length} episodes): ${startup.toFixed(2)} s; placement: ${((1000 * seconds) / prompts).toFixed(2)} ms per prompt`,
);
console.log('');
console.log(
  '| placing by | family | episodes | of them > 12 steps | placed | placed on the true plan | ambiguous | unplaced | candidates that fit, mean (max): placed by what is shown / ambiguous |',
);
console.log('|---|---|---|---|---|---|---|---|---|');
for (const when of ['before', 'after'] as const)
  for (const key of [...FAMILIES, 'all']) {
    const x = rows[when].get(key);
    if (!x) continue;
    const how = when === 'before' ? 'task text, first observation' : '+ what the last 12 steps show';
    const mean = (xs: number[]) => (xs.length ? `${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(2)} (${Math.max(...xs)})` : '–');
    const fit = `${mean(x.fit.consistent)} / ${mean(x.fit.ambiguous)}`;
    console.log(
      `| ${how} | ${key} | ${x.episodes} | ${x.long} | ${x.placed} (${pct(x.placed, x.episodes)}) | ${x.correct} (${pct(x.correct, x.placed)} of placed) | ${x.ambiguous} | ${x.unplaced} | ${fit} |`,
    );
  }
