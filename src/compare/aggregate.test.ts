/**
 * Aggregation on hand-made runs whose expected numbers were worked out by hand (in the comments).
 * Config A takes more environment steps per iteration than config B, so equal-steps comparison
 * and the common range matter.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { inertInBoth } from '../config/schema.ts';
import { aggregate, meanCurve, type RunRecord } from './aggregate.ts';
import { bracketingCheckpoints, checkpointScoreAt, checkpointTaskScoresAt, type KeptCheckpoint } from './checkpoint-evals.ts';
import type { FinalEval } from './final-eval.ts';
import { parseMetrics } from './metrics.ts';
import { reportCompare, parseSeeds, parseSteps, configDifferences } from './runner.ts';
import { formatPairedDifference, interpolateAt, normalizedArea, pairedDifference, summarize } from './stats.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-compare-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

type Point = [iteration: number, steps: number, score: number];

function evalLine([iteration, steps, score]: Point, perTask: Record<string, number> = {}, success = score / 100): string {
  return JSON.stringify({
    type: 'eval',
    iteration,
    train_env_steps: steps,
    episodes: 4,
    mean_score: score,
    success_rate: success,
    env_steps: 40,
    per_task: Object.entries(perTask).map(([task, s]) => ({ task, episodes: 2, mean_score: s, success_rate: s / 100 })),
  });
}

function trainLine(iteration: number, elapsed: number): string {
  return JSON.stringify({
    type: 'train',
    iteration,
    env_steps: iteration * 10,
    mean_score: 0,
    elapsed_seconds: elapsed,
    memory_seconds: 0.1,
    some_future_key: { nested: true },
  });
}

/** A run folder as the trainer leaves it: config.yaml (only the iteration count matters here) and metrics.jsonl. */
function writeRun(out: string, label: string, seed: number, iterations: number, lines: string[]): void {
  const dir = join(out, label, `seed${seed}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.yaml'), `seed: ${seed}\ntrain:\n  iterations: ${iterations}\n`);
  writeFileSync(join(dir, 'metrics.jsonl'), lines.join('\n') + '\n');
}

const A: Point[][] = [
  [
    [0, 0, 10],
    [1, 10, 30],
    [2, 20, 50],
  ],
  [
    [0, 0, 20],
    [1, 8, 20],
    [2, 16, 60],
  ],
  [
    [0, 0, 0],
    [1, 12, 30],
    [2, 24, 30],
  ],
];
const A_TASKS = [
  { fetch: 40, maze: 60 },
  { fetch: 50, maze: 70 },
  { fetch: 20, maze: 40 },
];
const B: Point[][] = [
  [
    [0, 0, 10],
    [1, 5, 20],
    [2, 10, 40],
  ],
  [
    [0, 0, 10],
    [1, 6, 10],
    [2, 12, 70],
  ],
];

function record(
  label: string,
  seed: number,
  points: Point[],
  perTask?: Record<string, number>,
  status: RunRecord['status'] = 'finished',
): RunRecord {
  const text = points.map((p, i) => evalLine(p, i === points.length - 1 ? perTask : {})).join('\n');
  return {
    label,
    seed,
    dir: `/x/${label}/seed${seed}`,
    status,
    metrics: parseMetrics(text, 'mem'),
    wallSeconds: 100 + seed,
    wallSource: 'compare',
  };
}

describe('stats', () => {
  it('summarize: mean, sample std (n − 1), min, max; no std from one value', () => {
    const s = summarize([50, 60, 30])!;
    expect(s.mean).toBeCloseTo(46.6667, 4);
    expect(s.std).toBeCloseTo(Math.sqrt(233.3333), 4); // squared deviations 11.11 + 177.78 + 277.78, over 2
    expect([s.min, s.max, s.n]).toEqual([30, 60, 3]);
    expect(summarize([7])).toEqual({ n: 1, mean: 7, std: null, min: 7, max: 7 });
    expect(summarize([])).toBeNull();
    expect(() => summarize([1, NaN])).toThrow(/finite/);
  });

  it('interpolateAt: linear between points, the last of repeated x, null outside', () => {
    const c = [
      { x: 0, y: 0 },
      { x: 12, y: 30 },
      { x: 12, y: 36 },
      { x: 20, y: 40 },
    ];
    expect(interpolateAt(c, 10)).toBeCloseTo(25, 10);
    expect(interpolateAt(c, 12)).toBe(36);
    expect(interpolateAt(c, 16)).toBeCloseTo(38, 10);
    expect(interpolateAt(c, 0)).toBe(0);
    expect(interpolateAt(c, 20)).toBe(40);
    expect(interpolateAt(c, 20.5)).toBeNull();
    expect(interpolateAt(c, -1)).toBeNull();
    expect(interpolateAt([], 0)).toBeNull();
  });

  it('normalizedArea: trapezoids over the range with interpolated ends, divided by its width', () => {
    const c = [
      { x: 0, y: 20 },
      { x: 8, y: 20 },
      { x: 16, y: 60 },
    ];
    // 0–8 at 20 (area 160) plus 8–10 from 20 to 30 (area 50): 210 / 10.
    expect(normalizedArea(c, 0, 10)).toBeCloseTo(21, 10);
    // 4–8 at 20 (80) plus 8–12 from 20 to 40 (120): 200 / 8.
    expect(normalizedArea(c, 4, 12)).toBeCloseTo(25, 10);
    expect(normalizedArea(c, 8, 8)).toBe(20);
    expect(normalizedArea(c, 0, 17)).toBeNull();
    expect(() => normalizedArea(c, 5, 4)).toThrow(/before it starts/);
  });

  it('pairedDifference: per-seed differences on common seeds, mean, std and the 95% t-interval', () => {
    const reference = new Map([
      [3, 10],
      [0, 10],
      [1, 10],
      [2, 10],
      [9, 50],
    ]);
    const other = new Map([
      [2, 13],
      [0, 11],
      [1, 12],
      [3, 14],
      [7, 99],
    ]);
    const d = pairedDifference(reference, other)!;
    expect(d.seeds).toEqual([0, 1, 2, 3]); // seeds 7 and 9 have no partner
    expect(d.diffs).toEqual([1, 2, 3, 4]);
    expect(d.mean).toBe(2.5);
    expect(d.std).toBeCloseTo(Math.sqrt(5 / 3), 12); // squared deviations 2.25 + 0.25 + 0.25 + 2.25, over 3
    // t(0.975, 3) = 3.182446 (Student-t tables); half-width 3.182446 · 1.290994 / 2 = 2.054260.
    expect(d.ci95![0]).toBeCloseTo(0.44574, 5);
    expect(d.ci95![1]).toBeCloseTo(4.55426, 5);
    expect([d.wins, d.losses, d.ties]).toEqual([4, 0, 0]);
    // t(0.975, 9) = 2.262157: ten differences alternating 1 and −1 have mean 0, std √(10/9).
    const ten = pairedDifference(
      new Map(Array.from({ length: 10 }, (_, s) => [s, 0])),
      new Map(Array.from({ length: 10 }, (_, s) => [s, s % 2 ? -1 : 1])),
    )!;
    expect(ten.ci95![1]).toBeCloseTo((2.262157 * Math.sqrt(10 / 9)) / Math.sqrt(10), 5);
    expect([ten.wins, ten.losses, ten.ties]).toEqual([5, 5, 0]);
    const one = pairedDifference(new Map([[0, 5]]), new Map([[0, 5]]))!;
    expect([one.mean, one.std, one.ci95, one.ties]).toEqual([0, null, null, 1]);
    expect(pairedDifference(new Map([[0, 1]]), new Map([[1, 1]]))).toBeNull();
  });

  it('formatPairedDifference: signed mean and interval to one decimal, then seeds ahead / behind', () => {
    // The four-seed case above: mean 2.5, interval [0.44574, 4.55426].
    expect(
      formatPairedDifference(
        pairedDifference(
          new Map([
            [0, 10],
            [1, 10],
            [2, 10],
            [3, 10],
          ]),
          new Map([
            [0, 11],
            [1, 12],
            [2, 13],
            [3, 14],
          ]),
        ),
      ),
    ).toBe('+2.5 [+0.4, +4.6], 4 ahead / 0 behind');
    expect(formatPairedDifference(pairedDifference(new Map([[0, 3]]), new Map([[0, 1]])))).toBe('-2.0 [–], 0 ahead / 1 behind');
    expect(formatPairedDifference(null)).toBe('–');
  });
});

describe('metrics.jsonl parsing', () => {
  it('keeps the last line per iteration (a resumed run re-logs), passes unknown keys through, sorts by iteration', () => {
    const text = [
      evalLine([0, 0, 5]),
      trainLine(1, 3),
      evalLine([1, 10, 99]),
      trainLine(2, 6),
      trainLine(1, 4),
      evalLine([1, 10, 30]),
    ].join('\n');
    const m = parseMetrics(text, 'run/metrics.jsonl');
    expect(m.evals.map((e) => [e.iteration, e.mean_score])).toEqual([
      [0, 5],
      [1, 30],
    ]);
    expect(m.train.map((t) => [t.iteration, t.elapsed_seconds])).toEqual([
      [1, 4],
      [2, 6],
    ]);
    expect(m.train[0].some_future_key).toEqual({ nested: true });
    expect(m.evals[0].episodes).toBe(4);
  });

  it('ignores a truncated last line with a warning, but a broken line earlier is an error naming file and line', () => {
    const good = evalLine([0, 0, 5]);
    const m = parseMetrics(`${good}\n{"type":"eval","itera\n`, 'r/metrics.jsonl');
    expect(m.evals).toHaveLength(1);
    expect(m.warnings[0]).toMatch(/r\/metrics\.jsonl:2: ignored a truncated last line/);
    expect(() => parseMetrics(`{"type":"eval","itera\n${good}\n`, 'r/metrics.jsonl')).toThrow(/r\/metrics\.jsonl:1: not valid JSON/);
  });

  it('an invalid evaluation (too many failed episodes: null scores) is left out with a warning, not read as a score', () => {
    const invalid = JSON.stringify({
      ...JSON.parse(evalLine([1, 10, 30])),
      mean_score: null,
      success_rate: null,
      failed: 4,
      invalid: '4 of 4 episodes failed',
    });
    const m = parseMetrics([evalLine([0, 0, 5]), trainLine(1, 3), invalid].join('\n'), 'r/metrics.jsonl');
    expect(m.evals.map((e) => e.iteration)).toEqual([0]);
    expect(m.warnings).toEqual(['r/metrics.jsonl:3: the evaluation at iteration 1 is invalid (4 of 4 episodes failed); it has no score']);
  });

  it('an eval line without a needed field is an error naming the field', () => {
    const bad = JSON.stringify({ type: 'eval', iteration: 3, mean_score: 1, success_rate: 0 });
    expect(() => parseMetrics(bad, 'r/metrics.jsonl')).toThrow(/r\/metrics\.jsonl:1: unexpected eval line \(train_env_steps:/);
  });
});

describe('aggregate', () => {
  const groups = [
    { label: 'A', runs: A.map((p, seed) => record('A', seed, p, A_TASKS[seed])) },
    { label: 'B', runs: B.map((p, seed) => record('B', seed, p, { fetch: p.at(-1)![2] })) },
  ];
  const cmp = aggregate(groups);
  const [a, b] = cmp.configs;

  it('the common range ends at the earliest last evaluation over all runs', () => {
    expect(cmp.commonRange).toEqual({ from: 0, to: 10 });
    expect(cmp.equalSteps).toEqual([10]);
  });

  it('final score and success over seeds', () => {
    expect(a.finalScore!.mean).toBeCloseTo(46.6667, 4);
    expect(a.finalScore!.std).toBeCloseTo(15.2753, 4);
    expect(b.finalScore!.mean).toBe(55);
    expect(b.finalScore!.std).toBeCloseTo(21.2132, 4); // |70 − 40| / √2
    expect(a.finalSuccess!.mean).toBeCloseTo(0.466667, 5);
    expect(a.finalEnvSteps!.mean).toBe(20);
    expect(b.finalEnvSteps!.mean).toBe(11);
  });

  it('score at equal env steps interpolates each seed', () => {
    // A at 10 steps: 30 (on a point), 20 + 40·2/8 = 30, 30·10/12 = 25.
    expect(a.scoreAtSteps[0].score!.mean).toBeCloseTo(85 / 3, 10);
    expect(a.scoreAtSteps[0].score!.std).toBeCloseTo(Math.sqrt(25 / 3), 10);
    // B at 10 steps: 40 (on a point), 10 + 60·4/6 = 50.
    expect(b.scoreAtSteps[0].score!.mean).toBeCloseTo(45, 10);
    expect(b.scoreAtSteps[0].score!.std).toBeCloseTo(Math.sqrt(50), 10);
  });

  it('AUC is the average score over the common range', () => {
    // A: 20, 21, 12.5; B: 22.5, 18.
    expect(a.auc!.mean).toBeCloseTo(53.5 / 3, 10);
    expect(a.auc!.std).toBeCloseTo(Math.sqrt((2.1667 ** 2 + 3.1667 ** 2 + 5.3333 ** 2) / 2), 3);
    expect(b.auc!.mean).toBeCloseTo(20.25, 10);
    expect(b.auc!.std).toBeCloseTo(Math.sqrt(10.125), 10);
  });

  it('per-task final scores and wall time', () => {
    expect(a.perTask.map((t) => [t.task, t.score!.mean])).toEqual([
      ['fetch', expect.closeTo(110 / 3, 10)],
      ['maze', expect.closeTo(170 / 3, 10)],
    ]);
    expect(b.perTask[0].score!.mean).toBe(55);
    expect(a.wallSeconds!.mean).toBe(101);
  });

  it('the mean curve uses every x any seed evaluated at, inside the range all seeds cover', () => {
    expect(b.curve.map((p) => [p.x, p.mean, p.min, p.max])).toEqual([
      [0, 10, 10, 10],
      [5, 15, 10, 20],
      [6, 17, 10, 24],
      [10, 45, 40, 50],
    ]);
    expect(meanCurve([[{ x: 3, y: 1 }]])).toEqual([{ x: 3, n: 1, mean: 1, std: null, min: 1, max: 1 }]);
  });

  it('explicit equal-steps points leave out runs that did not reach them, and say so', () => {
    const c = aggregate(groups, { atSteps: [16] });
    expect(c.configs[0].scoreAtSteps[0].score!.n).toBe(3);
    expect(c.configs[0].scoreAtSteps[0].score!.mean).toBeCloseTo(44, 10); // 30 + 20·6/10 = 42, 60, 30
    expect(c.configs[1].scoreAtSteps[0].score).toBeNull();
    expect(c.notes.join('\n')).toMatch(/score @ 16 steps leaves out 2 run\(s\).*B\/seed0, B\/seed1/);
  });

  it('every other config is paired with the first on the seeds both ran', () => {
    // B − A at 10 steps: seed 0 40 − 30, seed 1 50 − 30; A's seed 2 has no partner.
    const [atSteps, auc] = cmp.paired;
    expect([atSteps.label, atSteps.reference, atSteps.metric]).toEqual(['B', 'A', 'score @ 10 steps']);
    expect(atSteps.difference.diffs.map((d) => +d.toFixed(10))).toEqual([10, 20]);
    // mean 15, std √50; t(0.975, 1) = 12.706205, so the half-width is 12.706205 · √50 / √2 = 63.531.
    expect(atSteps.difference.ci95![0]).toBeCloseTo(15 - 63.531, 2);
    // AUC: 22.5 − 20 and 18 − 21.
    expect(auc.metric).toBe('AUC 0–10');
    expect(auc.difference.diffs.map((d) => +d.toFixed(10))).toEqual([2.5, -3]);
    expect([auc.difference.wins, auc.difference.losses]).toEqual([1, 1]);
    expect(cmp.paired).toHaveLength(2); // no final evaluations, so no third metric
  });

  it('unfinished runs are left out unless asked for', () => {
    const withPartial = [
      { label: 'A', runs: [...groups[0].runs, { ...record('A', 3, [[0, 0, 90]]), status: 'unfinished' as const, note: 'stopped early' }] },
    ];
    const left = aggregate(withPartial);
    expect(left.configs[0].included).toHaveLength(3);
    expect(left.notes).toContain('A/seed3: not counted (stopped early)');
    const counted = aggregate(withPartial, { includeUnfinished: true });
    expect(counted.configs[0].included).toHaveLength(4);
    expect(counted.commonRange).toEqual({ from: 0, to: 0 });
  });
});

/** An evaluation record as `empo2 eval --json` writes it, on one task. */
function evalRecord(checkpoint: string, variations: number, score: number, steps?: number): FinalEval {
  return {
    checkpoint,
    ...(steps !== undefined ? { train_env_steps: steps } : {}),
    eval_split: 'test',
    eval_variations: variations,
    episodes: variations,
    mean_score: score,
    success_rate: 0,
    per_task: [{ task: 'fetch', episodes: variations, mean_score: score, success_rate: 0 }],
  };
}

/** Checkpoints from (iteration, env steps, score of its checkpoint-evals file or null); the last one also carries `final`. */
function kept(rows: [iteration: number, steps: number, score: number | null, variations?: number][], final?: number): KeptCheckpoint[] {
  return rows.map(([it, steps, score, variations = 50], i) => {
    const name = `iter-${String(it).padStart(6, '0')}`;
    return {
      name,
      dir: `/x/${name}`,
      envSteps: steps,
      evaluated: score === null ? null : evalRecord(name, variations, score, steps),
      final: final !== undefined && i === rows.length - 1 ? evalRecord(name, 50, final) : null,
      logged: null,
    };
  });
}

describe('score at equal steps from evaluated checkpoints', () => {
  it('brackets N with the checkpoint saved at it, or the last before and the first after', () => {
    const cs = [{ envSteps: 8 }, { envSteps: 12 }, { envSteps: 12 }, { envSteps: 20 }];
    expect(bracketingCheckpoints(cs, 10)).toEqual([cs[0], cs[1]]);
    expect(bracketingCheckpoints(cs, 12)).toEqual([cs[2]]);
    expect(bracketingCheckpoints(cs, 20)).toEqual([cs[3]]);
    expect(bracketingCheckpoints(cs, 7)).toBeNull();
    expect(bracketingCheckpoints(cs, 21)).toBeNull();
    expect(bracketingCheckpoints([], 0)).toBeNull();
  });

  it('interpolates linearly in env steps between the two evaluations; the final evaluation counts for its checkpoint', () => {
    const setting = { split: 'test', variations: 50 };
    // 20 + (40 − 20)·(15 − 10)/(20 − 10) = 30, with 40 from the final evaluation.
    expect(
      checkpointScoreAt(
        kept(
          [
            [1, 10, 20],
            [2, 20, null],
          ],
          40,
        ),
        15,
        setting,
      ),
    ).toEqual({ score: 30 });
    // 10 + 20·7/8 = 27.5
    expect(
      checkpointScoreAt(
        kept([
          [4, 8, 10],
          [8, 16, 30],
        ]),
        15,
        setting,
      ),
    ).toEqual({ score: 27.5 });
    expect(
      checkpointScoreAt(
        kept([
          [4, 8, 10],
          [8, 16, 30],
        ]),
        16,
        setting,
      ),
    ).toEqual({ score: 30 });
    expect(
      checkpointScoreAt(
        kept([
          [4, 8, 10],
          [8, 16, null],
        ]),
        15,
        setting,
      ),
    ).toEqual({ missing: 'iter-000008 not evaluated on 50 test variations per task' });
    expect(
      checkpointScoreAt(
        kept([
          [4, 8, 10],
          [8, 16, 30, 10],
        ]),
        15,
        setting,
      ),
    ).toEqual({ missing: 'iter-000008 not evaluated on 50 test variations per task' });
    expect(
      checkpointScoreAt(
        kept([
          [4, 8, 10],
          [8, 16, 30],
        ]),
        17,
        setting,
      ),
    ).toEqual({
      missing:
        'no kept checkpoint at or on both sides of 17 env steps (kept: iter-000004 at 8, iter-000008 at 16; train.keep_checkpoints keeps more)',
    });
  });

  it('per task: each task interpolated between the same two evaluations; a task missing from either is left out', () => {
    const setting = { split: 'test', variations: 50 };
    const twoTasks = (name: string, steps: number, tasks: Record<string, number>): KeptCheckpoint => ({
      name,
      dir: `/x/${name}`,
      envSteps: steps,
      evaluated: {
        ...evalRecord(name, 50, 0, steps),
        per_task: Object.entries(tasks).map(([task, s]) => ({ task, episodes: 50, mean_score: s, success_rate: 0 })),
      },
      final: null,
      logged: null,
    });
    const cs = [twoTasks('iter-000004', 8, { power: 10, clue: 0, maze: 5 }), twoTasks('iter-000008', 16, { power: 30, clue: 40 })];
    // power 10 + 20·7/8 = 27.5; clue 0 + 40·7/8 = 35; maze only in the first evaluation.
    expect(checkpointTaskScoresAt(cs, 15, setting)).toEqual([
      { task: 'power', score: 27.5 },
      { task: 'clue', score: 35 },
    ]);
    expect(checkpointTaskScoresAt(cs, 8, setting)).toEqual([
      { task: 'power', score: 10 },
      { task: 'clue', score: 0 },
      { task: 'maze', score: 5 },
    ]);
    expect(checkpointTaskScoresAt(cs, 17, setting)).toEqual([]);
    expect(checkpointTaskScoresAt(cs, 15, { split: 'test', variations: 10 })).toEqual([]);

    // Two seeds of A and B with these per-task evaluations: B − A per task, seed by seed.
    const run = (label: string, seed: number, power: number, clue: number): RunRecord => ({
      ...record(label, seed, [
        [0, 0, 10],
        [1, 8, 20],
        [2, 16, 30],
      ]),
      checkpoints: [twoTasks('iter-000001', 8, { power: 0, clue: 0 }), twoTasks('iter-000002', 16, { power, clue })],
    });
    const cmp = aggregate([
      { label: 'A', runs: [run('A', 0, 10, 20), run('A', 1, 30, 20)] },
      { label: 'B', runs: [run('B', 0, 20, 10), run('B', 1, 50, 10)] },
    ]);
    expect(cmp.equalSteps).toEqual([16]);
    const [a] = cmp.configs;
    expect(a.checkpointScoreAtSteps[0].perTask.map((t) => [t.task, t.runs, t.score!.mean])).toEqual([
      [
        'power',
        [
          { seed: 0, score: 10 },
          { seed: 1, score: 30 },
        ],
        20,
      ],
      [
        'clue',
        [
          { seed: 0, score: 20 },
          { seed: 1, score: 20 },
        ],
        20,
      ],
    ]);
    const power = cmp.paired.find((p) => p.metric === 'power: score @ 16 steps (checkpoints)')!;
    expect(power.difference.diffs).toEqual([10, 20]);
    const clue = cmp.paired.find((p) => p.metric === 'clue: score @ 16 steps (checkpoints)')!;
    expect(clue.difference.diffs).toEqual([-10, -10]);
  });

  const withCheckpoints = (label: string, seed: number, checkpoints: KeptCheckpoint[]): RunRecord => ({
    ...record(label, seed, [
      [0, 0, 10],
      [1, 10, 20],
      [2, 20, 30],
    ]),
    checkpoints,
  });
  const groups = [
    {
      label: 'A',
      runs: [
        withCheckpoints(
          'A',
          0,
          kept(
            [
              [1, 10, 20],
              [2, 20, null],
            ],
            40,
          ),
        ),
        withCheckpoints(
          'A',
          1,
          kept([
            [4, 8, 10],
            [8, 16, 30],
          ]),
        ),
      ],
    },
    {
      label: 'B',
      runs: [
        withCheckpoints(
          'B',
          0,
          kept([
            [1, 10, 0, 10],
            [2, 15, 50],
          ]),
        ),
        withCheckpoints(
          'B',
          1,
          kept([
            [1, 12, 40],
            [2, 18, null],
          ]),
        ),
      ],
    },
  ];

  it('summarises over seeds, pairs with the first config and names the runs without a score', () => {
    const cmp = aggregate(groups, { atSteps: [15] });
    expect(cmp.checkpointEval).toEqual({ split: 'test', variations: 50 });
    const [a, b] = cmp.configs;
    // A: 30 and 27.5 → mean 28.75, std |30 − 27.5| / √2; B: 50 (saved at 15), seed 1 missing.
    expect(a.checkpointScoreAtSteps).toHaveLength(1);
    expect(a.checkpointScoreAtSteps[0].runs).toEqual([
      { seed: 0, score: 30 },
      { seed: 1, score: 27.5 },
    ]);
    expect(a.checkpointScoreAtSteps[0].score!.mean).toBeCloseTo(28.75, 12);
    expect(a.checkpointScoreAtSteps[0].score!.std).toBeCloseTo(2.5 / Math.SQRT2, 12);
    expect(b.checkpointScoreAtSteps[0].runs).toEqual([{ seed: 0, score: 50 }]);
    const paired = cmp.paired.find((p) => p.metric === 'score @ 15 steps (checkpoints on 50 test variations per task)')!;
    expect(paired.difference.seeds).toEqual([0]);
    expect(paired.difference.diffs).toEqual([20]);
    const notes = cmp.notes.join('\n');
    expect(notes).toContain('B/seed1: no checkpoint score @ 15 steps: iter-000002 not evaluated on 50 test variations per task');
    // B seed 0's iter-000001 was evaluated on 10 variations: another setting, outvoted 4 to 1.
    expect(notes).toContain(
      'checkpoint evaluations were made in several settings; the report uses 50 variations per task of the test split (others: 10 variations per task of the test split)',
    );
  });

  it('uses the requested number of variations, and reports nothing without checkpoint evaluations', () => {
    const ten = aggregate(groups, { atSteps: [15], checkpointEvalVariations: 10 });
    expect(ten.checkpointEval).toEqual({ split: 'test', variations: 10 });
    expect(ten.configs.flatMap((c) => c.checkpointScoreAtSteps[0].runs)).toEqual([]);
    const none = aggregate([{ label: 'A', runs: [withCheckpoints('A', 0, kept([[1, 10, null]], 40))] }]);
    expect(none.checkpointEval).toBeNull();
    expect(none.configs[0].checkpointScoreAtSteps).toEqual([]);
    expect(none.notes).toEqual([]);
    // Asked for 50 variations, a run that ended at the point is scored by its final evaluation alone.
    const finalOnly = aggregate([{ label: 'A', runs: [withCheckpoints('A', 0, kept([[2, 20, null]], 40))] }], {
      checkpointEvalVariations: 50,
    });
    expect(finalOnly.equalSteps).toEqual([20]);
    expect(finalOnly.configs[0].checkpointScoreAtSteps[0].runs).toEqual([{ seed: 0, score: 40 }]);
  });
});

describe('report from run folders (--report-only)', () => {
  it('writes Markdown, CSV and the plot from hand-made runs, skipping an unfinished one', async () => {
    const out = join(root, 'report');
    A.forEach((points, seed) =>
      writeRun(out, 'A', seed, 2, [...points.map((p, i) => evalLine(p, i === 2 ? A_TASKS[seed] : {})), trainLine(2, 50 + seed)]),
    );
    B.forEach((points, seed) =>
      writeRun(
        out,
        'B',
        seed,
        2,
        points.map((p, i) => evalLine(p, i === 2 ? { fetch: p[2] } : {})),
      ),
    );
    writeRun(out, 'B', 7, 5, [evalLine([0, 0, 100])]);
    const logged: string[] = [];
    const r = await reportCompare({ out, log: (l) => logged.push(l) });

    expect(r.comparison.configs.map((c) => c.included.length)).toEqual([3, 2]);
    expect(r.comparison.configs[1].excluded[0].note).toBe('stopped after the evaluation at iteration 0 of 5');
    // Wall time from the trainer's elapsed_seconds when compare did not launch the run.
    expect(r.comparison.configs[0].wallSeconds!.mean).toBe(51);
    expect(r.comparison.configs[1].wallSeconds).toBeNull();

    const md = readFileSync(r.files.markdown, 'utf8');
    expect(md).toContain('| A | 3/3 | 46.7 ± 15.3 | 46.7% ± 15.3 | 28.3 ± 2.9 | 17.8 ± 4.6 | 20 | 51.0 s ± 1.0 |');
    expect(md).toContain('| B | 2/3 | 55.0 ± 21.2 | 55.0% ± 21.2 | 45.0 ± 7.1 | 20.3 ± 3.2 | 11 | – |');
    expect(md).toContain('| maze | 56.7 ± 15.3 (56.7% ± 15.3) | – |');
    expect(md).toContain('B/seed7: not counted (stopped after the evaluation at iteration 0 of 5)');
    expect(logged.join('\n')).toContain('| A | 3/3 |');

    const csv = readFileSync(r.files.csv, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(','));
    const col = (name: string) => csv[0].indexOf(name);
    expect(csv).toHaveLength(3);
    expect(Number(csv[1][col('score_at_10_steps_mean')])).toBeCloseTo(85 / 3, 10);
    expect(Number(csv[2][col('auc_mean')])).toBeCloseTo(20.25, 10);
    expect(csv[2][col('task_maze_score_mean')]).toBe('');
    expect(readFileSync(r.files.runsCsv, 'utf8')).toMatch(/\nB,7,unfinished,no,/);
    expect(readFileSync(r.files.curvesCsv, 'utf8')).toContain('\nB,6,2,17,');

    const png = readFileSync(r.files.png!);
    expect([...png.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    // IHDR: width and height, big-endian, at bytes 16–23; the figure is drawn at 2× for sharpness.
    const [width, height] = [png.readUInt32BE(16), png.readUInt32BE(20)];
    expect(width).toBeGreaterThan(800);
    expect(width).toBeLessThan(3000);
    expect(height).toBeGreaterThan(400);
    expect(png.length).toBeGreaterThan(10_000);
    const svg = readFileSync(r.files.svg!, 'utf8');
    for (const text of ['training environment steps', 'held-out mean score (0–100)', 'min–max over runs', '>A<', '>B<'])
      expect(svg).toContain(text);
  });

  it('the plot legend shows long labels that share a prefix in full', async () => {
    const out = join(root, 'long-labels');
    const labels = ['empo2-rehearsal-valid-actions-only', 'empo2-rehearsal-valid-actions-only-paper-ratio'];
    for (const label of labels) writeRun(out, label, 0, 1, [evalLine([0, 0, 10]), evalLine([1, 5, 20])]);
    const r = await reportCompare({ out, log: () => {} });
    const svg = readFileSync(r.files.svg!, 'utf8');
    for (const label of labels) expect(svg).toContain(`>${label}<`);
    expect(svg).not.toContain('…');
  });

  it("wall time comes from compare's own record (summed over attempts); a crashed run is named with its log", async () => {
    const out = join(root, 'attempts');
    writeRun(out, 'A', 0, 1, [evalLine([0, 0, 10]), trainLine(1, 7), evalLine([1, 5, 20])]);
    const attempt = (seconds: number, exit_code: number) => ({
      started_at: '2025-01-01T00:00:00.000Z',
      seconds,
      exit_code,
      signal: null,
      resumed: false,
    });
    writeFileSync(join(out, 'A', 'seed0', 'compare-run.json'), JSON.stringify({ attempts: [attempt(30, 130), attempt(12.5, 0)] }));
    mkdirSync(join(out, 'A', 'seed1'));
    writeFileSync(join(out, 'A', 'seed1', 'compare-run.json'), JSON.stringify({ attempts: [attempt(2, 1)] }));
    writeFileSync(join(out, 'compare.json'), JSON.stringify({ configs: [{ label: 'A', config: '/c/a.yaml', set: [], seeds: [0, 1] }] }));
    const r = await reportCompare({ out, log: () => {} });
    const [a] = r.comparison.configs;
    expect(a.wallSeconds!.mean).toBe(42.5);
    expect(a.excluded[0].note).toBe(
      `nothing recorded; its last attempt failed with exit code 1, see ${join(out, 'A', 'seed1', 'train.log')}`,
    );
  });

  it("wall time from the trainer's clock when its evaluations were timed, even where compare recorded attempts", async () => {
    const out = join(root, 'trainer-clock');
    const timed = (point: Point, seconds: number) => JSON.stringify({ ...JSON.parse(evalLine(point)), seconds });
    // Eval 1 ran inside iteration 2's elapsed_seconds (90); evals 0 and 2 ran outside it.
    writeRun(out, 'A', 0, 2, [timed([0, 0, 10], 20), trainLine(1, 30), timed([1, 10, 20], 25), trainLine(2, 90), timed([2, 20, 30], 22)]);
    // Compare saw only the last attempt: an earlier one was killed together with it.
    writeFileSync(
      join(out, 'A', 'seed0', 'compare-run.json'),
      JSON.stringify({ attempts: [{ started_at: '2025-01-01T00:00:00.000Z', seconds: 40, exit_code: 0, signal: null, resumed: true }] }),
    );
    const r = await reportCompare({ out, log: () => {} });
    const [run] = r.comparison.configs[0].included;
    expect(run.wallSource).toBe('trainer');
    expect(run.wallSeconds).toBe(90 + 20 + 22);
    expect(r.comparison.notes.join('\n')).not.toContain('wall time');
  });

  it('final evaluations: used when made on the latest checkpoint, ignored with a note when stale or broken', async () => {
    const out = join(root, 'final-eval');
    const finalEval = (checkpoint: string, variations: number, fetch: number, maze: number) => ({
      checkpoint,
      eval_split: 'test',
      eval_variations: variations,
      episodes: 2 * variations,
      mean_score: (fetch + maze) / 2,
      success_rate: 0.25,
      per_task: [
        { task: 'fetch', episodes: variations, mean_score: fetch, success_rate: 0.5 },
        { task: 'maze', episodes: variations, mean_score: maze, success_rate: 0 },
      ],
    });
    const withCheckpoint = (label: string, seed: number, evalRecord: unknown | string) => {
      writeRun(out, label, seed, 1, [evalLine([0, 0, 10]), evalLine([1, 5, 20])]);
      const dir = join(out, label, `seed${seed}`);
      mkdirSync(join(dir, 'checkpoints', 'iter-000001'), { recursive: true });
      writeFileSync(join(dir, 'checkpoints', 'latest.json'), JSON.stringify({ checkpoint: 'iter-000001' }));
      writeFileSync(join(dir, 'final-eval.json'), typeof evalRecord === 'string' ? evalRecord : JSON.stringify(evalRecord));
    };
    withCheckpoint('A', 0, finalEval('iter-000001', 50, 30, 10)); // 20
    withCheckpoint('A', 1, finalEval('iter-000001', 50, 50, 20)); // 35
    withCheckpoint('A', 2, finalEval('iter-000000', 50, 90, 90)); // stale: another checkpoint
    withCheckpoint('B', 0, finalEval('iter-000001', 50, 10, 0)); // 5
    withCheckpoint('B', 1, '{"checkpoint": "iter-000001", "eval_variations": 50'); // broken
    const r = await reportCompare({ out, log: () => {} });
    const [a, b] = r.comparison.configs;
    expect(r.comparison.finalEval).toEqual({ split: 'test', variations: 50, episodesPerRun: 100 });
    // A: (20 + 35) / 2 = 27.5, std sqrt(((−7.5)² + 7.5²) / 1) = 10.607; fetch (30 + 50) / 2 = 40.
    expect(a.finalEval!.score!.mean).toBe(27.5);
    expect(a.finalEval!.score!.std).toBeCloseTo(10.6066, 4);
    expect(a.finalEval!.perTask.find((t) => t.task === 'fetch')!.score!.mean).toBe(40);
    expect(a.finalEval!.runs.map((x) => x.seed)).toEqual([0, 1]);
    expect(b.finalEval!.score).toEqual({ n: 1, mean: 5, std: null, min: 5, max: 5 });
    const notes = r.comparison.notes.join('\n');
    expect(notes).toContain(
      'A/seed2: ' +
        join(out, 'A', 'seed2', 'final-eval.json') +
        " evaluated iter-000000, but the run's latest checkpoint is iter-000001; it was ignored",
    );
    expect(notes).toContain(`B/seed1: ${join(out, 'B', 'seed1', 'final-eval.json')} is not valid JSON`);
    expect(notes).toContain('final evaluation on 50 variations per task is missing for A/seed2, B/seed1 (compare --final-eval 50 adds it)');

    const md = readFileSync(r.files.markdown, 'utf8');
    expect(md).toContain('## Final checkpoints on 50 test variations per task');
    expect(md).toContain('| config | runs | score | success | seed 0 | seed 1 |');
    expect(md).toContain('| A | 2/3 | 27.5 ± 10.6 | 25.0% ± 0.0 | 20.0 | 35.0 |');
    expect(md).toContain('| B | 1/2 | 5.0 | 25.0% | 5.0 | – |');
    expect(md).toContain('| fetch | 40.0 ± 14.1 (50.0% ± 0.0) | 10.0 (50.0%) |');
    // Only seed 0 has both final evaluations: one difference, no interval.
    expect(md).toContain('## Paired differences against A (same seeds)');
    expect(md).toContain('| B − A | score on 50 test variations per task (final checkpoint) | 1 | −15.0 | – | 0 / 1 / 0 | 0: −15.0 |');
    const runsCsv = readFileSync(r.files.runsCsv, 'utf8');
    // The final evaluation's columns, then the (empty) checkpoint score at the equal-steps point.
    expect(runsCsv).toMatch(/\nA,0,finished,yes,[^\n]*,50,100,20,0\.25,\n/);
    expect(runsCsv).toMatch(/\nA,2,finished,yes,[^\n]*,,,,,\n/);
  });

  it('final evaluations made in different settings are not averaged together', () => {
    const withEval = (seed: number, variations: number): RunRecord => ({
      ...record('A', seed, [
        [0, 0, 10],
        [1, 5, 20],
      ]),
      finalEval: {
        checkpoint: 'iter-000001',
        eval_split: 'test',
        eval_variations: variations,
        episodes: variations,
        mean_score: 10,
        success_rate: 0,
        per_task: [],
      },
    });
    const cmp = aggregate([{ label: 'A', runs: [withEval(0, 50), withEval(1, 10)] }]);
    expect(cmp.finalEval).toBeNull();
    expect(cmp.configs[0].finalEval).toBeNull();
    expect(cmp.notes.join('\n')).toContain(
      "the runs' final evaluations differ in setting (50 variations per task of the test split; 10 variations per task of the test split)",
    );
    // Without any final evaluation nothing is said about them.
    expect(aggregate([{ label: 'A', runs: [record('A', 0, [[0, 0, 10]])] }]).notes).toEqual([]);
  });

  it("checkpoint evaluations: read from checkpoint-evals/, checked against the checkpoint's env steps, shown with the score they give", async () => {
    const out = join(root, 'checkpoint-evals');
    /** A finished 2-iteration run with checkpoints at the given env steps; `scores` go to checkpoint-evals (null: none), `fileSteps` overrides the steps written in the file. */
    const run = (label: string, seed: number, steps: [number, number], scores: [number | null, number | null], fileSteps?: number) => {
      writeRun(out, label, seed, 2, [evalLine([0, 0, 10]), evalLine([1, steps[0], 20]), evalLine([2, steps[1], 30])]);
      const dir = join(out, label, `seed${seed}`);
      steps.forEach((envSteps, i) => {
        const name = `iter-00000${i + 1}`;
        mkdirSync(join(dir, 'checkpoints', name), { recursive: true });
        writeFileSync(
          join(dir, 'checkpoints', name, 'trainer_state.json'),
          JSON.stringify({ iteration: i + 1, envSteps, rngState: 1, elapsedSeconds: 1 }),
        );
        const score = scores[i];
        if (score !== null) {
          mkdirSync(join(dir, 'checkpoint-evals'), { recursive: true });
          writeFileSync(join(dir, 'checkpoint-evals', `${name}.json`), JSON.stringify(evalRecord(name, 20, score, fileSteps ?? envSteps)));
        }
      });
      writeFileSync(join(dir, 'checkpoints', 'latest.json'), JSON.stringify({ checkpoint: 'iter-000002' }));
    };
    // Equal steps: the earliest last evaluation, 16. A0: 20 + 20·6/10 = 32; A1: saved at 16, 50.
    run('A', 0, [10, 20], [20, 40]);
    run('A', 1, [8, 16], [null, 50]);
    // B0: its final evaluation (of iter-000002) stands in for the missing file: 10 + 50·4/8 = 35.
    run('B', 0, [12, 20], [10, null]);
    writeFileSync(join(out, 'B', 'seed0', 'final-eval.json'), JSON.stringify(evalRecord('iter-000002', 20, 60)));
    // B1: its files name other env steps (left from an earlier run in that folder), so they do not count.
    run('B', 1, [10, 18], [0, 0], 5);
    const r = await reportCompare({ out, log: () => {} });
    expect(r.comparison.equalSteps).toEqual([16]);
    expect(r.comparison.configs.map((c) => c.checkpointScoreAtSteps[0].runs)).toEqual([
      [
        { seed: 0, score: 32 },
        { seed: 1, score: 50 },
      ],
      [{ seed: 0, score: 35 }],
    ]);
    const notes = r.comparison.notes.join('\n');
    expect(notes).toContain(
      `B/seed1: ${join(out, 'B', 'seed1', 'checkpoint-evals', 'iter-000001.json')} evaluated iter-000001 at 5 env steps, but iter-000001 holds 10; it was ignored`,
    );
    expect(notes).toContain(
      'B/seed1: no checkpoint score @ 16 steps: iter-000001 and iter-000002 not evaluated on 20 test variations per task',
    );

    const md = readFileSync(r.files.markdown, 'utf8');
    expect(md).toContain('## Score at equal env steps from checkpoints on 20 test variations per task');
    expect(md).toContain('| config | runs | score @ 16 steps | seed 0 | seed 1 |');
    expect(md).toContain('| A | 2/2 | 41.0 ± 12.7 | 32.0 | 50.0 |');
    expect(md).toContain('| B | 1/2 | 35.0 | 35.0 | – |');
    expect(md).toContain('| B − A | score @ 16 steps (checkpoints on 20 test variations per task) | 1 | +3.0 | – | 1 / 0 / 0 | 0: +3.0 |');
    expect(md).toContain('| task | A | B |\n| --- | --- | --- |\n| fetch | 41.0 ± 12.7 (2) | 35.0 (1) |');
    expect(md).toContain('| B − A | fetch: score @ 16 steps (checkpoints) | 1 | +3.0 | – | 1 / 0 / 0 | 0: +3.0 |');
    const runsCsv = readFileSync(r.files.runsCsv, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(','));
    const col = runsCsv[0].indexOf('checkpoint_score_at_16_steps');
    expect(runsCsv.slice(1).map((row) => row[col])).toEqual(['32', '50', '35', '']);
    const csv = readFileSync(r.files.csv, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(','));
    expect(Number(csv[1][csv[0].indexOf('checkpoint_score_at_16_steps_mean')])).toBe(41);
    expect(csv[1][csv[0].indexOf('checkpoint_eval_variations')]).toBe('20');
    expect(Number(csv[2][csv[0].indexOf('checkpoint_task_fetch_score_at_16_steps_mean')])).toBe(35);
    expect(runsCsv.slice(1).map((row) => row[runsCsv[0].indexOf('checkpoint_task_fetch_score_at_16_steps')])).toEqual([
      '32',
      '50',
      '35',
      '',
    ]);
  });

  it('an output folder without runs is a clear error', async () => {
    mkdirSync(join(root, 'empty'));
    await expect(reportCompare({ out: join(root, 'empty'), log: () => {} })).rejects.toThrow(/holds no runs/);
    await expect(reportCompare({ out: join(root, 'nowhere'), log: () => {} })).rejects.toThrow(/does not exist/);
  });
});

describe('option parsing', () => {
  it('seeds as lists and ranges, with errors naming the bad part', () => {
    expect(parseSeeds('0,1,2')).toEqual([0, 1, 2]);
    expect(parseSeeds('0-2,7')).toEqual([0, 1, 2, 7]);
    expect(() => parseSeeds('0,x')).toThrow(/"x" is not a non-negative integer/);
    expect(() => parseSeeds('3-1')).toThrow(/ends before it starts/);
    expect(() => parseSeeds('1,0-2')).toThrow(/seed 1 is listed twice/);
    expect(parseSteps('1000, 2500')).toEqual([1000, 2500]);
    expect(() => parseSteps('10,-1')).toThrow(/"-1" is not a non-negative number/);
  });

  it('config differences name the key and both values, ignoring run_dir', () => {
    expect(
      configDifferences(
        { run_dir: 'a', train: { iterations: 3, eval_every: 1 } },
        { run_dir: 'b', train: { iterations: 2, eval_every: 1 } },
      ),
    ).toEqual(['train.iterations: 2 there, 3 now']);
  });

  it('config differences skip options inert in both (algo.mode_draw under experimental.mode_draw_per_rollout)', () => {
    const perRollout = (modeDraw: 'iteration' | 'task') =>
      loadConfig(null, [`algo.mode_draw=${modeDraw}`, 'experimental.mode_draw_per_rollout=true']);
    const [now, there] = [perRollout('task'), perRollout('iteration')];
    expect(configDifferences(now, there)).toEqual(['algo.mode_draw: "iteration" there, "task" now']);
    expect(configDifferences(now, there, '', inertInBoth(now, there))).toEqual([]);
  });
});
