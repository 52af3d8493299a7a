/**
 * A process for src/trainer/interrupt.test.ts: InterruptHandling around an engine whose trainStep
 * holds the thread for `EMPO2_BUSY_MS` (as TensorFlow.js in this process does), called in a loop.
 * Prints `busy <n>` when a call starts and `done <n>` when it returns.
 */
import { InterruptHandling, policyCalls } from '../../src/trainer/interrupt.ts';
import type { PolicyEngine } from '../../src/policy/types.ts';

const busyMs = Number(process.env.EMPO2_BUSY_MS ?? 10_000);
let n = 0;
const holdsTheThread: PolicyEngine = {
  tokenizer: { encode: () => [], decode: () => '', vocabSize: 0, tokenToId: () => undefined },
  generate: async () => [],
  logprobs: async () => [],
  trainStep: async () => {
    const k = ++n;
    console.log(`busy ${k}`);
    const until = performance.now() + busyMs;
    while (performance.now() < until); // eslint-disable-line no-empty
    console.log(`done ${k}`);
    return { loss: 0, tokens: 0, clipFraction: 0, meanRatio: 1, kl: 0, gradNorm: 0 };
  },
  save: async () => {},
  dispose: () => {},
};
const interrupts = new InterruptHandling((l) => console.log(l), () => console.log('cleanup'));
const engine = policyCalls(holdsTheThread, true, () => interrupts);
console.log('ready');
for (;;) await engine.trainStep([], { clipLow: 0.2, clipHigh: 0.2, dualClip: null, klCoef: 0, lowProbDelta: null });
