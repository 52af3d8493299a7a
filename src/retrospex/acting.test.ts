/**
 * Retrospex as a whole on a tiny environment: episodes logged by one policy, recorded as empo2 records
 * them, train a critic; the critic then overrules a frozen "LLM" that prefers the wrong lever.
 *
 * The environment: a hall and a corridor to walk through (`go on`, or `wait`), then two levers; a
 * star marks the one that opens the door (100 points), blue on even variations and red on odd ones,
 * and pulling either ends the episode. The LLM stand-in always ranks `pull red lever` (0.7) above
 * `pull blue lever` (0.3) and `go on` (0.8) above `wait` (0.2), and proposes its top-k actions in that
 * order when asked k times (as beam search would); alone it plays its favourite, so it opens the door
 * on odd variations only. The logged episodes are a uniformly random policy's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import type { Env, ResetResult, Split, StepResult } from '../envs/types.ts';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import type { GenerateOptions, Generation, PolicyEngine } from '../policy/types.ts';
import { recordEpisodes } from '../run/episode-log.ts';
import type { Episode, RolloutJob } from '../run/records.ts';
import { rolloutSettings, runEpisodesInChunks } from '../trainer/rollout.ts';
import { TrajectoryFile } from '../trajectory/reader.ts';
import { TrajectoryWriter } from '../trajectory/writer.ts';
import { Rng } from '../util/rng.ts';
import { RetrospexEngine } from './actor.ts';
import type { Critic } from './critic.ts';
import { readLoggedData } from './dataset.ts';
import { TextVectors } from './encoder.ts';
import { RETROSPEX_TRAINING, trainCritic } from './train.ts';

class LeverEnv implements Env {
  readonly name = 'levers';
  private variation = 0;
  private room: 'hall' | 'corridor' | 'levers' | 'out' = 'hall';
  private steps = 0;
  private points = 0;

  tasks(): string[] {
    return ['levers'];
  }
  variations(_task: string, split: Split): number[] {
    const start = { train: 0, dev: 40, test: 20 }[split];
    return Array.from({ length: split === 'train' ? 20 : 10 }, (_, i) => start + i);
  }
  maxSteps(): number {
    return 6;
  }
  private get star(): 'blue' | 'red' {
    return this.variation % 2 === 0 ? 'blue' : 'red';
  }
  private get observation(): string {
    const v = this.variation;
    if (this.room === 'hall') return `Hall ${v}. A corridor leads on.`;
    if (this.room === 'corridor') return `Corridor ${v}. The lever room is ahead.`;
    return `Lever room ${v}. A star marks the ${this.star} lever.`;
  }
  validActions(): string[] {
    if (this.room === 'out') return [];
    return this.room === 'levers' ? ['pull blue lever', 'pull red lever'] : ['go on', 'wait'];
  }
  async reset(_task: string, variation: number): Promise<ResetResult> {
    Object.assign(this, { variation, room: 'hall', steps: 0, points: 0 });
    return { observation: this.observation, task: 'Open the door: pull the lever marked with a star.', validActions: this.validActions() };
  }
  async step(action: string): Promise<StepResult> {
    this.steps++;
    let observation: string;
    let reward = 0;
    if (this.room === 'levers' && /^pull (blue|red) lever$/.test(action)) {
      reward = action.includes(this.star) ? 100 : 0;
      observation = reward ? 'The door opens.' : 'The lights go out.';
      this.room = 'out';
    } else {
      if (action === 'go on' && this.room !== 'levers') this.room = this.room === 'hall' ? 'corridor' : 'levers';
      observation = action === 'wait' || action === 'go on' ? this.observation : 'Nothing happens.';
    }
    this.points += reward;
    const done = this.room === 'out' || this.steps >= this.maxSteps();
    return { observation, reward, done, score: this.points, validActions: done ? [] : this.validActions() };
  }
  score(): number {
    return this.points;
  }
  done(): boolean {
    return this.room === 'out';
  }
  async close(): Promise<void> {}
}

const tokenizer = {
  encode: (text: string) => [...Buffer.from(text, 'utf8')],
  decode: (ids: number[]) => Buffer.from(ids).toString('utf8'),
};
const PREFERENCE: Record<string, number> = { 'go on': 0.8, wait: 0.2, 'pull red lever': 0.7, 'pull blue lever': 0.3 };

/** The frozen LLM stand-in: the m-th time a batch repeats a prompt, its m-th favourite valid action, with that action's probability. */
class PreferenceLlm {
  readonly tokenizer = tokenizer;
  async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    const seen = new Map<string, number>();
    return prompts.map((p, i) => {
      const key = p.join(',');
      const m = seen.get(key) ?? 0;
      seen.set(key, m + 1);
      const ranked = [...opts.allowedTexts![i]!].sort((a, b) => PREFERENCE[b] - PREFERENCE[a]);
      const text = ranked[m % ranked.length];
      return { tokens: [1 + ranked.indexOf(text)], logprobs: [Math.log(PREFERENCE[text])], text, finish: 'stop' as const };
    });
  }
}

/** The logging policy: a uniformly random valid action, from the step's seed and the row. */
class RandomPolicy {
  readonly tokenizer = tokenizer;
  async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    return prompts.map((_, i) => {
      const text = new Rng(opts.seed * 7919 + i).pick(opts.allowedTexts![i]!);
      return { tokens: [9], logprobs: [Math.log(0.5)], text, finish: 'stop' as const };
    });
  }
}

const cfg = loadConfig(null, ['rollout.constrained=true']);
const envs = () => Array.from({ length: 10 }, () => new LeverEnv());
const jobsOf = (variations: number[]): RolloutJob[] => variations.map((variation, group) => ({ task: 'levers', variation, group }));
const play = (engine: unknown, jobs: RolloutJob[], seed: number) =>
  runEpisodesInChunks(envs(), engine as PolicyEngine, jobs, { settingsFor: (start) => rolloutSettings(cfg, true, seed + start) }).then(
    (r) => r.episodes,
  );

let dir: string;
let critic: Critic;
const test = jobsOf(new LeverEnv().variations('levers', 'test'));

beforeAll(async () => {
  await initBackend();
  dir = mkdtempSync(join(tmpdir(), 'empo2-retrospex-'));
  const train = jobsOf(new LeverEnv().variations('levers', 'train'));
  const writer = TrajectoryWriter.fresh(join(dir, 'run', 'trajectories', 'train.jsonl'), { maxBytes: 2 ** 24 });
  for (const [iteration, seed] of [3, 11, 29].entries()) {
    const logged = await play(new RandomPolicy(), train, seed);
    recordEpisodes(writer, logged, { source: 'train', iteration }, { mode: 'plain' });
  }
  const data = readLoggedData([join(dir, 'run')]);
  const embedder = new HashedNgramEmbedder({ dim: 256 });
  const training = { ...RETROSPEX_TRAINING, hidden: 32, epochs: 150, batchSize: 32, learningRate: 3e-3, seed: 1 };
  critic = (await trainCritic(data, { kind: 'hashed', embedder }, training)).critic;
}, 300_000);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

const leverStep = (e: Episode) => e.steps.find((s) => s.action.startsWith('pull'));

describe('Retrospex on the lever environment', () => {
  it('the LLM alone pulls its favourite, the red lever, and opens the door only where the star marks red', async () => {
    const episodes = await play(new PreferenceLlm(), test, 5);
    expect(episodes.map((e) => leverStep(e)?.action)).toEqual(test.map(() => 'pull red lever'));
    expect(episodes.map((e) => e.success)).toEqual(test.map((j) => j.variation % 2 === 1));
  });

  it('with the critic of the random policy’s episodes, it pulls the starred lever on every held-out variation', async () => {
    const engine = new RetrospexEngine(
      new PreferenceLlm() as unknown as PolicyEngine,
      critic,
      new TextVectors(new HashedNgramEmbedder({ dim: 256 })),
      {
        candidates: 2,
        temperature: 1,
        schedule: { decay: 0.5, floor: 0.25 },
      },
    );
    const episodes = await play(engine, test, 5);
    expect(episodes.map((e) => e.success)).toEqual(test.map(() => true));
    // Walking on is kept: at step 0 λ = 1, the LLM decides.
    expect(episodes.map((e) => e.steps[0].action)).toEqual(test.map(() => 'go on'));
    for (const e of episodes.filter((x) => x.variation % 2 === 0)) {
      // Step 2 of a blue-star variation: λ = 0.25, the LLM prefers red, the critic values blue, blue is pulled.
      const s = leverStep(e)!;
      expect(s.action).toBe('pull blue lever');
      expect(s.rescored!.weight).toBe(0.25);
      const [red, blue] = ['pull red lever', 'pull blue lever'].map((a) => s.rescored!.candidates.find((c) => c.action === a)!);
      expect(red.likelihood).toBeCloseTo(0.7, 12);
      expect(blue.likelihood).toBeCloseTo(0.3, 12);
      expect(blue.q).toBeGreaterThan(red.q);
      expect(blue.score).toBeCloseTo(0.75, 12);
      expect(red.score).toBeCloseTo(0.25, 12);
    }
    // The choices are recorded with the episode and read back from its trajectory file.
    const file = join(dir, 'retrospex.jsonl');
    recordEpisodes(TrajectoryWriter.fresh(file, { maxBytes: 2 ** 24 }), episodes.slice(0, 1), { source: 'eval' }, { mode: 'plain' });
    const read = new TrajectoryFile(file);
    read.refresh();
    expect(read.problems).toEqual([]);
    const record = read.episode(read.episodes[0].line);
    expect(record.steps.map((s) => s.rescored?.candidates.map((c) => c.action))).toEqual(
      episodes[0].steps.map((s) => s.rescored?.candidates.map((c) => c.action)),
    );
    expect(record.steps[2].rescored).toEqual(episodes[0].steps[2].rescored);
  });
});
