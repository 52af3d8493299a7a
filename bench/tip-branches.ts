/**
 * What scoring an on-policy-with-tips episode as trunk plus branches saves (results/memory-overhead/): one optimiser step of
 * the PyTorch worker on the same episode sent one sequence per step (each with its tips and its whole
 * history, as before) and as one tip-free trunk plus a branch per step (src/trainer/packing.ts
 * packEpisodeBranches), the latter with both forms of the branch attention (workers/torch/branches.py: one
 * causal pass per branch with placeholder queries over the trunk, and two flash passes merged by their
 * log-sum-exps, the default), from the same weights on fresh workers. Prints the sequence tokens, the
 * step's wall seconds, and the loss and gradient norm of each (equal up to float rounding with LoRA
 * dropout 0, the default here; --dropout 0.05 is the study's LoRA).
 *
 * The episode is synthetic but shaped like the real-model study's (configs/real-empo2.yaml, the full
 * history): a first prompt of --first tokens, per step --context new tokens (the last response's turn end,
 * the observation, the chat headers), a tip block of --tips tokens at the end of the user turn, and a
 * --response-token response. Token ids are drawn from the model's vocabulary.
 *
 *   npx tsx bench/tip-branches.ts --steps 10                # SmolLM2-135M-Instruct, LoRA r16, 1 thread
 *   npx tsx bench/tip-branches.ts --steps 30 --tips 1000    # the study's shape
 */
import { parseArgs } from 'node:util';
import { resolve } from 'node:path';
import {
  TorchEngine,
  packEpisodeBranches,
  sequenceTokens,
  type ObjectiveConfig,
  type TrainSequence,
  type TrainStats,
} from '../src/internals.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/smollm2-135m-instruct' },
    steps: { type: 'string', default: '10' },
    tips: { type: 'string', default: '1000' },
    first: { type: 'string', default: '400' },
    context: { type: 'string', default: '60' },
    response: { type: 'string', default: '8' },
    dropout: { type: 'string', default: '0' },
    threads: { type: 'string', default: '1' },
    // Fixed, not the worker's default (a third of the memory free at its start): the budget decides the branch batches and
    // gradient checkpointing, so with the default two arms started at different free memory would run different work.
    'activation-mb': { type: 'string', default: '3072' },
    only: { type: 'string' },
  },
});
const num = (k: keyof typeof values) => Number(values[k]);
const [S, K, FIRST, CONTEXT, RESPONSE] = [num('steps'), num('tips'), num('first'), num('context'), num('response')];

let seed = 12345;
const draw = (n: number) =>
  Array.from({ length: n }, () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return 100 + (seed % 40000);
  });

// The episode: prompt_t = history_t + tips_t + tail; history_{t+1} = history_t + tail + response_t + context.
const tail = draw(5);
let history = draw(FIRST);
const steps: TrainSequence[] = [];
const spans: [number, number][] = [];
for (let t = 0; t < S; t++) {
  const tips = draw(K);
  const response = draw(RESPONSE);
  steps.push({
    prompt: [...history, ...tips, ...tail],
    response,
    advantages: response.map(() => (t % 2 ? 0.7 : -0.4)),
    oldLogprobs: response.map(() => -9),
    mask: response.map(() => 1),
    lowProbMask: false,
  });
  spans.push([history.length, history.length + tips.length]);
  history = [...history, ...tail, ...response, ...draw(CONTEXT - tail.length)];
}
const branched = packEpisodeBranches(steps, spans);

const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: null };
const modelDir = resolve(values.model!);

async function timed(batch: TrainSequence[], attention?: string): Promise<{ stats: TrainStats; seconds: number }> {
  // The worker reads its branch attention's form at start (workers/torch/branches.py).
  if (attention) process.env.EMPO2_BRANCH_ATTENTION = attention;
  else delete process.env.EMPO2_BRANCH_ATTENTION;
  const engine = await TorchEngine.start({
    modelDir,
    optimizer: { lr: 1e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
    maxGradNorm: 1,
    microBatchTokens: 16384,
    endTokens: [2],
    padToken: 2,
    threads: Number(values.threads),
    activationMb: Number(values['activation-mb']),
    seed: 0,
    lora: {
      r: 16,
      alpha: 32,
      dropout: Number(values.dropout),
      targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
    },
  });
  try {
    const start = performance.now();
    const stats = await engine.trainStep(batch, objective, 1);
    return { stats, seconds: (performance.now() - start) / 1000 };
  } finally {
    await engine.close();
  }
}

const count = (b: TrainSequence[]) => b.reduce((n, s) => n + sequenceTokens(s), 0);
console.log(
  `one episode: ${S} steps, ${K} tip tokens per step, first prompt ${FIRST}, +${CONTEXT} tokens per step, ${RESPONSE}-token responses (${values.model}, LoRA r16, dropout ${values.dropout}, ${values.threads} thread(s), activation budget ${values['activation-mb']} MB)`,
);
const rows: [string, TrainSequence[], string?][] = [
  ['per step (before)', steps],
  ['trunk + branches, placeholder queries', branched, 'placeholder'],
  ['trunk + branches, merged by log-sum-exp (after)', branched],
];
for (const [name, batch, attention] of rows) {
  if (values.only && !name.startsWith(values.only)) continue;
  const { stats, seconds } = await timed(batch, attention);
  console.log(
    `| ${name} | ${batch.length} sequences | ${count(batch).toLocaleString('en-US')} sequence tokens | ${seconds.toFixed(1)} s | loss ${stats.loss} | grad norm ${stats.gradNorm} |`,
  );
}
