/**
 * GiGPO in the trainer: per-step advantages through updatePolicy and packing (hand-made episodes against
 * a recording engine), its configuration, and two iterations of `algo.name: gigpo` end to end on the
 * built-in environment with the tiny model.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../config/load.ts';
import { resolveAlgo } from '../config/schema.ts';
import type { ObjectiveConfig } from '../algo/objective.ts';
import { ADVANTAGE_EPS } from '../algo/advantage.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { TfjsEngine } from '../policy/tfjs/engine.ts';
import type { GenerateOptions, Generation, PolicyEngine, ScoredSequence, TrainSequence, TrainStats } from '../policy/types.ts';
import { Rng } from '../util/rng.ts';
import { updatePolicy, type UpdateSettings, type UpdateEpisode } from './update.ts';
import type { StepRecord } from '../run/records.ts';
import { train } from './trainer.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';

/** Records every trainStep batch; scores every policy token at log 0.5 when asked. */
class RecordingEngine implements PolicyEngine {
  readonly tokenizer = { encode: () => [], decode: () => '', vocabSize: 0, tokenToId: () => undefined };
  readonly batches: TrainSequence[][] = [];
  async generate(_p: number[][], _o: GenerateOptions): Promise<Generation[]> {
    throw new Error('not used');
  }
  async logprobs(b: ScoredSequence[]): Promise<number[][]> {
    return b.map((x) => (x.policyTokens ?? x.response.map(() => 1)).filter((f) => f === 1).map(() => Math.log(0.5)));
  }
  async trainStep(batch: TrainSequence[], _o: ObjectiveConfig): Promise<TrainStats> {
    this.batches.push(batch);
    return { loss: 0, tokens: batch.reduce((a, s) => a + s.mask.length, 0), clipFraction: 0, meanRatio: 1, kl: 0, gradNorm: 0 };
  }
  async save(): Promise<void> {}
  dispose(): void {}
}

const settings = (o: Partial<UpdateSettings> = {}): UpdateSettings => ({
  objective: { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: null },
  seqMinLogprob: null,
  minibatches: 1,
  epochs: 1,
  rewardScale: 0.01,
  skipZeroAdvantage: true,
  temperature: 1,
  gigpo: { omega: 1, gamma: 0.5, mode: 'mean_std_norm' },
  ...o,
});

/**
 * The three rollouts of src/algo/gigpo.test.ts as episodes whose prompts extend each other (the instruct
 * dialogue): prompt_{t+1} = prompt_t + response_t + one context token. Rewards 0-100, scaled by 0.01.
 *   a: s0 → s1 → s2, rewards 0, 0, 100;  b: s0 → s1 → s3, all 0;  c: s0 → s4, rewards 0, 50.
 * Hand-computed there (γ = 0.5, ω = 1): a ≈ [1.57735, 1.70711, 1], b ≈ [-2.15470, -1.70711, -1],
 * c ≈ [0.57735, 0] (c's second step: A_E = 0 and a step group of one).
 */
function episodeOf(id: number, anchors: string[], rewards: number[]): UpdateEpisode {
  const steps: StepRecord[] = [];
  let prompt = [id, 1];
  anchors.forEach((observation, t) => {
    const response = [100 + 10 * id + t, 200 + 10 * id + t];
    steps.push({ observation, prompt, tipSpan: null, response, logprobs: [-0.1, -0.2], action: `act ${t}`, reward: rewards[t], score: 0 });
    prompt = [...prompt, ...response, 50 + t];
  });
  return { task: 'fetch', description: 'd', variation: 0, group: 0, steps, finalObservation: 'end', score: 0, success: false };
}
const a = episodeOf(1, ['s0', 's1', 's2'], [0, 0, 100]);
const b = episodeOf(2, ['s0', 's1', 's3'], [0, 0, 0]);
const c = episodeOf(3, ['s0', 's4'], [0, 50]);

const sE = 0.5 + ADVANTAGE_EPS;
const s0 = 1 / Math.sqrt(48) + ADVANTAGE_EPS;
const s1 = Math.sqrt(0.125) + ADVANTAGE_EPS;
const expected = {
  a: [0.5 / sE + 1 / 12 / s0, 0.5 / sE + 0.25 / s1, 0.5 / sE],
  b: [-0.5 / sE - 1 / 6 / s0, -0.5 / sE - 0.25 / s1, -0.5 / sE],
  c0: 1 / 12 / s0,
};
const closeAll = (actual: number[], wanted: number[]) => {
  expect(actual).toHaveLength(wanted.length);
  actual.forEach((x, i) => expect(x, `token ${i}`).toBeCloseTo(wanted[i], 9));
};
const firstOf = (batch: TrainSequence[], ep: UpdateEpisode) =>
  batch.find((x) => x.prompt.join() === ep.steps[0].prompt.join() || x.prompt.join() === ep.steps[1].prompt.join())!;

describe('updatePolicy with the GiGPO step advantage', () => {
  it('each step gets its own advantage on every one of its tokens; a step with A = 0 is left out', async () => {
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, [a, b, c], settings(), new Rng(1));
    const batch = engine.batches[0];
    const of = (st: StepRecord) => batch.find((x) => x.prompt.join() === st.prompt.join());
    a.steps.forEach((st, t) => closeAll(of(st)!.advantages, [expected.a[t], expected.a[t]]));
    b.steps.forEach((st, t) => closeAll(of(st)!.advantages, [expected.b[t], expected.b[t]]));
    closeAll(of(c.steps[0])!.advantages, [expected.c0, expected.c0]);
    expect(of(c.steps[1])).toBeUndefined();
    expect(stats.sequences).toBe(3 + 3 + 1);
    // s0 (3 steps), s1 (2), s2, s3, s4 (1 each): 8 steps in 5 groups; all three rollouts have 2+ steps and vary.
    expect(stats.stepGroups).toEqual({ count: 5, meanSize: 8 / 5, maxSize: 3, singletonShare: 3 / 5, variedRollouts: 1 });
  });

  it("packed: one sequence per episode carrying each step's advantage on its own policy tokens, in order", async () => {
    const engine = new RecordingEngine();
    const stats = await updatePolicy(engine, [a, b, c], settings({ pack: true }), new Rng(1));
    const batch = engine.batches[0];
    expect(batch).toHaveLength(3);
    const packedA = firstOf(batch, a);
    // prompt [1, 1]; response r0 r0' ctx r1 r1' ctx r2 r2': six policy tokens, two per step.
    expect(packedA.prompt).toEqual(a.steps[0].prompt);
    expect(packedA.policyTokens).toEqual([1, 1, 0, 1, 1, 0, 1, 1]);
    closeAll(
      packedA.advantages,
      expected.a.flatMap((x) => [x, x]),
    );
    closeAll(
      firstOf(batch, b).advantages,
      expected.b.flatMap((x) => [x, x]),
    );
    // c's second step (A = 0) is not trained, so c's first step stands alone, unpacked.
    const onlyC = firstOf(batch, c);
    expect(onlyC.policyTokens).toBeUndefined();
    closeAll(onlyC.advantages, [expected.c0, expected.c0]);
    expect(stats.steps).toBe(7);
    expect(stats.packedSteps).toBe(6);
  });

  it('a zero-advantage step between trained ones stays in the packed sequence as context, not as policy tokens', async () => {
    // c visits s0, then s5 (nobody else), then s1, rewards 0, 50, 0: R = 0.5 = the group mean, so A_E = 0.
    // γ = 0.5: G_c = [0.25, 0.5, 0]. s0 = {a 0.25, b 0, c 0.25} as before: c0 = (1/12) / (1/√48 + 1e-6) ≈ 0.57735.
    // s5 = {c1}: a group of one, A = 0 + 0, left out. s1 = {a 0.5, b 0, c 0}: mean 1/6, unbiased variance
    // ((1/3)² + 2·(1/6)²) / 2 = 1/12, so c2 = (0 - 1/6) / (√(1/12) + 1e-6) ≈ -0.57735.
    const loop = episodeOf(3, ['s0', 's5', 's1'], [0, 50, 0]);
    const c0 = 1 / 12 / s0;
    const c2 = -1 / 6 / (Math.sqrt(1 / 12) + ADVANTAGE_EPS);
    const engine = new RecordingEngine();
    await updatePolicy(engine, [a, b, loop], settings({ pack: true }), new Rng(1));
    const packed = firstOf(engine.batches[0], loop);
    expect(packed.prompt).toEqual(loop.steps[0].prompt);
    // r0 r0' | ctx r1 r1' ctx | r2 r2': the left-out step's response only conditions the next one.
    expect(packed.response).toEqual([...loop.steps[0].response, 50, ...loop.steps[1].response, 51, ...loop.steps[2].response]);
    expect(packed.policyTokens).toEqual([1, 1, 0, 0, 0, 0, 1, 1]);
    closeAll(packed.advantages, [c0, c0, c2, c2]);
    expect(packed.oldLogprobs).toEqual([-0.1, -0.2, -0.1, -0.2]);
    expect(c2).toBeCloseTo(-0.57735, 4);
  });

  it("decoupled off-policy on a packed episode weights each step's own advantage (not the first step's)", async () => {
    const engine = new RecordingEngine();
    const offA = { ...a, mode: 'tips-off-policy' as const };
    await updatePolicy(engine, [offA, b, c], settings({ pack: true, offPolicyRatio: 'decoupled', offPolicyWeightCap: null }), new Rng(1));
    const packedA = firstOf(engine.batches[0], offA);
    // cap null: w = 1, so the advantages are unchanged and old log-probs are the tip-free scores.
    closeAll(
      packedA.advantages,
      expected.a.flatMap((x) => [x, x]),
    );
    expect(packedA.oldLogprobs).toEqual(new Array(6).fill(Math.log(0.5)));
  });

  it('ω = 0 trains exactly what GRPO trains', async () => {
    const gigpo = new RecordingEngine();
    const grpo = new RecordingEngine();
    await updatePolicy(gigpo, [a, b, c], settings({ gigpo: { omega: 0, gamma: 0.95, mode: 'mean_std_norm' } }), new Rng(1));
    await updatePolicy(grpo, [a, b, c], settings({ gigpo: null }), new Rng(1));
    expect(gigpo.batches).toEqual(grpo.batches);
  });
});

describe('GiGPO configuration', () => {
  it('algo.name gigpo is GRPO with the step advantage, verl-agent defaults ω 1, γ 0.95, mean_std_norm; it is the default (results/default-learns/); plain GRPO has none', () => {
    const g = loadConfig(null, ['algo.name=gigpo']);
    expect(resolveAlgo(g)).toMatchObject({ p: 0, intrinsic: 'none', memory: false, stepAdvantage: 'gigpo' });
    expect([g.algo.gigpo_omega, g.algo.gigpo_gamma, g.algo.gigpo_mode]).toEqual([1, 0.95, 'mean_std_norm']);
    expect(resolveAlgo(loadConfig(null, [])).stepAdvantage).toBe('gigpo');
    expect(resolveAlgo(loadConfig(null, ['algo.name=grpo'])).stepAdvantage).toBe('none');
    expect(resolveAlgo(loadConfig(null, ['algo.name=empo2'])).stepAdvantage).toBe('none');
  });

  it('composes with EMPO²: algo.name empo2 with algo.step_advantage gigpo keeps memory, modes and intrinsic reward', () => {
    const cfg = loadConfig(null, ['algo.name=empo2', 'algo.step_advantage=gigpo', 'algo.gigpo_omega=0.5']);
    expect(resolveAlgo(cfg)).toMatchObject({ p: 0.25, intrinsic: 'novelty', memory: true, stepAdvantage: 'gigpo' });
  });

  it('refuses contradictions and bad values, naming the key', () => {
    expect(() => loadConfig(null, ['algo.name=gigpo', 'algo.step_advantage=none'])).toThrow(
      /algo\.step_advantage: none with algo\.name=gigpo/,
    );
    expect(() => loadConfig(null, ['algo.name=gigpo', 'algo.p=0.5'])).toThrow(
      /algo\.p: 0\.5 with algo\.name=gigpo \(GiGPO never rolls out with memory; use algo\.name=empo2 with algo\.step_advantage=gigpo\)/,
    );
    expect(() => loadConfig(null, ['algo.name=gigpo', 'algo.intrinsic=novelty'])).toThrow(ConfigError);
    expect(() => loadConfig(null, ['algo.gigpo_gamma=1.5'])).toThrow(/algo\.gigpo_gamma/);
    expect(() => loadConfig(null, ['algo.gigpo_mode=std'])).toThrow(/algo\.gigpo_mode/);
  });
});

describe('algo.name gigpo end to end', () => {
  const root = mkdtempSync(join(tmpdir(), 'empo2-gigpo-'));
  afterAll(() => {
    vi.restoreAllMocks();
    rmSync(root, { recursive: true, force: true });
  });
  beforeAll(async () => {
    await initBackend();
  });

  it('two iterations train, log how the anchor states grouped, and give steps of one rollout different advantages', async () => {
    const trained: TrainSequence[][] = [];
    const original = TfjsEngine.prototype.trainStep;
    vi.spyOn(TfjsEngine.prototype, 'trainStep').mockImplementation(function (this: TfjsEngine, batch, ...rest) {
      trained.push(batch.map((s) => ({ ...s, advantages: [...s.advantages] })));
      return original.call(this, batch, ...rest);
    });
    const dir = join(root, 'run');
    const logs: string[] = [];
    // As trainer.test.ts: seed 3, groups of 3, 6-step episodes of `fetch` (scores differ within the group at iteration 1).
    const cfg = loadConfig(null, [
      `run_dir=${dir}`,
      'seed=3',
      ...TINY_MODEL,
      'env.tasks=[fetch]',
      'env.eval_variations=1',
      'env.max_steps=6',
      'rollout.tasks_per_batch=1',
      'rollout.group_size=3',
      'train.iterations=2',
      'train.eval_every=0',
      'algo.name=gigpo',
    ]);
    const result = await train(cfg, { resume: false, log: (l) => logs.push(l) });
    expect(result.iterations).toBe(2);
    expect(logs.join('\n')).toMatch(/algo gigpo: .*GiGPO step advantage \(ω=1, γ=0\.95, mean_std_norm\)/);

    const lines = readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const trainLines = lines.filter((l) => l.type === 'train');
    expect(trainLines).toHaveLength(2);
    const first = trainLines[0];
    // Every rollout starts from the same reset observation: at least one step group holds all three.
    expect(first.step_groups.max_size).toBeGreaterThanOrEqual(3);
    expect(first.step_groups.count).toBeGreaterThan(0);
    // States repeat and scores differ: some rollout's steps got different advantages.
    expect(first.step_groups.varied_rollouts).toBeGreaterThan(0);

    // What the optimiser was given at iteration 1: GRPO would give one group of three rollouts at most three
    // distinct advantages; the step term gives more.
    expect(trained.length).toBeGreaterThan(0);
    const distinct = new Set(trained[0].flatMap((s) => s.advantages.map((x) => x.toFixed(9))));
    expect(distinct.size).toBeGreaterThan(3);
    // Each (unpacked, plain-prompt) step carries one advantage on all its tokens.
    for (const s of trained[0]) expect(new Set(s.advantages).size).toBe(1);
  });
});
