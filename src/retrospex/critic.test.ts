/**
 * The critic end to end: IQL training reaches the hand-computed fixed point of the two-state MDP of
 * src/algo/iql.test.ts, a saved critic acts as it did before saving, and a file that is not a critic,
 * is damaged, or was trained on other vectors is refused with what is wrong and where.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import type { Embedder } from '../memory/types.ts';
import { initBackend, tf } from '../policy/tfjs/backend.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { RETROSPEX_ACTING, RetrospexEngine } from './actor.ts';
import { Critic } from './critic.ts';
import type { LoggedData } from './dataset.ts';
import { TextVectors } from './encoder.ts';
import { RETROSPEX_TRAINING, saveCritic, trainCritic } from './train.ts';

/** One dimension per known text: a critic over these vectors is as good as a table. */
class OneHot implements Embedder {
  readonly name = 'one-hot-test';
  constructor(private readonly texts: readonly string[]) {}
  get dim(): number {
    return this.texts.length;
  }
  async embed(texts: readonly string[]): Promise<Float32Array[]> {
    return texts.map((t) => {
      const v = new Float32Array(this.texts.length);
      const i = this.texts.indexOf(t);
      if (i < 0) throw new Error(`OneHot: unknown text ${t}`);
      v[i] = 1;
      return v;
    });
  }
}

const TASK = 'reach the end';
const step = (observation: string, action: string, reward: number, nextObservation: string, done: boolean) => ({
  task: TASK,
  observation,
  action,
  reward,
  nextObservation,
  done,
});
/** s0 −a→ s1 −c→ end (rewards 0, 2) and s0 −b→ end (reward 1): the MDP of src/algo/iql.test.ts. */
const mdp: LoggedData = {
  transitions: [step('s0', 'a', 0, 's1', false), step('s1', 'c', 2, 'end', true), step('s0', 'b', 1, 'end', true)],
  files: [{ path: 'by hand', episodes: 2 }],
  episodes: 2,
  failedEpisodes: 0,
  tasks: ['mdp'],
  problems: [],
};
const embedder = new OneHot([TASK, 's0', 's1', 'end', 'a', 'b', 'c']);
const settings = {
  ...RETROSPEX_TRAINING,
  iql: { expectile: 0.7, discount: 0.9, polyak: 0.005 },
  hidden: 32,
  epochs: 2000,
  learningRate: 5e-3,
  rewardScale: 1,
  seed: 4,
};

async function values(critic: Critic, pairs: [string, string][]): Promise<{ q: number[]; v: number[] }> {
  const vec = (texts: string[]) => embedder.embed(texts).then((vs) => tf.tensor2d(vs.map((v) => Array.from(v))));
  const x = {
    task: await vec(pairs.map(() => TASK)),
    observation: await vec(pairs.map((p) => p[0])),
    action: await vec(pairs.map((p) => p[1])),
  };
  const q = Array.from(critic.targetQ(x).dataSync());
  const v = Array.from(critic.value(x).dataSync());
  tf.dispose(Object.values(x));
  return { q, v };
}

let dir: string;
let critic: Critic;
const pairs: [string, string][] = [
  ['s0', 'a'],
  ['s0', 'b'],
  ['s1', 'c'],
];

beforeAll(async () => {
  await initBackend();
  dir = mkdtempSync(join(tmpdir(), 'empo2-critic-'));
  const trained = await trainCritic(mdp, { kind: 'hashed', embedder }, settings);
  critic = trained.critic;
  saveCritic(join(dir, 'critic.json'), critic, { data: mdp, training: settings, ...trained });
}, 300_000);

afterAll(() => {
  critic?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe('IQL critic on the two-state MDP (γ 0.9, τ 0.7)', () => {
  it('reaches the fixed point within 0.05: Q̄(s0,a) 1.8, Q̄(s0,b) 1, Q̄(s1,c) 2, V(s0) 1.56, V(s1) 2', async () => {
    const { q, v } = await values(critic, pairs);
    [1.8, 1, 2].forEach((want, i) => expect(q[i], `Q̄${JSON.stringify(pairs[i])}`).toBeCloseTo(want, 1));
    for (const [i, want] of [
      [0, 1.56],
      [2, 2],
    ])
      expect(Math.abs(v[i] - want), `V(${pairs[i][0]}) = ${v[i]}`).toBeLessThan(0.05);
    // V(s0) sits between the mean of the logged actions' values (1.4) and the best (1.8): the expectile, not the max.
    expect(v[0]).toBeGreaterThan(1.45);
    expect(v[0]).toBeLessThan(1.7);
  });

  it('a saved critic gives the same values after loading, and records its data and training', async () => {
    const loaded = Critic.load(join(dir, 'critic.json'));
    try {
      const before = await values(critic, pairs);
      const after = await values(loaded, pairs);
      expect(after).toEqual(before);
      expect(loaded.encoder).toEqual({ kind: 'hashed', name: 'one-hot-test', dim: 7 });
      expect(loaded.meta.data).toMatchObject({ episodes: 2, transitions: 3, tasks: ['mdp'] });
      expect(loaded.meta.training).toMatchObject({ epochs: 2000, learning_rate: 5e-3, seed: 4 });
      expect((loaded.meta.training.losses as unknown[]).length).toBe(2000);
    } finally {
      loaded.dispose();
    }
  });
});

describe('critic files that cannot be used are refused, naming the file and the fault', () => {
  const write = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };
  const saved = () => JSON.parse(readFileSync(join(dir, 'critic.json'), 'utf8'));

  it('not JSON, not a critic, another format version', () => {
    expect(() => Critic.load(join(dir, 'missing.json'))).toThrow(/cannot read the critic .*missing\.json/);
    expect(() => Critic.load(write('text.json', 'hello'))).toThrow(/text\.json is not a critic file: not JSON/);
    expect(() => Critic.load(write('other.json', JSON.stringify({ format: 'empo2-memory' })))).toThrow(
      /other\.json is not a Retrospex critic \(its "format" is "empo2-memory"/,
    );
    expect(() => Critic.load(write('v2.json', JSON.stringify({ ...saved(), version: 2 })))).toThrow(
      /v2\.json is a critic of format version 2/,
    );
  });

  it('a weight cut short, of the wrong shape, missing or not finite', () => {
    const json = saved();
    const w = json.weights['qt1.task.w'];
    const cut = { ...json, weights: { ...json.weights, 'qt1.task.w': { ...w, data: w.data.slice(0, 40) } } };
    expect(() => Critic.load(write('cut.json', JSON.stringify(cut)))).toThrow(
      /cut\.json: weight qt1\.task\.w holds 30 bytes, expected 896 .*damaged/,
    );
    const shape = { ...json, weights: { ...json.weights, 'v.out.w': { ...json.weights['v.out.w'], shape: [2, 16] } } };
    expect(() => Critic.load(write('shape.json', JSON.stringify(shape)))).toThrow(/weight v\.out\.w has shape \[2,16\], expected \[32,1\]/);
    const { 'qt2.hidden.b': _, ...fewer } = json.weights;
    expect(() => Critic.load(write('fewer.json', JSON.stringify({ ...json, weights: fewer })))).toThrow(/weight qt2\.hidden\.b is missing/);
    const nan = Buffer.from(new Float32Array([Number.NaN]).buffer).toString('base64');
    const bad = { ...json, weights: { ...json.weights, 'v.out.b': { shape: [1], data: nan } } };
    expect(() => Critic.load(write('nan.json', JSON.stringify(bad)))).toThrow(/weight v\.out\.b has a non-finite value/);
  });

  it('an encoder that does not match: the critic acts only on the vectors it was trained on', () => {
    const other = new TextVectors(new HashedNgramEmbedder({ dim: 7 }));
    expect(() => new RetrospexEngine({} as PolicyEngine, critic, other, RETROSPEX_ACTING)).toThrow(
      /the critic was trained on one-hot-test vectors \(7 dimensions\), but acting embeds with hashed-ngram-7 \(7\)/,
    );
    expect(() => Critic.load(write('enc.json', JSON.stringify({ ...saved(), encoder: { kind: 'word2vec', name: 'x', dim: 7 } })))).toThrow(
      /its "encoder" must give kind \(minilm or hashed\)/,
    );
  });
});
