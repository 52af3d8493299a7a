/**
 * Rollouts in chunks (env.max_instances below the batch size): every job still gets its episode,
 * in job order, with the same result as one batch when the policy is deterministic; the memory
 * sees episode indices of the whole batch; no policy call batches more episodes than there are
 * environments. The policy is a deterministic stand-in (a valid action picked from a hash of the
 * prompt), because what is tested is the bookkeeping around it, not sampling.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import { resolveAlgo } from '../config/schema.ts';
import { createEnv } from '../envs/index.ts';
import type { Env, Split } from '../envs/types.ts';
import type { GenerateOptions, Generation, PolicyEngine } from '../policy/types.ts';
import { MemoryRuntime } from './memory-runtime.ts';
import { rolloutSettings, runEpisodesInChunks, type TipQuery } from './rollout.ts';
import type { RolloutJob } from '../run/records.ts';

const cfg = loadConfig(null, ['env.tasks=[fetch,power]', 'env.max_steps=5', 'rollout.constrained=true']);

class HashPolicy {
  readonly batchSizes: number[] = [];
  readonly tokenizer = { encode: (text: string) => [...Buffer.from(text, 'utf8')] };
  async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    this.batchSizes.push(prompts.length);
    return prompts.map((p, i) => {
      const valid = opts.allowedTexts![i] ?? ['look around'];
      const text = valid[p.reduce((a, b) => (a * 31 + b) % 1_000_003, 7) % valid.length];
      return { tokens: [1, 2], logprobs: [-0.1, -0.2], text, finish: 'stop' };
    });
  }
}

async function envs(n: number): Promise<Env[]> {
  return Promise.all(Array.from({ length: n }, () => createEnv(cfg.env)));
}

const jobs: RolloutJob[] = [0, 1, 2, 3, 4].map((k) => ({ task: k % 2 ? 'power' : 'fetch', variation: k, group: k }));
const settings = () => rolloutSettings(cfg, false, 5);

describe('runEpisodesInChunks', () => {
  it('runs 5 jobs on 2 environments in job order, batching at most 2 episodes, with the results of one 5-wide batch', async () => {
    const chunkedPolicy = new HashPolicy();
    const chunked = await runEpisodesInChunks(await envs(2), chunkedPolicy as unknown as PolicyEngine, jobs, { settingsFor: settings });
    const widePolicy = new HashPolicy();
    const wide = await runEpisodesInChunks(await envs(5), widePolicy as unknown as PolicyEngine, jobs, { settingsFor: settings });
    expect(chunked.episodes.map((e) => [e.task, e.variation, e.group])).toEqual(jobs.map((j) => [j.task, j.variation, j.group]));
    expect(Math.max(...chunkedPolicy.batchSizes)).toBe(2);
    expect(Math.max(...widePolicy.batchSizes)).toBe(5);
    expect(chunked.episodes.map((e) => e.steps.map((s) => s.action))).toEqual(wide.episodes.map((e) => e.steps.map((s) => s.action)));
    expect(chunked.episodes.map((e) => e.score)).toEqual(wide.episodes.map((e) => e.score));
    const steps = chunked.episodes.reduce((a, e) => a + e.steps.length, 0);
    expect(chunked.stats.envSteps).toBe(steps);
    expect(chunked.stats.generatedTokens).toBe(2 * steps);
  });

  it('a row the engine could not sample (engine error) ends that episode with its steps so far; the others go on', async () => {
    const policy = new HashPolicy();
    const sample = policy.generate.bind(policy);
    let calls = 0;
    // The second call's first row (episode 0's second step) is lost.
    policy.generate = async (prompts, opts) => {
      const gens = await sample(prompts, opts);
      if (++calls === 2) gens[0] = { tokens: [], logprobs: [], text: '', finish: 'length', error: 'no rollout server is left' };
      return gens;
    };
    const { episodes } = await runEpisodesInChunks(await envs(2), policy as unknown as PolicyEngine, jobs.slice(0, 2), {
      settingsFor: settings,
    });
    expect(episodes[0].engineError).toBe('no rollout server is left');
    expect(episodes[0].steps).toHaveLength(1);
    expect(episodes[1].engineError).toBeUndefined();
    expect(episodes[1].steps.length).toBeGreaterThan(1);
  });

  it('gives the memory indices of the whole batch and seeds each chunk from its first job', async () => {
    const asked = new Set<number>();
    const usesAsked = new Set<number>();
    const memory = {
      uses: (i: number) => {
        usesAsked.add(i);
        return i % 2 === 0;
      },
      tips: async (queries: { episode: number }[]) => queries.map((q) => (asked.add(q.episode), [])),
    };
    const seeds: number[] = [];
    await runEpisodesInChunks(await envs(2), new HashPolicy() as unknown as PolicyEngine, jobs, {
      settingsFor: (start) => (seeds.push(start), settings()),
      memory,
    });
    expect([...usesAsked].sort()).toEqual([0, 1, 2, 3, 4]);
    expect([...asked].sort()).toEqual([0, 2, 4]);
    expect(seeds).toEqual([0, 2, 4]);
  });

  it('asks the memory with the actions taken and the score reached before each step', async () => {
    const asked: TipQuery[] = [];
    const memory = { uses: () => true, tips: async (queries: TipQuery[]) => queries.map((q) => (asked.push(q), [])) };
    const { episodes } = await runEpisodesInChunks(await envs(2), new HashPolicy() as unknown as PolicyEngine, jobs, {
      settingsFor: () => settings(),
      memory,
    });
    for (const [i, e] of episodes.entries()) {
      const mine = asked.filter((q) => q.episode === i);
      expect(mine).toHaveLength(e.steps.length);
      mine.forEach((q, t) => {
        expect(q.taken).toEqual(e.steps.slice(0, t).map((st) => st.action));
        expect(q.scoreSoFar).toBe(t > 0 ? e.steps[t - 1].score : 0);
        expect(q.state).toBe(e.steps[t].observation);
      });
    }
    expect(episodes.some((e) => e.score > 0)).toBe(true);
  });
});

/** Plays the action of the last tip in the prompt when it is valid (tips are shown best last), else the first valid action. */
class TipFollower {
  readonly tokenizer = { encode: (text: string) => [...Buffer.from(text, 'utf8')] };
  async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    return prompts.map((p, i) => {
      const valid = opts.allowedTexts![i] ?? [];
      const named = [
        ...Buffer.from(p)
          .toString('utf8')
          .matchAll(/The action you took was (.+?);/g),
      ].map((m) => m[1]);
      const last = named[named.length - 1];
      return { tokens: [1], logprobs: [-0.1], text: last !== undefined && valid.includes(last) ? last : valid[0], finish: 'stop' };
    });
  }
}

describe('experimental.tip_source=oracle in rollouts', () => {
  const oracleCfg = loadConfig(null, [
    'env.tasks=[power,clue,unlock]',
    'rollout.constrained=true',
    'algo.name=empo2',
    'algo.p=1',
    'experimental.tip_source=oracle',
    'memory.reflector=summary',
  ]);
  const oracleJobs: RolloutJob[] = ['power', 'clue', 'unlock'].map((task, k) => ({ task, variation: k, group: k }));

  it("a policy that follows the tip solves every episode: the tip is the environment's own next step", async () => {
    const engine = new TipFollower() as unknown as PolicyEngine;
    const memory = await MemoryRuntime.create(oracleCfg, resolveAlgo(oracleCfg), engine, { checkpoint: null });
    const guided = await runEpisodesInChunks(await Promise.all(oracleJobs.map(() => createEnv(oracleCfg.env))), engine, oracleJobs, {
      settingsFor: () => rolloutSettings(oracleCfg, false, 1),
      memory: { tips: memory.tipSource(), uses: () => true },
    });
    expect(guided.episodes.map((e) => [e.score, e.success])).toEqual(oracleJobs.map(() => [100, true]));
    expect(guided.episodes.every((e) => e.steps.every((s) => s.tipSpan !== null))).toBe(true);
    const plain = await runEpisodesInChunks(await Promise.all(oracleJobs.map(() => createEnv(oracleCfg.env))), engine, oracleJobs, {
      settingsFor: () => rolloutSettings(oracleCfg, false, 1),
    });
    expect(plain.episodes.some((e) => !e.success)).toBe(true);
  });

  it('names the environment when it has no solver', async () => {
    const env = await createEnv(oracleCfg.env);
    Object.defineProperty(env, 'oracleAction', { value: undefined });
    const memory = await MemoryRuntime.create(oracleCfg, resolveAlgo(oracleCfg), new TipFollower() as unknown as PolicyEngine, {
      checkpoint: null,
    });
    await expect(
      runEpisodesInChunks([env], new TipFollower() as unknown as PolicyEngine, oracleJobs.slice(0, 1), {
        settingsFor: () => rolloutSettings(oracleCfg, false, 1),
        memory: { tips: memory.tipSource(), uses: () => true },
      }),
    ).rejects.toThrow(
      /experimental\.tip_source: oracle needs an environment with a scripted solver \(the built-in one\); builtin has none/,
    );
  });
});

/** The built-in environment, with a long observation where `huge` says (on reset, or on the step numbered `at`). */
class LongObservations implements Env {
  private steps = 0;
  constructor(
    private readonly inner: Env,
    private readonly huge: { onReset?: string; onStep?: { at: number; text: string }; failStep?: number },
  ) {}
  get name() {
    return this.inner.name;
  }
  tasks = () => this.inner.tasks();
  variations = (task: string, split: Split) => this.inner.variations(task, split);
  maxSteps = (task: string) => this.inner.maxSteps(task);
  validActions = () => this.inner.validActions();
  score = () => this.inner.score();
  done = () => this.inner.done();
  close = () => this.inner.close();
  async reset(task: string, variation: number, seed?: number) {
    this.steps = 0;
    const r = await this.inner.reset(task, variation, seed);
    return this.huge.onReset ? { ...r, observation: this.huge.onReset } : r;
  }
  async step(action: string) {
    const r = await this.inner.step(action);
    this.steps++;
    if (this.huge.failStep === this.steps)
      return { ...r, done: true, info: { outcome: 'simulator_error', simulatorError: 'POST /step lost the connection' } };
    return this.huge.onStep?.at === this.steps ? { ...r, observation: this.huge.onStep.text } : r;
  }
}

/** HashPolicy that records the longest text it was asked to tokenise, with a context of `contextLength` tokens. */
class MeasuredPolicy extends HashPolicy {
  longestEncoded = 0;
  readonly generated: number[] = [];
  constructor(readonly contextLength?: number) {
    super();
    const encode = this.tokenizer.encode;
    this.tokenizer.encode = (text: string) => ((this.longestEncoded = Math.max(this.longestEncoded, text.length)), encode(text));
  }
  override async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    this.generated.push(...prompts.map((p) => p.length));
    return super.generate(prompts, opts);
  }
}

describe('observations too long for the policy, and environment failures', () => {
  const limited = loadConfig(null, [
    'env.tasks=[fetch,power]',
    'env.max_steps=5',
    'rollout.constrained=true',
    'env.max_observation_bytes=4096',
  ]);
  const twoJobs = jobs.slice(0, 2);
  const words = 'the red box is next to the green door in the kitchen ';
  const huge = words.repeat(200_000); // about 10 MB

  it('an observation over env.max_observation_bytes on reset or on a step ends its episode as failed, untokenised, naming the limit', async () => {
    const policy = new MeasuredPolicy();
    const envs = [
      new LongObservations(await createEnv(limited.env), { onReset: huge }),
      new LongObservations(await createEnv(limited.env), { onStep: { at: 2, text: huge } }),
    ];
    const { episodes } = await runEpisodesInChunks(envs, policy as unknown as PolicyEngine, twoJobs, {
      settingsFor: () => rolloutSettings(limited, false, 5),
    });
    expect(policy.longestEncoded).toBeLessThan(20_000);
    expect(episodes.map((e) => [e.outcome, e.steps.length])).toEqual([
      ['failed', 0],
      ['failed', 2],
    ]);
    for (const e of episodes) {
      expect(e.failure).toBe(`the observation of ${Buffer.byteLength(huge)} bytes is over env.max_observation_bytes (4096)`);
      expect(e.finalObservation.length).toBeLessThan(2_000);
      expect(e.finalObservation).toMatch(/… \[cut: the observation of \d+ bytes is over env\.max_observation_bytes \(4096\)\]$/);
    }
  });

  it('a task description over the limit ends its episode the same way', async () => {
    const policy = new MeasuredPolicy();
    const env = await createEnv(limited.env);
    const reset = env.reset.bind(env);
    env.reset = async (task, variation, seed) => ({ ...(await reset(task, variation, seed)), task: huge });
    const { episodes } = await runEpisodesInChunks([env], policy as unknown as PolicyEngine, twoJobs.slice(0, 1), {
      settingsFor: () => rolloutSettings(limited, false, 5),
    });
    expect(policy.longestEncoded).toBeLessThan(20_000);
    expect(episodes[0]).toMatchObject({
      outcome: 'failed',
      failure: expect.stringMatching(/^the task description of \d+ bytes is over env\.max_observation_bytes/),
    });
  });

  it("a prompt longer than the model's context ends its episode as failed, before it is sent; the others play on", async () => {
    // Prompts here are UTF-8 bytes: the first step's prompt fits 1,500 tokens, a 1,200-byte observation then does not.
    const policy = new MeasuredPolicy(1_500);
    const long = 'a long but allowed observation. '.repeat(40);
    const envs = [
      new LongObservations(await createEnv(limited.env), { onStep: { at: 1, text: long } }),
      new LongObservations(await createEnv(limited.env), {}),
    ];
    const { episodes } = await runEpisodesInChunks(envs, policy as unknown as PolicyEngine, twoJobs, {
      settingsFor: () => rolloutSettings(limited, false, 5),
    });
    expect(Math.max(...policy.generated)).toBeLessThanOrEqual(1_500 - limited.rollout.max_tokens);
    expect(episodes[0]).toMatchObject({ outcome: 'failed', steps: [expect.anything()] });
    expect(episodes[0].failure).toMatch(
      new RegExp(
        `^its prompt of \\d+ tokens, with up to ${limited.rollout.max_tokens} to generate \\(rollout\\.max_tokens\\), is longer than the model's context of 1500 tokens$`,
      ),
    );
    expect(episodes[1].outcome).not.toBe('failed');
    expect(episodes[1].steps.length).toBeGreaterThan(1);
  });

  it('an episode the environment reports failed (simulator_error) ends as failed, saying what failed; the others keep their outcome', async () => {
    const envs = [
      new LongObservations(await createEnv(limited.env), { failStep: 1 }),
      new LongObservations(await createEnv(limited.env), {}),
    ];
    const { episodes } = await runEpisodesInChunks(envs, new HashPolicy() as unknown as PolicyEngine, twoJobs, {
      settingsFor: () => rolloutSettings(limited, false, 5),
    });
    expect(episodes[0]).toMatchObject({ outcome: 'failed', failure: 'POST /step lost the connection' });
    expect(['success', 'ended', 'step_limit']).toContain(episodes[1].outcome);
    expect(episodes[1].outcome === 'success').toBe(episodes[1].success);
  });
});
