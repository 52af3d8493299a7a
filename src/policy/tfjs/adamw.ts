/**
 * AdamW (Loshchilov & Hutter) as tfjs ops over the model's variables: Adam moments with bias
 * correction, weight decay decoupled from the gradient and applied to matrices only (not to norms
 * or biases, as Hugging Face's trainer does). State is exposed so checkpoints can resume exactly.
 */
import { tf } from './backend.ts';

export interface AdamWConfig {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

export class AdamW {
  step = 0;
  readonly m = new Map<string, tf.Variable>();
  readonly v = new Map<string, tf.Variable>();

  constructor(public config: AdamWConfig) {}

  /** One step; `gradScale` multiplies every gradient first (token mean, clipping) without a scaled copy of them all. */
  apply(params: Map<string, tf.Variable>, grads: Map<string, tf.Tensor>, lr = this.config.lr, gradScale = 1): void {
    const { beta1, beta2, eps, weightDecay } = this.config;
    this.step++;
    const bc1 = 1 - Math.pow(beta1, this.step);
    const bc2 = 1 - Math.pow(beta2, this.step);
    for (const [name, p] of params) {
      const grad = grads.get(name);
      if (!grad) continue;
      const m = this.moment(this.m, name, p);
      const v = this.moment(this.v, name, p);
      tf.tidy(() => {
        const g = gradScale === 1 ? grad : grad.mul(gradScale);
        const mNew = m.mul(beta1).add(g.mul(1 - beta1));
        const vNew = v.mul(beta2).add(g.square().mul(1 - beta2));
        m.assign(mNew);
        v.assign(vNew);
        let update = mNew.div(bc1).div(vNew.div(bc2).sqrt().add(eps)).mul(lr);
        if (weightDecay > 0 && p.rank >= 2) update = update.add(p.mul(lr * weightDecay));
        p.assign(p.sub(update));
      });
    }
  }

  private moment(store: Map<string, tf.Variable>, name: string, like: tf.Variable): tf.Variable {
    let t = store.get(name);
    if (!t) {
      const zeros = tf.zerosLike(like);
      t = tf.variable(zeros, false);
      // The variable shares the buffer; without this the zeros stay alive after the first assign.
      zeros.dispose();
      store.set(name, t);
    }
    return t;
  }

  /** Moments as plain arrays, for a checkpoint. */
  exportState(): { step: number; tensors: Map<string, { shape: number[]; data: Float32Array }> } {
    const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
    for (const [prefix, store] of [
      ['m.', this.m],
      ['v.', this.v],
    ] as const) {
      for (const [name, t] of store) tensors.set(prefix + name, { shape: t.shape.slice(), data: t.dataSync() as Float32Array });
    }
    return { step: this.step, tensors };
  }

  importState(step: number, tensors: Map<string, { shape: number[]; data: Float32Array }>): void {
    this.dispose();
    this.step = step;
    for (const [key, t] of tensors) {
      const store = key.startsWith('m.') ? this.m : key.startsWith('v.') ? this.v : null;
      if (!store) throw new Error(`optimizer state: unexpected tensor "${key}"`);
      const initial = tf.tensor(t.data, t.shape);
      store.set(key.slice(2), tf.variable(initial, false));
      initial.dispose();
    }
  }

  dispose(): void {
    for (const t of [...this.m.values(), ...this.v.values()]) t.dispose();
    this.m.clear();
    this.v.clear();
  }
}
