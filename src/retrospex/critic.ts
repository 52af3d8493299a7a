/**
 * Retrospex's critic: twin Q(s, a) heads, their Polyak-averaged targets and V(s), over frozen text
 * vectors of the task, the observation and the action (./encoder.ts), trained by IQL (src/algo/iql.ts).
 *
 * Each head follows the authors' DRRN-style critic (Yufei-Xiang/Retrospex at 6d169a4, IQL/src/
 * value_functions.py, `DRRN_Q_web` / `DRRN_V_web`): one encoder per field, their outputs concatenated,
 * a hidden layer of the same width with ReLU, and a scalar out. Their field encoders are GRUs over
 * learned token embeddings; here each is a dense layer with ReLU over the frozen sentence vector. The
 * width is theirs (128). Weights start as PyTorch's nn.Linear does: uniform in ±1/√fan_in.
 *
 * The acting value is the target critic's min(Q̄₁, Q̄₂), as the authors' `get_q` reads `q_target`.
 */
import * as tf from '@tensorflow/tfjs';
import { readFileSync } from 'node:fs';
import { polyakAverage, qLoss, tdTargets, valueLoss, type IqlSettings } from '../algo/iql.ts';
import { ENCODER_KINDS, type EncoderIdentity } from './encoder.ts';

export const CRITIC_FORMAT = 'empo2-retrospex-critic';
export const CRITIC_VERSION = 1;

const Q_FIELDS = ['task', 'observation', 'action'] as const;
const V_FIELDS = ['task', 'observation'] as const;
/** Heads saved in a critic file: the targets (what acts) and V. The online heads start from the targets when one is loaded. */
const SAVED_HEADS = ['qt1', 'qt2', 'v'] as const;

type Head = 'q1' | 'q2' | 'qt1' | 'qt2' | 'v';

/** The parameters of one head, with their shapes. */
function headLayout(head: Head, dim: number, hidden: number): { name: string; shape: number[] }[] {
  const fields = head === 'v' ? V_FIELDS : Q_FIELDS;
  return [
    ...fields.flatMap((f) => [
      { name: `${head}.${f}.w`, shape: [dim, hidden] },
      { name: `${head}.${f}.b`, shape: [hidden] },
    ]),
    { name: `${head}.hidden.w`, shape: [fields.length * hidden, hidden] },
    { name: `${head}.hidden.b`, shape: [hidden] },
    { name: `${head}.out.w`, shape: [hidden, 1] },
    { name: `${head}.out.b`, shape: [1] },
  ];
}

/** A batch of states (and actions): one row of frozen vectors per item. */
export interface CriticInput {
  task: tf.Tensor2D;
  observation: tf.Tensor2D;
  action?: tf.Tensor2D;
}

export interface CriticFileMeta {
  training: Record<string, unknown>;
  data: Record<string, unknown>;
}

export class Critic {
  readonly encoder: EncoderIdentity;
  readonly hidden: number;
  readonly iql: IqlSettings;
  /** What the file it came from says of its training and data (empty for a fresh critic). */
  readonly meta: CriticFileMeta;
  private readonly params: Map<string, tf.Variable>;

  private constructor(f: {
    encoder: EncoderIdentity;
    hidden: number;
    iql: IqlSettings;
    params: Map<string, tf.Variable>;
    meta: CriticFileMeta;
  }) {
    this.encoder = f.encoder;
    this.hidden = f.hidden;
    this.iql = f.iql;
    this.params = f.params;
    this.meta = f.meta;
  }

  /** A fresh critic: online heads drawn from `seed`, targets equal to them. */
  static init(encoder: EncoderIdentity, o: { hidden: number; iql: IqlSettings; seed: number }): Critic {
    const params = new Map<string, tf.Variable>();
    let k = 0;
    for (const head of ['q1', 'q2', 'v'] as const) {
      for (const { name, shape } of headLayout(head, encoder.dim, o.hidden)) {
        const bound = 1 / Math.sqrt(shape.length === 2 ? shape[0] : fanInOf(name, encoder.dim, o.hidden));
        params.set(name, variableFrom(tf.randomUniform(shape, -bound, bound, 'float32', o.seed * 1009 + k++), true));
      }
    }
    for (const [online, target] of [
      ['q1', 'qt1'],
      ['q2', 'qt2'],
    ] as const)
      for (const { name } of headLayout(online, encoder.dim, o.hidden))
        params.set(name.replace(online, target), variableFrom(params.get(name)!.clone(), false));
    return new Critic({ encoder, hidden: o.hidden, iql: o.iql, params, meta: { training: {}, data: {} } });
  }

  /** Variables the optimisers move: the online Q heads, and V. */
  variables(which: 'q' | 'v'): tf.Variable[] {
    const heads: Head[] = which === 'q' ? ['q1', 'q2'] : ['v'];
    return heads.flatMap((h) => headLayout(h, this.encoder.dim, this.hidden).map(({ name }) => this.params.get(name)!));
  }

  /** One head's output for a batch. */
  head(head: Head, x: CriticInput): tf.Tensor1D {
    const fields = head === 'v' ? V_FIELDS : Q_FIELDS;
    return tf.tidy(() => {
      const p = (n: string) => this.params.get(`${head}.${n}`)!;
      const parts = fields.map((f) => {
        const input = x[f];
        if (!input) throw new Error(`critic head ${head} needs the ${f} vectors`);
        return tf.relu(tf.add(tf.matMul(input, p(`${f}.w`)), p(`${f}.b`)));
      });
      const h = tf.relu(tf.add(tf.matMul(tf.concat(parts, 1), p('hidden.w')), p('hidden.b')));
      return tf.reshape(tf.add(tf.matMul(h, p('out.w')), p('out.b')), [-1]) as tf.Tensor1D;
    });
  }

  /** Q̄(s, a) = min(Q̄₁, Q̄₂): what acting reads, and what V regresses to. */
  targetQ(x: CriticInput): tf.Tensor1D {
    return tf.tidy(() => tf.minimum(this.head('qt1', x), this.head('qt2', x)) as tf.Tensor1D);
  }

  value(x: CriticInput): tf.Tensor1D {
    return this.head('v', x);
  }

  /** Q̄ ← (1 − α)·Q̄ + α·Q for both heads. */
  updateTargets(): void {
    for (const [online, target] of [
      ['q1', 'qt1'],
      ['q2', 'qt2'],
    ] as const) {
      for (const { name } of headLayout(online, this.encoder.dim, this.hidden)) {
        const t = this.params.get(name.replace(online, target))!;
        const next = polyakAverage(t, this.params.get(name)!, this.iql.polyak);
        t.assign(next);
        next.dispose();
      }
    }
  }

  dispose(): void {
    for (const v of this.params.values()) v.dispose();
    this.params.clear();
  }

  toJSON(meta: CriticFileMeta): object {
    const weights: Record<string, { shape: number[]; data: string }> = {};
    for (const head of SAVED_HEADS) {
      for (const { name, shape } of headLayout(head, this.encoder.dim, this.hidden)) {
        const values = this.params.get(name)!.dataSync() as Float32Array;
        weights[name] = { shape, data: Buffer.from(values.buffer, values.byteOffset, values.byteLength).toString('base64') };
      }
    }
    return {
      format: CRITIC_FORMAT,
      version: CRITIC_VERSION,
      encoder: this.encoder,
      hidden: this.hidden,
      iql: this.iql,
      training: meta.training,
      data: meta.data,
      weights,
    };
  }

  /** A critic file, refused with the file and what is wrong named when it is not one this code wrote or is damaged. */
  static load(path: string): Critic {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      throw new Error(`cannot read the critic ${path}: ${(e as Error).message}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      throw new Error(`${path} is not a critic file: not JSON (${(e as Error).message}); write one with empo2 critic train`);
    }
    return Critic.fromJSON(json, path);
  }

  static fromJSON(json: unknown, where: string): Critic {
    const f = checkHeader(json, where);
    const params = new Map<string, tf.Variable>();
    try {
      for (const head of SAVED_HEADS)
        for (const { name, shape } of headLayout(head, f.encoder.dim, f.hidden)) {
          const values = decodeWeight(f.weights[name], name, shape, where);
          params.set(name, variableFrom(tf.tensor(values, shape, 'float32'), head === 'v'));
        }
    } catch (e) {
      for (const v of params.values()) v.dispose();
      throw e;
    }
    for (const [target, online] of [
      ['qt1', 'q1'],
      ['qt2', 'q2'],
    ] as const)
      for (const { name } of headLayout(target, f.encoder.dim, f.hidden))
        params.set(name.replace(target, online), variableFrom(params.get(name)!.clone(), true));
    return new Critic({ encoder: f.encoder, hidden: f.hidden, iql: f.iql, params, meta: { training: f.training, data: f.data } });
  }
}

/** A variable holding `init`'s values; `init` itself is released. Unnamed: tfjs refuses a name twice in a process, and two critics may be loaded. */
function variableFrom(init: tf.Tensor, trainable: boolean): tf.Variable {
  const v = tf.variable(init, trainable);
  init.dispose();
  return v;
}

/** Fan-in of a bias: the input width of the layer it belongs to. */
function fanInOf(name: string, dim: number, hidden: number): number {
  if (name.endsWith('.hidden.b')) return (name.startsWith('v.') ? V_FIELDS : Q_FIELDS).length * hidden;
  if (name.endsWith('.out.b')) return hidden;
  return dim;
}

interface CriticHeader {
  encoder: EncoderIdentity;
  hidden: number;
  iql: IqlSettings;
  training: Record<string, unknown>;
  data: Record<string, unknown>;
  weights: Record<string, unknown>;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const positiveInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0;

function checkHeader(json: unknown, where: string): CriticHeader {
  if (!isRecord(json) || json.format !== CRITIC_FORMAT)
    throw new Error(
      `${where} is not a Retrospex critic (its "format" is ${isRecord(json) ? JSON.stringify(json.format) : 'missing'}, expected "${CRITIC_FORMAT}")`,
    );
  if (json.version !== CRITIC_VERSION)
    throw new Error(`${where} is a critic of format version ${JSON.stringify(json.version)}; this empo2 reads version ${CRITIC_VERSION}`);
  const e = json.encoder;
  if (!isRecord(e) || !ENCODER_KINDS.includes(e.kind as never) || typeof e.name !== 'string' || !positiveInt(e.dim))
    throw new Error(`${where}: its "encoder" must give kind (${ENCODER_KINDS.join(' or ')}), name and dim, got ${JSON.stringify(e)}`);
  if (!positiveInt(json.hidden)) throw new Error(`${where}: "hidden" must be a positive integer, got ${JSON.stringify(json.hidden)}`);
  const iql = json.iql;
  if (!isRecord(iql) || !['expectile', 'discount', 'polyak'].every((k) => typeof iql[k] === 'number'))
    throw new Error(`${where}: "iql" must give expectile, discount and polyak, got ${JSON.stringify(iql)}`);
  if (!isRecord(json.weights)) throw new Error(`${where}: "weights" is missing`);
  return {
    encoder: e as unknown as EncoderIdentity,
    hidden: json.hidden,
    iql: iql as unknown as IqlSettings,
    training: isRecord(json.training) ? json.training : {},
    data: isRecord(json.data) ? json.data : {},
    weights: json.weights,
  };
}

function decodeWeight(w: unknown, name: string, shape: number[], where: string): Float32Array {
  if (!isRecord(w)) throw new Error(`${where}: weight ${name} is missing`);
  if (JSON.stringify(w.shape) !== JSON.stringify(shape))
    throw new Error(
      `${where}: weight ${name} has shape ${JSON.stringify(w.shape)}, expected ${JSON.stringify(shape)} for its encoder and width`,
    );
  if (typeof w.data !== 'string') throw new Error(`${where}: weight ${name} has no data`);
  const bytes = Buffer.from(w.data, 'base64');
  const n = shape.reduce((a, b) => a * b, 1);
  if (bytes.length !== n * 4)
    throw new Error(`${where}: weight ${name} holds ${bytes.length} bytes, expected ${n * 4} (${n} float32): the file is damaged`);
  const values = new Float32Array(n);
  new Uint8Array(values.buffer).set(bytes);
  const bad = values.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) throw new Error(`${where}: weight ${name} has a non-finite value at ${bad}: the critic diverged or the file is damaged`);
  return values;
}

/** One IQL update's inputs: frozen vectors of s, a and s', rewards and done flags. */
export interface CriticBatch {
  task: tf.Tensor2D;
  observation: tf.Tensor2D;
  action: tf.Tensor2D;
  next: tf.Tensor2D;
  reward: tf.Tensor1D;
  done: tf.Tensor1D;
}

/** The two Adam optimisers of IQL (V's and the Q heads'), and one update at a time. */
export class CriticTrainer {
  private readonly vOptimizer: tf.Optimizer;
  private readonly qOptimizer: tf.Optimizer;

  constructor(
    readonly critic: Critic,
    learningRate: number,
  ) {
    this.vOptimizer = tf.train.adam(learningRate);
    this.qOptimizer = tf.train.adam(learningRate);
  }

  /**
   * One IQL update, in the authors' order: Q̄(s, a) and V(s') are read first, V takes a step on the
   * expectile loss, the Q heads a step towards r + γ(1 − done)V(s'), then the targets move.
   */
  update(b: CriticBatch): { vLoss: number; qLoss: number } {
    const c = this.critic;
    const { expectile, discount } = c.iql;
    const state = { task: b.task, observation: b.observation };
    const [targetQ, nextV] = tf.tidy(() => [c.targetQ({ ...state, action: b.action }), c.value({ task: b.task, observation: b.next })]);
    const targets = tdTargets(b.reward, b.done, nextV, discount);
    const vCost = this.vOptimizer.minimize(() => valueLoss(targetQ, c.value(state), expectile), true, c.variables('v'))!;
    const qCost = this.qOptimizer.minimize(
      () => qLoss([c.head('q1', { ...state, action: b.action }), c.head('q2', { ...state, action: b.action })], targets),
      true,
      c.variables('q'),
    )!;
    c.updateTargets();
    const losses = { vLoss: vCost.dataSync()[0], qLoss: qCost.dataSync()[0] };
    tf.dispose([targetQ, nextV, targets, vCost, qCost]);
    return losses;
  }

  dispose(): void {
    this.vOptimizer.dispose();
    this.qOptimizer.dispose();
  }
}
