import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { createPlayingEngine } from '../policy/create-engine.ts';
import { evaluateEngine } from '../adapt/checkpoint-eval.ts';
import { train } from '../trainer/trainer.ts';
import { TINY_RUN } from '../../test/support/tiny.ts';
import { keptCheckpoints, loggedEval, type RunEvalSettings } from './checkpoint-evals.ts';
import { readRunMetrics, type EvalLine } from './metrics.ts';

const SETTINGS: RunEvalSettings = { split: 'test', variations: 10, temperature: 0.7, withMemory: false };
const perTask = [
  { task: 'fetch', mean_score: 20, success_rate: 0 },
  { task: 'clue', mean_score: 40, success_rate: 0.1 },
];
const line = (extra: Record<string, unknown>): EvalLine => ({
  type: 'eval',
  iteration: 4,
  train_env_steps: 400,
  mean_score: 30,
  success_rate: 0.05,
  per_task: perTask,
  ...extra,
});
const recorded = { eval_split: 'test', eval_variations: 10, eval_temperature: 0.7, eval_with_memory: false };

describe('an evaluation logged during training stands for its checkpoint', () => {
  it('when it was played with the settings empo2 eval would use', () => {
    expect(loggedEval([line({ episodes: 20, ...recorded })], 'iter-000004', 4, 400, SETTINGS)).toEqual({
      checkpoint: 'iter-000004',
      train_env_steps: 400,
      eval_split: 'test',
      eval_variations: 10,
      episodes: 20,
      mean_score: 30,
      success_rate: 0.05,
      per_task: perTask,
    });
    // Another iteration or other env steps (a run started over in the same folder): not these weights.
    expect(loggedEval([line({ episodes: 20, ...recorded })], 'iter-000004', 5, 400, SETTINGS)).toBeNull();
    expect(loggedEval([line({ episodes: 20, ...recorded })], 'iter-000004', 4, 480, SETTINGS)).toBeNull();
    // Settings changed by a resume since: a temperature, tips shown, a split, a number of variations.
    for (const changed of [{ eval_temperature: 0.4 }, { eval_with_memory: true }, { eval_split: 'dev' }, { eval_variations: 5 }]) {
      expect(loggedEval([line({ episodes: 20, ...recorded, ...changed })], 'iter-000004', 4, 400, SETTINGS)).toBeNull();
    }
  });

  it('lines from before the trainer recorded its settings count when their episodes fit the variations', () => {
    expect(loggedEval([line({ episodes: 20 })], 'iter-000004', 4, 400, SETTINGS)?.mean_score).toBe(30);
    expect(loggedEval([line({ episodes: 10 })], 'iter-000004', 4, 400, SETTINGS)).toBeNull();
    expect(loggedEval([line({})], 'iter-000004', 4, 400, SETTINGS)).toBeNull();
  });

  describe('empo2 eval of the checkpoint repeats the logged evaluation episode for episode', () => {
    let root: string;
    beforeAll(() => {
      root = mkdtempSync(join(tmpdir(), 'empo2-logged-eval-'));
    });
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    it('so compare reads the score from the log instead of playing it again', async () => {
      await initBackend();
      const runDir = join(root, 'run');
      // Three variations per task in chunks of two environments: the batching differs between chunks.
      const overrides = [
        ...TINY_RUN,
        `run_dir=${runDir}`,
        'train.iterations=2',
        'train.eval_every=2',
        'train.checkpoint_every=2',
        'env.eval_variations=3',
        'env.max_instances=2',
        'rollout.eval_temperature=1',
      ];
      await train(loadConfig(null, overrides), { resume: false, log: () => {} });
      const cfg = loadConfig(join(runDir, 'config.yaml'));
      const checkpoint = latestCheckpoint(runDir)!;
      const { engine } = await createPlayingEngine(cfg, checkpoint);
      let replayed;
      try {
        replayed = await evaluateEngine(engine, cfg, { column: 'checkpoint', modelDir: checkpoint });
      } finally {
        engine.dispose();
      }
      const metrics = readRunMetrics(runDir)!;
      const settings = {
        split: cfg.env.eval_split,
        variations: cfg.env.eval_variations,
        temperature: cfg.rollout.eval_temperature,
        withMemory: false,
      };
      const { checkpoints } = keptCheckpoints(runDir, null, { evals: metrics.evals, settings });
      const logged = checkpoints.find((c) => c.dir === checkpoint)!.logged!;
      expect(logged.episodes).toBe(6);
      expect(replayed.summary.mean_score).toBe(logged.mean_score);
      expect(replayed.perTask.map((t) => t.mean_score)).toEqual(logged.per_task.map((t) => t.mean_score));
      expect(replayed.summary.env_steps).toBe(metrics.evals.at(-1)!.env_steps);
    }, 120_000);
  });
});
