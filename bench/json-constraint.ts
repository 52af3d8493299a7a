/**
 * Time per decoding step of the JSON constraint (src/policy/json-constraint.ts) over a real
 * vocabulary: how long allowedAfter() takes to list the ids that keep the text valid, inside free
 * strings (where most of the vocabulary is allowed) and between them (keys, punctuation, enums).
 *
 *   npx tsx bench/json-constraint.ts [--model models/smollm2-135m-instruct] [--walks 40] [--seed 1]
 *
 * Each walk draws tokens uniformly among the allowed ones (the end token, when allowed, half the
 * time), so it visits states a model would rarely reach too. Prints, per constraint, the one-off cost
 * of indexing the vocabulary and of the first step, then the median / p90 / max of a step inside a
 * string and elsewhere. Asserts nothing.
 */
import { parseArgs } from 'node:util';
import { jsonFormatConstraint, toolCallConstraint, Tokenizer } from '../src/internals.ts';

const { values: a } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/smollm2-135m-instruct' },
    walks: { type: 'string', default: '40' },
    seed: { type: 'string', default: '1' },
  },
});

const t0 = performance.now();
const tokenizer = Tokenizer.fromFile(a.model!);
const end = tokenizer.requireTokenId('<|im_end|>');
console.log(`tokenizer ${a.model}: ${tokenizer.vocabSize} ids, loaded in ${(performance.now() - t0).toFixed(0)} ms`);

const SEARCH = {
  type: 'object',
  properties: { query: { type: 'string', maxLength: 200 }, k: { type: 'integer' }, lang: { enum: ['en', 'fr', 'de'] } },
  required: ['query', 'k'],
};
const ACT = {
  type: 'object',
  properties: { action: { enum: ['go to kitchen', 'open red box', 'take yellow hat', 'look around'] } },
  required: ['action'],
};
const base = { tokenizer, endTokens: [end] };
const cases = [
  [
    'tool call, enum only (hermes)',
    () => toolCallConstraint({ ...base, tools: [{ name: 'act', parameters: ACT }], choice: 'required', parser: 'hermes' }),
  ],
  [
    'tool call, free string + integer (hermes, 2 tools)',
    () =>
      toolCallConstraint({
        ...base,
        tools: [
          { name: 'search', parameters: SEARCH },
          { name: 'act', parameters: ACT },
        ],
        choice: 'required',
        parser: 'hermes',
      }),
  ],
  ['response_format json_object', () => jsonFormatConstraint({ type: 'json_object' }, base)],
] as const;

let s = Number(a.seed) >>> 0 || 1;
const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
const stats = (xs: number[]) => {
  if (xs.length === 0) return 'no steps';
  const v = [...xs].sort((x, y) => x - y);
  const q = (p: number) => v[Math.min(v.length - 1, Math.floor(p * v.length))].toFixed(3);
  return `median ${q(0.5)} ms, p90 ${q(0.9)} ms, max ${v[v.length - 1].toFixed(3)} ms over ${v.length} steps`;
};

for (const [name, make] of cases) {
  const b0 = performance.now();
  const c = make();
  const built = performance.now() - b0;
  const f0 = performance.now();
  c.allowedAfter([]);
  const first = performance.now() - f0;
  const inString: number[] = [];
  const elsewhere: number[] = [];
  let finished = 0;
  for (let w = 0; w < Number(a.walks); w++) {
    const ids: number[] = [];
    for (let k = 0; k < 120; k++) {
      const text = tokenizer.decode(ids);
      // Inside a string: an odd number of unescaped quotes after the first '{'.
      const quotes = (text.slice(text.indexOf('{')).replace(/\\./g, '').match(/"/g) ?? []).length;
      const t = performance.now();
      const allowed = c.allowedAfter(ids);
      (quotes % 2 === 1 ? inString : elsewhere).push(performance.now() - t);
      const id = allowed.includes(end) && rnd() < 0.5 ? end : allowed[Math.floor(rnd() * allowed.length)];
      ids.push(id);
      if (id === end) {
        finished++;
        break;
      }
    }
  }
  console.log(`\n${name}`);
  console.log(`  constraint built in ${built.toFixed(1)} ms (the first one indexes the vocabulary), first step ${first.toFixed(2)} ms`);
  console.log(`  inside strings: ${stats(inString)}`);
  console.log(`  elsewhere:      ${stats(elsewhere)}`);
  console.log(`  ${finished} of ${a.walks} walks reached the end token within 120 tokens`);
}
