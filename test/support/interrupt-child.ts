/**
 * A process for src/run/interrupt.test.ts: InterruptHandling around an engine whose trainStep is
 * called in a loop, as the trainer's policy calls are. Prints `busy <n>` when call n starts and
 * `done <n>` when it returns. EMPO2_CALLS says what a call does:
 *   - `stdin` (default): holds the thread in a blocking read of one line from stdin (as TensorFlow.js
 *     holds it in this process), so the test decides when each call returns;
 *   - `spin:<ms>`: holds the thread for <ms> milliseconds;
 *   - `wait:<ms>`: waits <ms> milliseconds on a timer (as a call into another process does).
 * The end of stdin ends the loop: `finished` is printed and the process exits with 0, as a run whose
 * iteration ended normally. EMPO2_DISPOSE_WHEN_STOPPING=1: once a stop is requested, the handling is
 * disposed (`disposed` printed) and calls go on, as the trainer closes its run after the loop.
 */
import { readSync } from 'node:fs';
import { InterruptHandling, policyCalls } from '../../src/run/interrupt.ts';
import type { PolicyEngine } from '../../src/policy/types.ts';

const [kind, arg] = (process.env.EMPO2_CALLS ?? 'stdin').split(':');
const ms = Number(arg);
if (!['stdin', 'spin', 'wait'].includes(kind) || (kind !== 'stdin' && !(ms >= 0)))
  throw new Error(`EMPO2_CALLS must be stdin, spin:<ms> or wait:<ms>, got "${process.env.EMPO2_CALLS}"`);

let stdinEnded = false;
/** One line from stdin with the thread held; false at its end. */
function readLineBlocking(): boolean {
  const byte = Buffer.alloc(1);
  for (;;) {
    if (readSync(0, byte, 0, 1, null) === 0) return false;
    if (byte[0] === 0x0a) return true;
  }
}
if (kind !== 'stdin') process.stdin.on('end', () => (stdinEnded = true)).resume();

let n = 0;
const engine: PolicyEngine = {
  tokenizer: { encode: () => [], decode: () => '', vocabSize: 0, tokenToId: () => undefined },
  generate: async () => [],
  logprobs: async () => [],
  trainStep: async () => {
    const k = ++n;
    console.log(`busy ${k}`);
    if (kind === 'stdin') stdinEnded = !readLineBlocking();
    else if (kind === 'spin') for (const until = performance.now() + ms; performance.now() < until;);
    else await new Promise((r) => setTimeout(r, ms));
    console.log(`done ${k}`);
    return { loss: 0, tokens: 0, clipFraction: 0, meanRatio: 1, kl: 0, gradNorm: 0 };
  },
  save: async () => {},
  dispose: () => {},
};
const interrupts = new InterruptHandling(
  (l) => console.log(l),
  () => console.log('cleanup'),
  { holdsTheThread: kind !== 'wait' },
);
const calls = policyCalls(engine, () => interrupts);
const disposeWhenStopping = process.env.EMPO2_DISPOSE_WHEN_STOPPING === '1';
console.log('ready');
while (!stdinEnded) {
  await calls.trainStep([], { clipLow: 0.2, clipHigh: 0.2, dualClip: null, klCoef: 0, lowProbDelta: null });
  if (disposeWhenStopping && interrupts.stopRequested) {
    interrupts.dispose();
    console.log('disposed');
  }
}
console.log('finished');
process.exit(0);
