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
import type { Env } from '../envs/types.ts';
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
