/**
 * The training loop end to end on the built-in environment with a tiny model (hidden 32, one
 * layer, vocabulary 300, one task, groups of 3, episodes cut at 6 steps), plus updatePolicy on
 * hand-made episodes against a recording engine.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { readSafetensors, toFloat32 } from '../policy/safetensors.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import type { GenerateOptions, Generation, PolicyEngine, ScoredSequence, TrainSequence, TrainStats } from '../policy/types.ts';
import type { ObjectiveConfig } from '../algo/objective.ts';
import { Rng } from '../util/rng.ts';
import { latestCheckpoint, loadTrainerState } from '../run/checkpoint.ts';
import {
  updatePolicy,
  prepareUpdate,
  runOptimiserSteps,
  type UpdateSettings,
  type OptimiserProgress,
  type PreparedUpdate,
} from './update.ts';
import type { Episode, StepRecord } from '../run/records.ts';
import { train } from './trainer.ts';
import { checkTinyModelFits, createEngine } from '../policy/create-engine.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-trainer-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/**
 * Seed 3 with groups of 3 and 6-step episodes gives rollouts whose scores differ within the group
 * at iterations 1 and 3, so those iterations really update the weights (and the resume test
 * checks restored optimiser moments, not only weights). If the environment or sampler changes
 * and the "iteration 3 trains" check below fails, pick another seed where it does.
 */
function tinyConfig(runDir: string, iterations: number): Config {
  return loadConfig(null, tinyConfigOverrides(runDir, iterations));
}

function tinyConfigOverrides(runDir: string, iterations: number): string[] {
  return [
    `run_dir=${runDir}`,
    'seed=3',
    ...TINY_MODEL,
    'env.tasks=[fetch]',
    'env.eval_variations=1',
    'env.max_steps=6',
    'rollout.tasks_per_batch=1',
    'rollout.group_size=3',
    `train.iterations=${iterations}`,
    'train.checkpoint_every=1',
    'train.eval_every=1',
  ];
}

interface MetricLine {
  type: 'train' | 'eval';
  iteration: number;
  [key: string]: unknown;
}
const metrics = (runDir: string): MetricLine[] =>
  readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as MetricLine);

/** A train line without the fields that measure wall-clock time. */
const withoutTimings = (m: MetricLine) => Object.fromEntries(Object.entries(m).filter(([k]) => !/seconds|per_s/.test(k)));

function weightsOf(checkpointDir: string): Map<string, Float32Array> {
  const contents = readSafetensors(join(checkpointDir, 'model.safetensors'));
  return new Map([...contents.tensors].map(([k, t]) => [k, toFloat32(t)]));
}

function expectSameWeights(a: Map<string, Float32Array>, b: Map<string, Float32Array>): void {
  expect([...a.keys()].sort()).toEqual([...b.keys()].sort());
  for (const [k, x] of a) expect(Array.from(b.get(k)!), k).toEqual(Array.from(x));
}

describe('train() end to end', () => {
  const runDir = join(root, 'run');
  const straightDir = join(root, 'straight');
  const logs: string[] = [];
  const resumeLogs: string[] = [];

  beforeAll(async () => {
    await initBackend();
    const result = await train(tinyConfig(runDir, 2), { resume: false, log: (l) => logs.push(l) });
    expect(result.iterations).toBe(2);
    expect(result.interrupted).toBe(false);
  });

  it('writes two train lines and eval lines at iterations 0, 1 and 2 to metrics.jsonl', () => {
    const m = metrics(runDir);
    expect(m.filter((x) => x.type === 'train').map((x) => x.iteration)).toEqual([1, 2]);
    expect(m.filter((x) => x.type === 'eval').map((x) => x.iteration)).toEqual([0, 1, 2]);
    const first = m.find((x) => x.type === 'train')!;
    for (const key of ['env_steps', 'mean_score', 'success_rate', 'loss', 'clip_fraction', 'grad_norm', 'sequences', 'trained_tokens']) {
      expect(typeof first[key], key).toBe('number');
    }
    // 3 episodes of at most 6 steps.
    expect(first.env_steps as number).toBeGreaterThan(0);
    expect(first.env_steps as number).toBeLessThanOrEqual(18);
    expect(m.find((x) => x.type === 'eval')!.episodes).toBe(1);
  });

  it('writes checkpoints with the policy, optimiser and trainer state, and latest.json points at the last', () => {
    for (const it of ['iter-000001', 'iter-000002']) {
      for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'optimizer.safetensors', 'trainer_state.json']) {
        expect(existsSync(join(runDir, 'checkpoints', it, f)), `${it}/${f}`).toBe(true);
      }
    }
    expect(latestCheckpoint(runDir)).toBe(join(runDir, 'checkpoints', 'iter-000002'));
    const state = JSON.parse(readFileSync(join(runDir, 'checkpoints', 'iter-000002', 'trainer_state.json'), 'utf8'));
    expect(state.iteration).toBe(2);
    expect(state.envSteps).toBe(metrics(runDir).filter((x) => x.type === 'train')[1].env_steps);
  });

  it('writes eval.md (a table from iteration 0 to 2) and config.yaml, and logs progress', () => {
    const table = readFileSync(join(runDir, 'eval.md'), 'utf8');
    expect(table).toContain('score (iter 0)');
    expect(table).toContain('score (iter 2)');
    expect(table).toMatch(/\| fetch \| 1 \|/);
    expect(table).toContain('| **all** |');
    expect(readFileSync(join(runDir, 'config.yaml'), 'utf8')).toContain('group_size: 3');
    expect(logs.some((l) => l.startsWith('iter 1/2 |'))).toBe(true);
    expect(logs.some((l) => l.startsWith('iter 2/2 |'))).toBe(true);
  });

  it('the engine loaded from a checkpoint holds exactly the saved weights and optimiser state', async () => {
    const dir = latestCheckpoint(runDir)!;
    const { engine, loaded } = await createEngine(tinyConfig(runDir, 2), dir);
    expect(loadTrainerState(dir).iteration).toBe(2);
    expect(loaded).toBeDefined();
    const saved = weightsOf(dir);
    expectSameWeights(saved, new Map([...engine.model.params].map(([k, v]) => [k, Float32Array.from(v.dataSync())])));
    const opt = readSafetensors(join(dir, 'optimizer.safetensors'));
    expect(engine.optimizer.step).toBe(Number(opt.metadata.step));
    for (const [key, t] of opt.tensors) {
      const store = key.startsWith('m.') ? engine.optimizer.m : engine.optimizer.v;
      expect(Array.from(store.get(key.slice(2))!.dataSync()), key).toEqual(Array.from(toFloat32(t)));
    }
    engine.dispose();
  });

  it('resume to 3 iterations continues at iteration 3 and ends exactly where an uninterrupted 3-iteration run ends', async () => {
    // What a kill -9 while iteration 3 wrote its checkpoint leaves: a temporary checkpoint folder
    // and pointer of a process that is gone, and metrics lines for iteration 3 (the last one torn).
    const checkpoints = join(runDir, 'checkpoints');
    const dead = spawnSync('true').pid!;
    mkdirSync(join(checkpoints, `iter-000003.tmp-${dead}`));
    writeFileSync(join(checkpoints, `iter-000003.tmp-${dead}`, 'model.safetensors'), 'half a file');
    writeFileSync(join(checkpoints, `latest.json.tmp-${dead}`), '{"checkpoint": "iter-0000');
    // A process that still runs may be writing its own: left alone.
    const running = join(checkpoints, `iter-000003.tmp-${process.ppid}`);
    mkdirSync(running);
    appendFileSync(
      join(runDir, 'metrics.jsonl'),
      JSON.stringify({ type: 'train', iteration: 3, loss: 99 }) +
        '\n' +
        JSON.stringify({ type: 'eval', iteration: 3, mean_score: 99 }) +
        '\n{"type": "tra',
    );
    await train(tinyConfig(runDir, 3), { resume: true, log: (l) => resumeLogs.push(l) });
    expect(readdirSync(checkpoints).sort()).toEqual([
      `iter-000001`,
      `iter-000002`,
      `iter-000003`,
      `iter-000003.tmp-${process.ppid}`,
      'latest.json',
    ]);
    expect(resumeLogs).toContain(
      `removed ${join(checkpoints, `iter-000003.tmp-${dead}`)}, left by a process that stopped while writing it`,
    );
    rmSync(running, { recursive: true });
    // The eval table still compares with the evaluation logged at iteration 0.
    const table = readFileSync(join(runDir, 'eval.md'), 'utf8');
    expect(table).toContain('score (iter 0)');
    expect(table).toContain('score (iter 3)');
    expect(resumeLogs.some((l) => l.includes(`resuming from ${join(runDir, 'checkpoints', 'iter-000002')}`))).toBe(true);
    expect(resumeLogs.some((l) => l.startsWith('iter 1/') || l.startsWith('iter 2/'))).toBe(false);
    expect(resumeLogs.some((l) => l.startsWith('iter 3/3 |'))).toBe(true);
    const m = metrics(runDir);
    expect(m.filter((x) => x.type === 'train').map((x) => x.iteration)).toEqual([1, 2, 3]);
    // No second "iteration 0" evaluation on resume.
    expect(m.filter((x) => x.type === 'eval').map((x) => x.iteration)).toEqual([0, 1, 2, 3]);
    expect(latestCheckpoint(runDir)).toBe(join(runDir, 'checkpoints', 'iter-000003'));

    await train(tinyConfig(straightDir, 3), { resume: false, log: () => {} });
    const straight = metrics(straightDir).filter((x) => x.type === 'train');
    const resumed = m.filter((x) => x.type === 'train');
    expect(
      straight[2].sequences as number,
      'iteration 3 must train for this comparison to cover the optimiser state (see tinyConfig)',
    ).toBeGreaterThan(0);
    // Same rollouts, same update statistics, bit-identical weights: model, optimiser moments and
    // the task-sampling RNG were all restored.
    expect(resumed.map(withoutTimings)).toEqual(straight.map(withoutTimings));
    expectSameWeights(weightsOf(join(straightDir, 'checkpoints', 'iter-000003')), weightsOf(join(runDir, 'checkpoints', 'iter-000003')));
    // And iteration 3 did change the weights.
    const w2 = weightsOf(join(runDir, 'checkpoints', 'iter-000002'));
    const w3 = weightsOf(join(runDir, 'checkpoints', 'iter-000003'));
    expect([...w2].some(([k, x]) => x.some((v, i) => v !== w3.get(k)![i]))).toBe(true);
  });

  it('resuming the finished run does nothing: no evaluation, no new line, the same before/after table', async () => {
    const before = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8');
    const table = readFileSync(join(runDir, 'eval.md'), 'utf8');
    const logs: string[] = [];
    const result = await train(tinyConfig(runDir, 3), { resume: true, log: (l) => logs.push(l) });
    expect(readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')).toBe(before);
    expect(readFileSync(join(runDir, 'eval.md'), 'utf8')).toBe(table);
    expect(logs.some((l) => l.startsWith('eval @'))).toBe(false);
    expect(logs).toContain('the run already finished its 3 iterations; raise train.iterations to train it longer');
    expect(result.finalEval!.summary.mean_score).toBe(
      metrics(runDir)
        .filter((m) => m.type === 'eval')
        .at(-1)!.mean_score,
    );
    expect(result.initialEval!.iteration).toBe(0);
  });

  it('a resume refuses options that contradict the run, naming each, and a shorter run; run length and evaluation may change', async () => {
    const resume = (...sets: string[]) => {
      const cfg = loadConfig(null, [...tinyConfigOverrides(runDir, 3), ...sets]);
      return train(cfg, { resume: true, log: () => {} });
    };
    const err = await resume('model.hidden_size=64', 'model.path=/somewhere/else', 'env.eval_variations=2', 'train.iterations=3').catch(
      (e: Error) => e,
    );
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toContain('model.hidden_size: 32 in the run, 64 now');
    expect((err as Error).message).toContain('model.path: null in the run, "/somewhere/else" now');
    expect((err as Error).message).not.toContain('env.eval_variations:');
    expect((err as Error).message).toMatch(/A resume may change only: .*train\.iterations.*env\.eval_variations/);
    await expect(resume('algo.clip_low=0.1')).rejects.toThrow('algo.clip_low: 0.2 in the run, 0.1 now');
    await expect(resume('train.iterations=2')).rejects.toThrow("train.iterations is 2, but the run's latest checkpoint is at iteration 3");
    expect(latestCheckpoint(runDir)).toBe(join(runDir, 'checkpoints', 'iter-000003'));
  });

  it('env.eval_variations beyond the split evaluates every variation of it (no environment per missing one)', async () => {
    const dir = join(root, 'all-variations');
    const cfg = loadConfig(null, [...tinyConfigOverrides(dir, 1), 'env.eval_variations=1000000000', 'env.max_steps=2']);
    const started = performance.now();
    const lines: string[] = [];
    await train(cfg, { resume: false, log: (l) => lines.push(l) });
    // Said at the start, not left to be found out from the evaluation's size.
    expect(lines.slice(0, 3)).toContain(
      'env.eval_variations is 1,000,000,000, more than the test split holds (fetch 50): every task is evaluated on all of it, 50 episodes per evaluation',
    );
    const evals = metrics(dir).filter((m) => m.type === 'eval');
    expect(evals.map((m) => m.episodes)).toEqual([50, 50]); // the built-in test split holds 50 variations of fetch
    expect(performance.now() - started).toBeLessThan(60_000);
  }, 60_000);

  it('a default tiny model too large to train is refused up front, naming its sizes', () => {
    const cfg = loadConfig(null, ['model.hidden_size=16384', 'model.intermediate_size=65536', 'model.num_hidden_layers=64']);
    const started = performance.now();
    expect(() => checkTinyModelFits(cfg)).toThrow(
      /model\.hidden_size=16384, model\.intermediate_size=65536, model\.num_hidden_layers=64, model\.vocab_size=512: the default tiny model would have [\d,]+ parameters/,
    );
    expect(performance.now() - started).toBeLessThan(1000);
    expect(() => checkTinyModelFits(loadConfig(null))).not.toThrow();
  });

  it('with env.max_instances 2 (below the group of 3) the rollouts run in chunks and the run trains as usual', async () => {
    const dir = join(root, 'capped');
    const cfg = { ...tinyConfig(dir, 1), env: { ...tinyConfig(dir, 1).env, max_instances: 2 } };
    const result = await train(cfg, { resume: false, log: () => {} });
    expect(result.iterations).toBe(1);
    const line = metrics(dir).find((x) => x.type === 'train')!;
    expect(line.env_steps as number).toBeGreaterThanOrEqual(3); // all three episodes ran
    expect(line.env_steps as number).toBeLessThanOrEqual(18);
    expect(typeof line.mean_score).toBe('number');
  });

  it('refuses to start a fresh run in a run_dir that already holds one', async () => {
    await expect(train(tinyConfig(runDir, 5), { resume: false, log: () => {} })).rejects.toThrow(
      `${runDir} already holds a run; use --resume`,
    );
  });

  it('refuses a run_dir another trainer holds, naming its pid, and leaves no lock when it finishes or fails', async () => {
    expect(existsSync(join(runDir, 'run.lock'))).toBe(false); // the finished run above gave its lock up
    const dir = join(root, 'locked');
    mkdirSync(dir, { recursive: true });
    const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    try {
      writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: other.pid, host: hostname(), started: '2026-11-25T10:00:00.000Z' }));
      await expect(train(tinyConfig(dir, 1), { resume: false, log: () => {} })).rejects.toThrow(`${dir} is in use by pid ${other.pid}`);
      expect(existsSync(join(dir, 'config.yaml'))).toBe(false); // refused before writing anything
    } finally {
      other.kill();
    }
    await expect(train(tinyConfig(runDir, 5), { resume: false, log: () => {} })).rejects.toThrow('already holds a run');
    expect(existsSync(join(runDir, 'run.lock'))).toBe(false);
  });

  it('refuses --resume when there is no checkpoint', async () => {
    const empty = join(root, 'empty');
    await expect(train(tinyConfig(empty, 2), { resume: true, log: () => {} })).rejects.toThrow(
      `--resume: no checkpoint in ${join(empty, 'checkpoints')}`,
    );
  });

  it('a corrupt latest.json gives a clear error naming it', async () => {
    const dir = join(root, 'corrupt-pointer');
    await train(tinyConfig(dir, 1), { resume: false, log: () => {} });
    const pointer = join(dir, 'checkpoints', 'latest.json');
    writeFileSync(pointer, '{"checkpoint": "iter-0000');
    await expect(train(tinyConfig(dir, 2), { resume: true, log: () => {} })).rejects.toThrow(`${pointer} is corrupt`);
    // Pointing at a checkpoint that is not there is named too.
    writeFileSync(pointer, JSON.stringify({ checkpoint: 'iter-000009' }));
    await expect(train(tinyConfig(dir, 2), { resume: true, log: () => {} })).rejects.toThrow(
      `${pointer} names iter-000009, which does not exist`,
    );
    // A truncated weight file in the checkpoint names the checkpoint and the file.
    writeFileSync(pointer, JSON.stringify({ checkpoint: 'iter-000001' }));
    const weights = join(dir, 'checkpoints', 'iter-000001', 'model.safetensors');
    truncateSync(weights, Math.floor(statSync(weights).size / 2));
    await expect(train(tinyConfig(dir, 2), { resume: true, log: () => {} })).rejects.toThrow(
      new RegExp(`checkpoint .*iter-000001 cannot be loaded: .*model\\.safetensors`),
    );
  });

  it('a checkpoint missing its trainer state is reported as incomplete', () => {
    const dir = join(root, 'corrupt-pointer', 'checkpoints', 'iter-000001');
    rmSync(join(dir, 'trainer_state.json'));
    expect(() => loadTrainerState(dir)).toThrow(`checkpoint ${dir} is incomplete: ${join(dir, 'trainer_state.json')} is missing`);
  });
});

describe('updatePolicy on hand-made episodes', () => {
  /** Records every trainStep batch; scores nothing. */
  class RecordingEngine implements PolicyEngine {
    readonly tokenizer = { encode: () => [], decode: () => '', vocabSize: 0, tokenToId: () => undefined };
    readonly batches: TrainSequence[][] = [];
    async generate(_p: number[][], _o: GenerateOptions): Promise<Generation[]> {
      throw new Error('not used');
    }
    async logprobs(_b: ScoredSequence[]): Promise<number[][]> {
      throw new Error('not used');
    }
    async trainStep(batch: TrainSequence[], _o: ObjectiveConfig): Promise<TrainStats> {
      this.batches.push(batch);
      const tokens = batch.reduce((a, s) => a + s.mask.reduce((x, y) => x + y, 0), 0);
      return { loss: 0.25, tokens, clipFraction: 0.1, meanRatio: 1, kl: 0, gradNorm: 2 };
    }
    async save(): Promise<void> {}
    dispose(): void {}
  }

  let nextPrompt = 0;
  const step = (reward: number, responseLength = 2, logprob = -0.5): StepRecord => ({
    // Each step gets a distinct one-token prompt so samples can be traced back to their step.
    observation: 'o',
    prompt: [nextPrompt++],
    tipSpan: null,
    response: Array.from({ length: responseLength }, (_, i) => 100 + i),
    logprobs: new Array(responseLength).fill(logprob),
    action: 'a',
    reward,
    score: 0,
  });
  const episode = (group: number, steps: StepRecord[]): Episode => ({
    task: 'fetch',
    description: 'd',
    variation: group,
    group,
    steps,
    finalObservation: 'f',
    score: 0,
    success: false,
  });

  const settings = (o: Partial<UpdateSettings> = {}): UpdateSettings => ({
    objective: { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: null },
    seqMinLogprob: null,
    minibatches: 1,
    epochs: 1,
    rewardScale: 0.01,
    skipZeroAdvantage: true,
    temperature: 1,
    ...o,
  });

  /**
   * Group 0: returns 50·0.01 and 50·0.01 (equal) -> A = 0 for both.
   * Group 1: returns (20 + 30)·0.01 = 0.5 and 0 -> mean 0.25, unbiased std √(2·0.25²) = 0.353553,
   *          A = ±0.25 / (0.353553 + 1e-6) = ±0.707105.
   * Group 2: one rollout, return 1 -> mean 0, std 1 -> A = 1 / (1 + 1e-6).
   */
  function handEpisodes() {
    const e = {
      g0a: episode(0, [step(20), step(30)]),
      g0b: episode(0, [step(50)]),
      g1win: episode(1, [step(20), step(30, 3), step(0, 0)]),
      g1lose: episode(1, [step(0), step(0)]),
      g2: episode(2, [step(100, 4)]),
    };
    return e;
  }
  const A1 = 0.25 / (Math.sqrt(2 * 0.25 ** 2) + 1e-6);
  const A2 = 1 / (1 + 1e-6);

  it('an update stopped after any optimiser step and continued from what onStep heard steps on the same minibatches, in order, to the same stats', async () => {
    const s = settings({ minibatches: 2, epochs: 3, skipZeroAdvantage: false });
    const whole = new RecordingEngine();
    const rngWhole = new Rng(7);
    const prepared = await prepareUpdate(whole, Object.values(handEpisodes()), s);
    const heard: OptimiserProgress[] = [];
    const expected = await runOptimiserSteps(whole, prepared, {
      settings: s,
      rng: rngWhole,
      onStep: async (p) => void heard.push(JSON.parse(JSON.stringify(p))),
    });
    expect(heard).toHaveLength(6);
    for (let k = 0; k < heard.length; k++) {
      const rest = new RecordingEngine();
      const rng = new Rng(12345); // whatever the stream holds, the saved state replaces it
      const stats = await runOptimiserSteps(rest, JSON.parse(JSON.stringify(prepared)) as PreparedUpdate, {
        settings: s,
        rng,
        from: heard[k],
      });
      expect(rest.batches).toEqual(whole.batches.slice(k + 1));
      expect(stats).toEqual(expected);
      expect(rng.getState()).toBe(rngWhole.getState());
    }
  });

  it("gives every token of every step its rollout's group-normalised return and skips zero-advantage groups", async () => {
    const e = handEpisodes();
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, Object.values(e), settings(), new Rng(1));
    expect(engine.batches).toHaveLength(1);
    const samples = engine.batches[0];
    const byPrompt = new Map(samples.map((s) => [s.prompt[0], s]));
    // Group 0 (equal returns) contributes nothing; the empty response of g1win is left out.
    for (const st of [...e.g0a.steps, ...e.g0b.steps]) expect(byPrompt.has(st.prompt[0])).toBe(false);
    expect(byPrompt.has(e.g1win.steps[2].prompt[0])).toBe(false);
    expect(samples).toHaveLength(2 + 2 + 1);
    const expectAdvantage = (st: StepRecord, A: number) => {
      const s = byPrompt.get(st.prompt[0])!;
      expect(s.response).toEqual(st.response);
      expect(s.oldLogprobs).toEqual(st.logprobs);
      expect(s.mask).toEqual(st.response.map(() => 1));
      expect(s.advantages).toHaveLength(st.response.length);
      for (const a of s.advantages) expect(a).toBeCloseTo(A, 9);
    };
    expectAdvantage(e.g1win.steps[0], A1);
    expectAdvantage(e.g1win.steps[1], A1);
    expectAdvantage(e.g1lose.steps[0], -A1);
    expectAdvantage(e.g1lose.steps[1], -A1);
    expectAdvantage(e.g2.steps[0], A2);
    expect(A1).toBeCloseTo(0.707105, 5);
    expect(stats.sequences).toBe(5);
    expect(stats.optimizerSteps).toBe(1);
    expect(stats.tokens).toBe(2 + 3 + 2 + 2 + 4);
    // Mean of the raw scaled returns [0.5, 0.5, 0.5, 0, 1].
    expect(stats.meanReturn).toBeCloseTo(2.5 / 5, 12);
    expect(stats.droppedLowProb).toBe(0);
  });

  it('an episode the rollout engine lost part-way (engineError) takes no part: its group trains as if it were not there', async () => {
    const e = handEpisodes();
    const lost: Episode = { ...episode(1, [step(0), step(0)]), engineError: 'no rollout server is left' };
    const without = new RecordingEngine();
    const expected = await updatePolicy(without, Object.values(e), settings(), new Rng(1));
    const withLost = new RecordingEngine();
    const stats = await updatePolicy(withLost, [...Object.values(e), lost], settings(), new Rng(1));
    // Counted in group 1 its zero return would have lowered the others' baseline; it gives no sample either.
    expect(withLost.batches).toEqual(without.batches);
    expect(stats).toEqual(expected);
    for (const st of lost.steps) expect(withLost.batches[0].some((x) => x.prompt[0] === st.prompt[0])).toBe(false);
  });

  it('leaves out episodes a failure ended: their group is normalised as a smaller one, and a group of failures gives nothing', async () => {
    const e = handEpisodes();
    // Group 1 gets a third rollout and group 3 only rollouts that failed (the environment, or a prompt too long).
    const failed = (group: number, steps: StepRecord[]): Episode => ({
      ...episode(group, steps),
      outcome: 'failed',
      failure: 'POST /step lost the connection',
    });
    const g1cut = failed(1, [step(50), step(50)]);
    const g3 = [failed(3, [step(10)]), failed(3, [step(90)])];
    for (const gigpo of [null, { omega: 1, gamma: 0.95, mode: 'mean_std_norm' as const }]) {
      const engine = new RecordingEngine();
      const stats = await updatePolicy(engine, [...Object.values(e), g1cut, ...g3], settings({ gigpo }), new Rng(1));
      const prompts = new Set(engine.batches[0].map((s) => s.prompt[0]));
      for (const st of [...g1cut.steps, ...g3.flatMap((x) => x.steps)]) expect(prompts.has(st.prompt[0])).toBe(false);
      // The same samples and advantages as without them.
      const without = new RecordingEngine();
      const expected = await updatePolicy(without, Object.values(e), settings({ gigpo }), new Rng(1));
      expect(engine.batches).toEqual(without.batches);
      expect(stats.meanReturn).toBe(expected.meanReturn);
    }
    const byPrompt = new Map(
      (
        await (async () => {
          const engine = new RecordingEngine();
          await updatePolicy(engine, [...Object.values(e), g1cut], settings(), new Rng(1));
          return engine.batches[0];
        })()
      ).map((s) => [s.prompt[0], s]),
    );
    expect(byPrompt.get(e.g1win.steps[0].prompt[0])!.advantages[0]).toBeCloseTo(A1, 9);
  });

  it('with skip_zero_advantage off, zero-advantage steps are trained with A = 0', async () => {
    const e = handEpisodes();
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, Object.values(e), settings({ skipZeroAdvantage: false }), new Rng(1));
    expect(stats.sequences).toBe(8);
    const g0 = engine.batches[0].filter((s) => [...e.g0a.steps, ...e.g0b.steps].some((st) => st.prompt[0] === s.prompt[0]));
    expect(g0).toHaveLength(3);
    for (const s of g0) expect(s.advantages.every((a) => a === 0)).toBe(true);
  });

  it('a KL penalty keeps zero-advantage steps (they still carry the KL gradient)', async () => {
    const engine = new RecordingEngine();
    const s = settings();
    const stats = await updatePolicy(
      engine,
      Object.values(handEpisodes()),
      { ...s, objective: { ...s.objective, klCoef: 0.1 } },
      new Rng(1),
    );
    expect(stats.sequences).toBe(8);
  });

  it('sequence-level low-probability masking zeroes the mask of a response whose min old log-prob is below the threshold', async () => {
    const lowStep = step(100, 3, -6);
    const eps = [episode(5, [lowStep, step(0)]), episode(5, [step(0)])];
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, eps, settings({ seqMinLogprob: -5, maskScope: 'all' }), new Rng(1));
    expect(stats.droppedLowProb).toBe(1);
    const dropped = engine.batches[0].find((x) => x.prompt[0] === lowStep.prompt[0])!;
    expect(dropped.mask).toEqual([0, 0, 0]);
    expect(engine.batches[0].filter((x) => x.mask.every((m) => m === 1))).toHaveLength(2);
  });

  it('masks apply to off-policy samples only by default (EMPO²): a plain rollout keeps its low-probability step', async () => {
    const lowStep = step(100, 3, -6);
    const engine = new RecordingEngine();
    const stats = await updatePolicy(
      engine,
      [episode(5, [lowStep]), episode(5, [step(0)])],
      settings({ seqMinLogprob: -5, objective: { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: 0.01 } }),
      new Rng(1),
    );
    expect(stats.droppedLowProb).toBe(0);
    const kept = engine.batches[0].find((x) => x.prompt[0] === lowStep.prompt[0])!;
    expect(kept.mask).toEqual([1, 1, 1]);
    expect(kept.lowProbMask).toBe(false);
  });

  it('off-policy mode: the update prompt is the sampled prompt without its tip block; old log-probs stay those sampled with tips', async () => {
    // Sampled prompt: [1, 2, | 90, 91, 92 (tips) |, 3]; the update must see [1, 2, 3].
    const withTips: StepRecord = { ...step(100, 2, -0.7), prompt: [1, 2, 90, 91, 92, 3], tipSpan: [2, 5] };
    const other: StepRecord = { ...step(0, 2, -0.7), prompt: [1, 2, 93, 3], tipSpan: [2, 3] };
    const engine = new RecordingEngine();
    const stats = await updatePolicy(
      engine,
      [
        { ...episode(7, [withTips]), mode: 'tips-off-policy' },
        { ...episode(7, [other]), mode: 'tips-off-policy' },
      ],
      settings({ seqMinLogprob: -5 }),
      new Rng(1),
    );
    expect(stats.offPolicySequences).toBe(2);
    const prompts = engine.batches[0].map((x) => x.prompt).sort((a, b) => a.length - b.length);
    expect(prompts).toEqual([
      [1, 2, 3],
      [1, 2, 3],
    ]);
    for (const x of engine.batches[0]) {
      expect(x.oldLogprobs).toEqual([-0.7, -0.7]);
      expect(x.lowProbMask).toBe(true);
    }
  });

  it('decoupled off-policy ratio: πold is the tip-free prompt scored before the update, A is weighted by min(cap, πold(a|s,u)/πold(a|s,u,tips))', async () => {
    // Sampled with tips: p = 0.8 then 0.2 per token. Tip-free before the update: 0.1 and 0.6, so w = 0.125 and min(1, 3) = 1.
    class ScoringEngine extends RecordingEngine {
      readonly scored: ScoredSequence[][] = [];
      override async logprobs(b: ScoredSequence[]): Promise<number[][]> {
        this.scored.push(b);
        return b.map(() => [Math.log(0.1), Math.log(0.6)]);
      }
    }
    const sampled = [Math.log(0.8), Math.log(0.2)];
    const win: StepRecord = { ...step(100), prompt: [1, 90, 91, 2], tipSpan: [1, 3], logprobs: sampled };
    const lose: StepRecord = { ...step(0), prompt: [1, 92, 2], tipSpan: [1, 2], logprobs: sampled };
    const plain = step(0);
    const engine = new ScoringEngine();
    const stats = await updatePolicy(
      engine,
      [
        { ...episode(4, [win]), mode: 'tips-off-policy' },
        { ...episode(4, [lose]), mode: 'tips-off-policy' },
        episode(5, [plain]),
        episode(5, [step(50)]),
      ],
      settings({ offPolicyRatio: 'decoupled', offPolicyWeightCap: 1 }),
      new Rng(1),
    );
    expect(engine.scored).toHaveLength(1);
    expect(engine.scored[0].map((x) => x.prompt)).toEqual([
      [1, 2],
      [1, 2],
    ]);
    const A = 0.5 / (Math.sqrt(2 * 0.5 ** 2) + 1e-6); // two rollouts, returns 1 and 0
    const byPrompt = (p: string) => engine.batches[0].filter((x) => x.prompt.join() === p);
    const off = byPrompt('1,2');
    expect(off).toHaveLength(2);
    for (const x of off) {
      expect(x.oldLogprobs).toEqual([Math.log(0.1), Math.log(0.6)]);
      const sign = Math.sign(x.advantages[1]);
      expect(x.advantages[0]).toBeCloseTo(sign * 0.125 * A, 9);
      expect(x.advantages[1]).toBeCloseTo(sign * A, 9);
    }
    // The plain group is untouched.
    const untouched = engine.batches[0].filter((x) => x.prompt.join() !== '1,2');
    expect(untouched.every((x) => x.oldLogprobs.every((lp) => lp === -0.5) && new Set(x.advantages).size === 1)).toBe(true);
    expect(stats.offPolicyMeanWeight).toBeCloseTo((0.125 + 1) / 2, 12);
  });

  it('the paper ratio (default) scores nothing extra and reports no weight', async () => {
    const withTips: StepRecord = { ...step(100), prompt: [1, 90, 2], tipSpan: [1, 2] };
    const engine = new RecordingEngine(); // its logprobs() throws
    const stats = await updatePolicy(
      engine,
      [
        { ...episode(6, [withTips]), mode: 'tips-off-policy' },
        { ...episode(6, [step(0)]), mode: 'tips-off-policy' },
      ],
      settings(),
      new Rng(1),
    );
    expect(stats.offPolicyMeanWeight).toBeNull();
    expect(engine.batches[0].every((x) => x.oldLogprobs.every((lp) => lp === -0.5))).toBe(true);
  });

  it('on-policy with tips: the update prompt is the sampled prompt, tips included', async () => {
    const withTips: StepRecord = { ...step(100), prompt: [1, 90, 2], tipSpan: [1, 2] };
    const engine = new RecordingEngine();
    await updatePolicy(engine, [{ ...episode(8, [withTips]), mode: 'tips-on-policy' }, episode(8, [step(0)])], settings(), new Rng(1));
    expect(engine.batches[0].some((x) => x.prompt.join() === '1,90,2')).toBe(true);
  });

  it('a group mixing modes (experimental.mode_draw_per_rollout) normalises over all its rollouts; each is scored on its own prompt', async () => {
    // Group 3: a tip-guided off-policy rollout scoring 100 and a plain one scoring 0: returns 1 and 0, A = ±0.7071.
    const guided: StepRecord = { ...step(100), prompt: [5, 90, 91, 6], tipSpan: [1, 3] };
    const plain: StepRecord = { ...step(0), prompt: [5, 6] };
    const engine = new RecordingEngine();
    const stats = await updatePolicy(
      engine,
      [
        { ...episode(3, [guided]), mode: 'tips-off-policy' },
        { ...episode(3, [plain]), mode: 'plain' },
      ],
      settings(),
      new Rng(1),
    );
    const A = 0.5 / (Math.sqrt(2 * 0.5 ** 2) + 1e-6);
    const batch = engine.batches[0];
    expect(batch).toHaveLength(2);
    expect(stats.offPolicySequences).toBe(1);
    const off = batch.find((x) => x.lowProbMask)!;
    const own = batch.find((x) => !x.lowProbMask)!;
    expect(off.prompt).toEqual([5, 6]); // tips cut out
    expect(off.advantages.every((a) => Math.abs(a - A) < 1e-9)).toBe(true);
    expect(own.prompt).toEqual([5, 6]);
    expect(own.advantages.every((a) => Math.abs(a + A) < 1e-9)).toBe(true);
  });

  it('intrinsic rewards add to the return before group normalisation', async () => {
    // Same environment reward (0) in both rollouts; intrinsic 0.3 + 0.2 = 0.5 vs 0: returns 0.5, 0 ->
    // mean 0.25, unbiased std 0.35355 -> A = ±0.7071.
    const engine = new RecordingEngine();
    const a = episode(9, [step(0), step(0)]);
    const b = episode(9, [step(0)]);
    await updatePolicy(
      engine,
      [
        { ...a, intrinsic: [0.3, 0.2] },
        { ...b, intrinsic: [0] },
      ],
      settings(),
      new Rng(1),
    );
    const advs = engine.batches[0].map((x) => x.advantages[0]).sort((x, y) => x - y);
    expect(advs[0]).toBeCloseTo(-0.7071, 4);
    expect(advs[2]).toBeCloseTo(0.7071, 4);
  });

  it('minibatches × epochs optimiser steps, each epoch covering every sample exactly once', async () => {
    const e = handEpisodes();
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, Object.values(e), settings({ minibatches: 2, epochs: 2 }), new Rng(3));
    expect(stats.optimizerSteps).toBe(4);
    expect(engine.batches.map((b) => b.length)).toEqual([3, 2, 3, 2]);
    for (const epoch of [0, 1]) {
      const prompts = engine.batches
        .slice(epoch * 2, epoch * 2 + 2)
        .flat()
        .map((s) => s.prompt[0])
        .sort((a, b) => a - b);
      expect(prompts).toEqual(
        [e.g1win.steps[0], e.g1win.steps[1], e.g1lose.steps[0], e.g1lose.steps[1], e.g2.steps[0]]
          .map((s) => s.prompt[0])
          .sort((a, b) => a - b),
      );
    }
    // Averages over optimiser steps of what the engine reported.
    expect(stats.loss).toBeCloseTo(0.25, 12);
    expect(stats.gradNorm).toBeCloseTo(2, 12);
  });

  it('a batch where every group is uniform takes no optimiser step', async () => {
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, [episode(0, [step(10)]), episode(0, [step(10)])], settings(), new Rng(1));
    expect(engine.batches).toHaveLength(0);
    expect(stats.optimizerSteps).toBe(0);
    expect(stats.sequences).toBe(0);
    expect(stats.meanRatio).toBe(1);
  });
});
