/**
 * Retrospection: a critic trained by IQL on logged episodes (./dataset.ts), saved as one JSON file.
 *
 * As the authors' retrospect_*.py (Yufei-Xiang/Retrospex at 6d169a4): the transitions are shuffled and
 * played in batches of 128, 20 passes over the data, Adam at 1e-4. Two differences: the order is drawn
 * again every pass (theirs is drawn once), and rewards are scaled by 0.01 (empo2's `algo.reward_scale`),
 * so that Q is in units of the whole 0–100 score; acting normalises Q over the candidates, so the scale
 * changes only the optimisation.
 */
import * as tf from '@tensorflow/tfjs';
import { checkIqlSettings, RETROSPEX_IQL, type IqlSettings } from '../algo/iql.ts';
import type { Embedder } from '../memory/types.ts';
import { Rng } from '../util/rng.ts';
import { writeTextAtomic } from '../util/atomic-write.ts';
import { Critic, CriticTrainer, type CriticBatch } from './critic.ts';
import type { LoggedData, Transition } from './dataset.ts';
import { identityOf, type EncoderKind } from './encoder.ts';

export interface CriticTraining {
  iql: IqlSettings;
  hidden: number;
  epochs: number;
  batchSize: number;
  learningRate: number;
  rewardScale: number;
  seed: number;
}

/** The authors' settings, with empo2's reward scale. */
export const RETROSPEX_TRAINING: CriticTraining = {
  iql: RETROSPEX_IQL,
  hidden: 128,
  epochs: 20,
  batchSize: 128,
  learningRate: 1e-4,
  rewardScale: 0.01,
  seed: 0,
};

export function checkTraining(t: CriticTraining): void {
  checkIqlSettings(t.iql);
  for (const [key, value] of [
    ['hidden', t.hidden],
    ['epochs', t.epochs],
    ['batch size', t.batchSize],
  ] as const)
    if (!Number.isInteger(value) || value < 1) throw new RangeError(`critic ${key} must be a positive integer, got ${value}`);
  if (!(t.learningRate > 0)) throw new RangeError(`critic learning rate must be positive, got ${t.learningRate}`);
  if (!(t.rewardScale > 0)) throw new RangeError(`critic reward scale must be positive, got ${t.rewardScale}`);
  if (!Number.isInteger(t.seed)) throw new RangeError(`critic seed must be an integer, got ${t.seed}`);
}

/** Every distinct text of one field, and each transition's index into it. */
interface TextTable {
  texts: string[];
  index: Map<string, number>;
}

function table(texts: Iterable<string>): TextTable {
  const unique = [...new Set(texts)];
  return { texts: unique, index: new Map(unique.map((t, i) => [t, i])) };
}

/** The logged data as index arrays into three tables of frozen vectors (observations and next observations share one). */
interface EncodedData {
  task: tf.Tensor2D;
  observation: tf.Tensor2D;
  action: tf.Tensor2D;
  rows: { task: Int32Array; observation: Int32Array; action: Int32Array; next: Int32Array; reward: Float32Array; done: Float32Array };
}

async function encode(transitions: readonly Transition[], embedder: Embedder, rewardScale: number): Promise<EncodedData> {
  const tasks = table(transitions.map((t) => t.task));
  const observations = table(transitions.flatMap((t) => [t.observation, t.nextObservation]));
  const actions = table(transitions.map((t) => t.action));
  const matrix = async (t: TextTable) => {
    const vectors = await embedder.embed(t.texts);
    const flat = new Float32Array(vectors.length * embedder.dim);
    vectors.forEach((v, i) => flat.set(v, i * embedder.dim));
    return tf.tensor2d(flat, [vectors.length, embedder.dim]);
  };
  return {
    task: await matrix(tasks),
    observation: await matrix(observations),
    action: await matrix(actions),
    rows: {
      task: Int32Array.from(transitions, (t) => tasks.index.get(t.task)!),
      observation: Int32Array.from(transitions, (t) => observations.index.get(t.observation)!),
      action: Int32Array.from(transitions, (t) => actions.index.get(t.action)!),
      next: Int32Array.from(transitions, (t) => observations.index.get(t.nextObservation)!),
      reward: Float32Array.from(transitions, (t) => t.reward * rewardScale),
      done: Float32Array.from(transitions, (t) => (t.done ? 1 : 0)),
    },
  };
}

function batchOf(d: EncodedData, picks: readonly number[]): CriticBatch {
  return tf.tidy(() => {
    const at = (rows: Int32Array) =>
      tf.tensor1d(
        Int32Array.from(picks, (i) => rows[i]),
        'int32',
      );
    return {
      task: tf.gather(d.task, at(d.rows.task)),
      observation: tf.gather(d.observation, at(d.rows.observation)),
      action: tf.gather(d.action, at(d.rows.action)),
      next: tf.gather(d.observation, at(d.rows.next)),
      reward: tf.tensor1d(Float32Array.from(picks, (i) => d.rows.reward[i])),
      done: tf.tensor1d(Float32Array.from(picks, (i) => d.rows.done[i])),
    };
  });
}

export interface EpochLosses {
  epoch: number;
  v_loss: number;
  q_loss: number;
}

/** Trains a critic on `data`; `log` hears one line per pass. The caller owns (and disposes) the critic returned. */
export async function trainCritic(
  data: LoggedData,
  encoder: { kind: EncoderKind; embedder: Embedder },
  t: CriticTraining,
  log: (line: string) => void = () => {},
): Promise<{ critic: Critic; losses: EpochLosses[]; seconds: number }> {
  checkTraining(t);
  const t0 = performance.now();
  const encoded = await encode(data.transitions, encoder.embedder, t.rewardScale);
  log(
    `critic: ${data.transitions.length} transitions of ${data.episodes} episodes (${encoded.task.shape[0]} tasks, ${encoded.observation.shape[0]} observations, ${encoded.action.shape[0]} actions embedded with ${encoder.embedder.name} in ${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );
  const critic = Critic.init(identityOf(encoder.kind, encoder.embedder), { hidden: t.hidden, iql: t.iql, seed: t.seed });
  const trainer = new CriticTrainer(critic, t.learningRate);
  const rng = new Rng(t.seed);
  const losses: EpochLosses[] = [];
  try {
    for (let epoch = 1; epoch <= t.epochs; epoch++) {
      const order = rng.shuffle([...Array(data.transitions.length).keys()]);
      let v = 0;
      let q = 0;
      let n = 0;
      for (let start = 0; start < order.length; start += t.batchSize) {
        const batch = batchOf(encoded, order.slice(start, start + t.batchSize));
        const l = trainer.update(batch);
        tf.dispose(Object.values(batch));
        if (!Number.isFinite(l.vLoss) || !Number.isFinite(l.qLoss))
          throw new Error(`critic training diverged in pass ${epoch} (V loss ${l.vLoss}, Q loss ${l.qLoss}); lower the learning rate`);
        v += l.vLoss;
        q += l.qLoss;
        n++;
      }
      losses.push({ epoch, v_loss: v / n, q_loss: q / n });
      log(`critic pass ${epoch}/${t.epochs}: V loss ${(v / n).toExponential(3)}, Q loss ${(q / n).toExponential(3)} (${n} updates)`);
    }
  } catch (e) {
    critic.dispose();
    throw e;
  } finally {
    trainer.dispose();
    tf.dispose([encoded.task, encoded.observation, encoded.action]);
  }
  return { critic, losses, seconds: (performance.now() - t0) / 1000 };
}

/** Writes the critic with what it learnt from and how, so a reader (and `eval --critic`) can tell what it is. */
export function saveCritic(
  path: string,
  critic: Critic,
  o: { data: LoggedData; training: CriticTraining; losses: EpochLosses[]; seconds: number },
): void {
  const json = critic.toJSON({
    training: {
      epochs: o.training.epochs,
      batch_size: o.training.batchSize,
      learning_rate: o.training.learningRate,
      reward_scale: o.training.rewardScale,
      seed: o.training.seed,
      seconds: Math.round(o.seconds * 10) / 10,
      losses: o.losses,
    },
    data: {
      files: o.data.files,
      episodes: o.data.episodes,
      failed_episodes_left_out: o.data.failedEpisodes,
      transitions: o.data.transitions.length,
      tasks: o.data.tasks,
      unread_lines: o.data.problems.length,
    },
  });
  writeTextAtomic(path, JSON.stringify(json) + '\n');
}
