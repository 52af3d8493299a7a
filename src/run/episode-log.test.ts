/**
 * Trajectory records from a real (tiny) EMPO² run: what training and its evaluations write, that
 * recording leaves training unchanged, and that a resume drops the records of the iterations it
 * redoes. Plus the helpers on hand-made episodes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { EpisodeRecordSchema, type EpisodeRecord } from '../trajectory/format.ts';
import type { Episode, StepRecord } from './records.ts';
import { latestCheckpoint } from './checkpoint.ts';
import { defaultEvalTrajectories, evaluateEngine } from '../adapt/checkpoint-eval.ts';
import { train } from '../trainer/trainer.ts';
import { createEngine } from '../policy/create-engine.ts';
import { episodeRecord, runTrajectoryFile, spreadSample } from './episode-log.ts';
import { sampledTokenEntropy, tipFollowRate } from './iteration-log.ts';
import { TINY_RUN } from '../../test/support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-trajectories-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function config(runDir: string, iterations: number, extra: string[] = []): Config {
  return loadConfig(null, [
    `run_dir=${runDir}`,
    ...TINY_RUN,
    'memory.top_k=2',
    'algo.name=empo2',
    'algo.p=1',
    'algo.q=0',
    'train.checkpoint_every=1',
    'train.eval_every=1',
    `train.iterations=${iterations}`,
    'trajectories.train_per_iteration=3',
    ...extra,
  ]);
}

const records = (path: string): EpisodeRecord[] =>
  readFileSync(path, 'utf8')
    .trim()
    .split('\n')
    .map((l) => EpisodeRecordSchema.parse(JSON.parse(l)));
const trainLines = (dir: string) =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.type === 'train');
const untimed = (l: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(l).filter(([k]) => !/seconds|per_s|share_of_rollout/.test(k)));

beforeAll(async () => {
  await initBackend();
});

describe('trajectory records of a training run', () => {
  const dir = join(root, 'run');

  it('train.jsonl: a spread sample per iteration with the tips each step was shown, their scores and similarities, and the reflection', async () => {
    await train(config(dir, 2), { resume: false, log: () => {} });
    const recorded = records(runTrajectoryFile(dir, 'train'));
    expect(recorded.map((r) => [r.source, r.iteration, r.index, r.mode])).toEqual([
      ['train', 1, 0, 'tips-on-policy'],
      ['train', 1, 1, 'tips-on-policy'],
      ['train', 1, 2, 'tips-on-policy'],
      ['train', 2, 0, 'tips-on-policy'],
      ['train', 2, 1, 'tips-on-policy'],
      ['train', 2, 2, 'tips-on-policy'],
    ]);
    const lines = trainLines(dir);
    expect(recorded.filter((r) => r.iteration === 2).every((r) => r.env_steps === lines[1].env_steps)).toBe(true);
    for (const r of recorded) {
      expect(r.slot).toBe(r.task);
      expect(r.steps.length).toBeGreaterThan(0);
      expect(r.score).toBe(r.steps.at(-1)!.score);
      expect(r.reflection).toMatch(/steps\./);
      for (const s of r.steps) {
        expect(s.valid_actions.length).toBeGreaterThan(0);
        expect(s.valid_action_count).toBeGreaterThanOrEqual(s.valid_actions.length);
      }
    }
    // The memory is empty during iteration 1; iteration 2 is shown what iteration 1 wrote.
    expect(recorded.filter((r) => r.iteration === 1).flatMap((r) => r.steps.flatMap((s) => s.tips))).toEqual([]);
    const tipped = recorded.filter((r) => r.iteration === 2).flatMap((r) => r.steps.filter((s) => s.tips.length > 0));
    expect(tipped.length).toBeGreaterThan(0);
    for (const s of tipped) {
      expect(s.tips.length).toBeLessThanOrEqual(2);
      for (const t of s.tips) {
        expect(t.text).toContain(`The action you took was ${t.action};`);
        expect(t.similarity).toBeGreaterThan(0.5);
        expect(typeof t.score).toBe('number');
      }
      expect(s.followed_tip).toBe(s.tips.some((t) => t.action === s.action));
    }
  });

  it('metrics.jsonl gains the tip-follow rate and the sampled-token entropy', () => {
    const recorded = records(runTrajectoryFile(dir, 'train'));
    const [first, second] = trainLines(dir);
    expect(first.tips_followed).toBeNull();
    expect(typeof second.tips_followed).toBe('number');
    // The sampled third of the batch agrees with the batch's rate in sign: followed steps are followed steps.
    if (recorded.some((r) => r.steps.some((s) => s.followed_tip))) expect(second.tips_followed as number).toBeGreaterThan(0);
    for (const l of [first, second]) expect(l.entropy as number).toBeGreaterThan(0);
  });

  it('eval.jsonl: every held-out episode of every evaluation, plain', () => {
    const recorded = records(runTrajectoryFile(dir, 'eval'));
    expect(recorded.map((r) => [r.source, r.iteration, r.task, r.mode, r.slot, r.reflection])).toEqual(
      [0, 1, 2].flatMap((it) => [
        ['eval', it, 'fetch', 'plain', null, null],
        ['eval', it, 'clue', 'plain', null, null],
      ]),
    );
  });

  it('recording leaves training unchanged: the same run without records logs the same numbers', async () => {
    const bare = join(root, 'bare');
    await train(config(bare, 2, ['trajectories.train_per_iteration=0', 'trajectories.eval_per_evaluation=0']), {
      resume: false,
      log: () => {},
    });
    expect(existsSync(runTrajectoryFile(bare, 'train'))).toBe(false);
    expect(existsSync(runTrajectoryFile(bare, 'eval'))).toBe(false);
    expect(trainLines(bare).map(untimed)).toEqual(trainLines(dir).map(untimed));
  });

  it('a resume drops records written after the checkpoint and records the iterations it plays', async () => {
    const trainFile = runTrajectoryFile(dir, 'train');
    // What an attempt killed after the last checkpoint would have left.
    appendFileSync(trainFile, JSON.stringify({ ...records(trainFile)[0], iteration: 3, score: -1 }) + '\n');
    await train(config(dir, 3), { resume: true, log: () => {} });
    const recorded = records(trainFile);
    expect(recorded.map((r) => r.iteration)).toEqual([1, 1, 1, 2, 2, 2, 3, 3, 3]);
    expect(recorded.some((r) => r.score === -1)).toBe(false);
    expect(records(runTrajectoryFile(dir, 'eval')).map((r) => r.iteration)).toEqual([0, 0, 1, 1, 2, 2, 3, 3]);
  });
});

describe('empo2 eval records', () => {
  it("records a run's checkpoint beside the run's own records by default, with the checkpoint's name, iteration and env steps", async () => {
    const dir = join(root, 'run');
    const checkpoint = latestCheckpoint(dir)!;
    const file = defaultEvalTrajectories(checkpoint)!;
    expect(file).toBe(join(dir, 'trajectories', `eval-${basename(checkpoint)}.jsonl`));
    // A model directory outside a run gets nothing written into it.
    expect(defaultEvalTrajectories(join(root, 'some-model'))).toBeNull();
    const cfg = config(join(root, 'unused'), 3);
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: checkpoint } }, 'fresh');
    try {
      await evaluateEngine(engine, cfg, { column: 'checkpoint', modelDir: checkpoint, trajectories: file });
    } finally {
      engine.dispose();
    }
    const state = JSON.parse(readFileSync(join(checkpoint, 'trainer_state.json'), 'utf8'));
    expect(records(file).map((r) => [r.source, r.checkpoint, r.iteration, r.env_steps, r.task, r.mode])).toEqual([
      ['eval', basename(checkpoint), 3, state.envSteps, 'fetch', 'plain'],
      ['eval', basename(checkpoint), 3, state.envSteps, 'clue', 'plain'],
    ]);
  });
});

function step(action: string, tipActions: (string | null)[], logprobs: number[]): StepRecord {
  return {
    observation: 'You are in the hall.',
    tips: tipActions.map((a, i) => ({ text: `tip ${i}`, score: 10 * i, similarity: 0.9, action: a })),
    validActions: ['go north', 'open box'],
    validActionCount: 7,
    prompt: [],
    tipSpan: null,
    response: [],
    logprobs,
    action,
    reward: 0,
    score: 0,
  };
}

const episode = (steps: StepRecord[]): Episode => ({
  task: 'power',
  variation: 1,
  group: 0,
  description: 'Turn on the lamp.',
  steps,
  finalObservation: 'The end.',
  score: 0,
  success: false,
});

describe('episode helpers', () => {
  it('spreadSample takes k positions spread over the batch (all when k ≥ n)', () => {
    expect(spreadSample(32, 4)).toEqual([0, 8, 16, 24]);
    expect(spreadSample(3, 4)).toEqual([0, 1, 2]);
    expect(spreadSample(5, 0)).toEqual([]);
  });

  it('episodeRecord marks the steps whose action a tip named, and keeps the valid-action count', () => {
    const r = episodeRecord(
      episode([step('go north', ['go north', 'open box'], []), step('go north', ['open box'], []), step('open box', [null], [])]),
      { source: 'eval', iteration: 4 },
      { index: 2, mode: 'tips', slot: 'power', reflection: null },
    );
    expect(r.steps.map((s) => s.followed_tip)).toEqual([true, false, null]);
    expect(r.steps[0].valid_actions).toEqual(['go north', 'open box']);
    expect(r.steps[0].valid_action_count).toBe(7);
    expect(r.steps[0].tips[1]).toEqual({ text: 'tip 1', score: 10, similarity: 0.9, action: 'open box' });
    expect([r.iteration, r.trial, r.env_steps, r.checkpoint]).toEqual([4, null, null, null]);
    expect(EpisodeRecordSchema.parse(r)).toEqual(r);
  });

  it('tipFollowRate counts only steps whose tips named an action; sampledTokenEntropy is the mean −log-prob per token', () => {
    const episodes = [
      episode([step('go north', ['go north'], [-1, -3]), step('open box', ['go north'], [-2]), step('go north', [], [-2])]),
    ];
    expect(tipFollowRate(episodes)).toBe(0.5);
    expect(tipFollowRate([episode([step('go north', [], [])])])).toBeNull();
    expect(sampledTokenEntropy(episodes)).toBe(2);
    expect(sampledTokenEntropy([episode([])])).toBeNull();
  });
});
