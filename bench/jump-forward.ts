/**
 * `npx tsx bench/jump-forward.ts [--rows 12] [--repeats 5]`: what jump-forward decoding saves on forced
 * tool calls, in one run on this machine. The tiny default model (fresh, its tokenizer from the built-in
 * environment's corpus, as `empo2 train` builds it) samples a batch of forced `act` calls as the gateway
 * does for `tool_choice: "required"` with an enum of valid actions (the calls' texts as allowed texts,
 * after prompts of the length a tool step's prompt has): token by token, then with `jumpForward`, the same
 * seeds. Prints milliseconds per batch, model passes, and checks that the sampled calls are the same.
 */
import { parseArgs } from 'node:util';
import { environmentCorpus, loadConfig } from '../src/index.ts';
import { createEngine, initBackend, type TfjsEngine } from '../src/internals.ts';
// Deep on purpose: the gateway's own Hermes rendering, so the prompts and calls are those a forced tool step has.
import { hermesCallText, hermesToolsPrompt } from '../src/openai/render.ts';

const { values } = parseArgs({ options: { rows: { type: 'string', default: '12' }, repeats: { type: 'string', default: '5' } } });
const rows = Number(values.rows);
const repeats = Number(values.repeats);
await initBackend();
const cfg = loadConfig(null, { set: [] });
const { engine } = (await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env))) as { engine: TfjsEngine };
const tok = engine.tokenizer;

const actions = ['look around', 'open yellow cupboard', 'take pot', 'go to pantry', 'go to garage', 'inventory', 'examine yellow cupboard'];
const tool = {
  type: 'function' as const,
  name: 'act',
  description: 'Take one action in the environment.',
  parameters: {
    type: 'object',
    properties: { action: { type: 'string', enum: actions } },
    required: ['action'],
    additionalProperties: false,
  },
  strict: true,
};
const calls = actions.map((a) => hermesCallText('act', JSON.stringify({ action: a })));
const obs = 'You are in the attic. You see a closed yellow cupboard. Doors lead to the pantry and the garage.';
const prompt = (i: number) =>
  tok.encode(
    `<|im_start|>system\nTask: boil water (${i})\n\n${hermesToolsPrompt([tool as never])}<|im_end|>\n<|im_start|>user\n${obs}<|im_end|>\n` +
      `<|im_start|>assistant\n${calls[i % calls.length]}<|im_end|>\n<|im_start|>user\n<tool_response>\n${obs}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`,
  );
const prompts = Array.from({ length: rows }, (_, i) => prompt(i));
const callTokens = calls.map((c) => tok.encode(c).length);
console.log(
  `bench/jump-forward: ${rows} rows, prompts of ${prompts[0].length} tokens, calls of ${Math.min(...callTokens)}-${Math.max(...callTokens)} tokens, ${repeats} batches each way`,
);

const passes = { n: 0 };
const original = (engine as unknown as { runLayers: (...a: unknown[]) => unknown }).runLayers.bind(engine);
(engine as unknown as { runLayers: (...a: unknown[]) => unknown }).runLayers = (...a: unknown[]) => {
  passes.n++;
  return original(...a);
};
const measure = async (jumpForward: boolean) => {
  const times: number[] = [];
  const texts: string[][] = [];
  passes.n = 0;
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    const g = await engine.generate(prompts, {
      temperature: 1,
      topP: 1,
      maxTokens: 128,
      seed: r,
      allowedTexts: prompts.map(() => calls),
      jumpForward,
    });
    times.push(performance.now() - t0);
    texts.push(g.map((x) => x.text));
  }
  return { ms: times.sort((a, b) => a - b)[Math.floor(times.length / 2)], passes: passes.n / repeats, texts };
};
await measure(false); // warm-up
const stepwise = await measure(false);
const jumped = await measure(true);
if (JSON.stringify(stepwise.texts) !== JSON.stringify(jumped.texts))
  throw new Error('jump-forward sampled other calls than token by token');
console.log('| decoding | model passes per batch | ms per batch (median) |');
console.log('|---|---|---|');
console.log(`| token by token | ${stepwise.passes} | ${stepwise.ms.toFixed(0)} |`);
console.log(`| jump-forward | ${jumped.passes} | ${jumped.ms.toFixed(0)} |`);
console.log(`jump-forward / token by token: ${(jumped.ms / stepwise.ms).toFixed(2)}× the time; the same calls sampled (${rows * repeats})`);
engine.dispose();
