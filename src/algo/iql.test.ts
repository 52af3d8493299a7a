import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { pythonGate, runPython } from '../../test/support/python.ts';
import { initBackend, tf } from '../policy/tfjs/backend.ts';
import { Rng } from '../util/rng.ts';
import { expectileLoss, polyakAverage, qLoss, tdTargets, valueLoss } from './iql.ts';

beforeAll(async () => {
  await initBackend();
});

const read = (t: tf.Tensor) => {
  const values = Array.from(t.dataSync());
  t.dispose();
  return values;
};
const t1 = (xs: number[]) => tf.tensor1d(xs);

/**
 * The two-state MDP the tests share (γ = 0.9, τ = 0.7). From s0, action a moves to s1 with reward 0
 * and action b ends the episode with reward 1; from s1, c ends it with reward 2. The logged data took
 * a and b once each from s0. IQL's fixed point: Q(s1, c) = 2, V(s1) = 2 (its only action),
 * Q(s0, a) = 0 + 0.9·2 = 1.8, Q(s0, b) = 1, and V(s0) the 0.7-expectile of {1.8, 1}:
 * 0.7·(1.8 − v) = 0.3·(v − 1), so v = 1 + 0.8·0.7 = 1.56 (above the mean 1.4, below the best 1.8).
 */
const GAMMA = 0.9;
const TAU = 0.7;

describe('IQL on the two-state MDP, by hand', () => {
  it('TD targets r + γ(1 − done)V(s′): the move to s1 bootstraps, the two endings do not', () => {
    // Transitions (s0, a → s1), (s0, b → end), (s1, c → end) with the current V(s1) = 1.5, V(end) = 7 (ignored: done).
    const targets = read(tdTargets(t1([0, 1, 2]), t1([0, 1, 1]), t1([1.5, 7, 7]), GAMMA));
    targets.forEach((x, i) => expect(x).toBeCloseTo([0.9 * 1.5, 1, 2][i], 6));
  });

  it('the expectile loss at V(s0) = 1.4 (the mean): u = [0.4, −0.4], loss (0.7·0.16 + 0.3·0.16)/2 = 0.08', () => {
    expect(read(valueLoss(t1([1.8, 1]), t1([1.4, 1.4]), TAU))[0]).toBeCloseTo(0.08, 6);
  });

  it('the expectile loss is smallest at the 0.7-expectile 1.56, not at the mean', () => {
    const loss = (v: number) => read(valueLoss(t1([1.8, 1]), t1([v, v]), TAU))[0];
    // At 1.56: u = [0.24, −0.56], (0.7·0.0576 + 0.3·0.3136)/2 = (0.04032 + 0.09408)/2 = 0.0672.
    expect(loss(1.56)).toBeCloseTo(0.0672, 6);
    for (const v of [1.4, 1.5, 1.55, 1.57, 1.6, 1.8]) expect(loss(v)).toBeGreaterThan(loss(1.56));
  });

  it('the expectile loss weighs positive errors by τ and negative ones by 1 − τ', () => {
    // u = [1, −2, 0.5]: (0.7·1 + 0.3·4 + 0.7·0.25)/3 = 2.075/3.
    expect(read(expectileLoss(t1([1, -2, 0.5]), TAU))[0]).toBeCloseTo(2.075 / 3, 6);
    // τ = 0.5 is half the mean squared error.
    expect(read(expectileLoss(t1([1, -2, 0.5]), 0.5))[0]).toBeCloseTo(5.25 / 6, 6);
  });

  it('the Q loss averages the two heads’ mean squared errors to the targets [1.35, 1, 2]', () => {
    // Q₁ = [1.5, 1.2, 2] → errors [0.15, 0.2, 0] → (0.0225 + 0.04 + 0)/3 = 0.020833;
    // Q₂ = [1, 0.8, 2.5] → errors [−0.35, −0.2, 0.5] → (0.1225 + 0.04 + 0.25)/3 = 0.1375; mean 0.0791667.
    const targets = t1([1.35, 1, 2]);
    expect(read(qLoss([t1([1.5, 1.2, 2]), t1([1, 0.8, 2.5])], targets))[0]).toBeCloseTo((0.0625 / 3 + 0.4125 / 3) / 2, 6);
    targets.dispose();
  });

  it('the Polyak step moves the target α of the way: (1 − 0.005)·[1, 2] + 0.005·[3, −2] = [1.01, 1.98]', () => {
    const values = read(polyakAverage(t1([1, 2]), t1([3, -2]), 0.005));
    expect(values[0]).toBeCloseTo(1.01, 6);
    expect(values[1]).toBeCloseTo(1.98, 6);
  });
});

const torchGate = pythonGate(['torch']);

describe.skipIf(!torchGate.available)(`IQL losses match PyTorch (${torchGate.label})`, () => {
  it('on 64 random transitions: expectile loss, TD targets, twin Q loss and the Polyak step within 1e-5', async () => {
    const rng = new Rng(73);
    const draw = (n: number, scale = 2) => Array.from({ length: n }, () => (rng.next() - 0.5) * 2 * scale);
    const n = 64;
    const input = {
      tau: TAU,
      discount: 0.99,
      alpha: 0.005,
      u: draw(n),
      rewards: draw(n, 1),
      done: Array.from({ length: n }, () => (rng.next() < 0.2 ? 1 : 0)),
      next_v: draw(n),
      q1: draw(n),
      q2: draw(n),
      target: draw(n),
      online: draw(n),
    };
    const dir = mkdtempSync(join(tmpdir(), 'empo2-iql-'));
    try {
      writeFileSync(join(dir, 'in.json'), JSON.stringify(input));
      await runPython(join(import.meta.dirname, 'iql_reference.py'), [join(dir, 'in.json'), join(dir, 'out.json')]);
      const ref = JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8'));
      expect(read(expectileLoss(t1(input.u), input.tau))[0]).toBeCloseTo(ref.expectile_loss, 5);
      const targets = tdTargets(t1(input.rewards), t1(input.done), t1(input.next_v), input.discount);
      read(targets.clone()).forEach((x, i) => expect(x).toBeCloseTo(ref.td_targets[i], 5));
      expect(read(qLoss([t1(input.q1), t1(input.q2)], targets))[0]).toBeCloseTo(ref.q_loss, 5);
      targets.dispose();
      read(polyakAverage(t1(input.target), t1(input.online), input.alpha)).forEach((x, i) => expect(x).toBeCloseTo(ref.polyak[i], 5));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
