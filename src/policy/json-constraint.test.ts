/**
 * JSON-constrained decoding against independent checks: every sampled answer parses and validates
 * (zod's fromJSONSchema, not this file's grammar), the allowed ids at each step are exactly those a
 * brute-force walk of the text's bytes allows, finiteTexts() is the set the automaton accepts, and the
 * TfJS engine records the same log-probs under a constraint as under an allowed-texts trie: the
 * policy's own, which logprobs() gives back for the same tokens.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CHAT_SPECIAL_TOKENS, IM_END } from './chat-tokens.ts';
import { TokenTrie } from './constrained.ts';
import {
  JsonSchemaError,
  canonicalJson,
  checkConstrainableSchema,
  jsonFormatConstraint,
  toolCallConstraint,
  type JsonSchemaObject,
  type JsonTokenConstraint,
} from './json-constraint.ts';
import { initBackend } from './tfjs/backend.ts';
import { TfjsEngine } from './tfjs/engine.ts';
import { Qwen2Model } from './tfjs/qwen2.ts';
import { trainByteLevelBPE, Tokenizer } from './tokenizer.ts';

const CORPUS = [
  'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
  'go to kitchen',
  'open red box',
  'take yellow hat',
  '{"name": "act", "arguments": {"action": "go north"}}',
  '<tool_call>\n{"name": "act"}\n</tool_call>',
  'Café naïve 日本 ✓',
];

let tiny: Tokenizer;
let END: number;
const SMOL_DIR = join(import.meta.dirname, '../../models/smollm2-135m-instruct');
const smol = existsSync(join(SMOL_DIR, 'tokenizer.json')) ? Tokenizer.fromFile(SMOL_DIR) : null;

const ACT_SCHEMA: JsonSchemaObject = {
  type: 'object',
  properties: { action: { type: 'string', enum: ['go north', 'take key', 'open red box'] } },
  required: ['action'],
  additionalProperties: false,
};

const RICH_SCHEMA: JsonSchemaObject = {
  type: 'object',
  description: 'annotations are ignored',
  properties: {
    name: { type: 'string', maxLength: 12 },
    count: { type: 'integer' },
    score: { type: ['number', 'null'] },
    tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] }, minItems: 1, maxItems: 3 },
    ok: { type: 'boolean' },
    inner: { type: 'object', properties: { x: { const: 3 }, y: { anyOf: [{ type: 'string', maxLength: 4 }, { type: 'null' }] } } },
  },
  required: ['name', 'count', 'tags'],
};

beforeAll(() => {
  tiny = Tokenizer.fromJSON(trainByteLevelBPE(CORPUS, { vocabSize: 400, specialTokens: CHAT_SPECIAL_TOKENS }), 'tiny');
  END = tiny.requireTokenId(IM_END);
});

/** Allowed ids by brute force: every token whose bytes, appended to the text so far, keep it a prefix of a sentence. */
function bruteForceAllowed(tok: Tokenizer, prefix: number[], isPrefix: (bytes: Uint8Array) => boolean): number[] {
  const before = prefix.flatMap((id) => [...tok.tokenBytes(id)]);
  const out: number[] = [];
  for (let id = 0; id < tok.vocabSize; id++) {
    if (tok.isSpecial(id)) continue;
    if (isPrefix(Uint8Array.from([...before, ...tok.tokenBytes(id)]))) out.push(id);
  }
  return out;
}

/** Random walk through the constraint (uniform over allowed ids) until the end token or `max` steps. */
function randomWalk(c: JsonTokenConstraint, seed: number, max: number): number[] {
  let s = seed >>> 0 || 1;
  const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const ids: number[] = [];
  for (let k = 0; k < max; k++) {
    const allowed = c.allowedAfter(ids);
    expect(allowed.length).toBeGreaterThan(0);
    // Prefer the end token when offered half the time, so walks finish.
    const id = allowed.includes(END) && rnd() < 0.5 ? END : allowed[Math.floor(rnd() * allowed.length)];
    ids.push(id);
    if (id === END) break;
  }
  return ids;
}

const decodeBody = (tok: Tokenizer, ids: number[]) => tok.decode(ids[ids.length - 1] === END ? ids.slice(0, -1) : ids);

describe('the automaton over a real byte-level vocabulary', () => {
  it('every finished random walk is valid JSON for the schema, in canonical form (zod validates)', () => {
    const c = jsonFormatConstraint({ type: 'json_schema', schema: RICH_SCHEMA }, { tokenizer: tiny, endTokens: [END] });
    const validate = z.fromJSONSchema(RICH_SCHEMA as never);
    let finished = 0;
    for (let seed = 1; seed <= 150; seed++) {
      const ids = randomWalk(c, seed, 400);
      if (ids[ids.length - 1] !== END) continue;
      finished++;
      const text = decodeBody(tiny, ids);
      const value = JSON.parse(text);
      expect(validate.safeParse(value).success, text).toBe(true);
      expect(canonicalJson(value)).toBe(text);
    }
    expect(finished).toBeGreaterThan(50);
  });

  it('the allowed ids equal a brute-force check of every token, inside strings, numbers and keys', () => {
    const c = jsonFormatConstraint({ type: 'json_schema', schema: RICH_SCHEMA }, { tokenizer: tiny, endTokens: [END] });
    for (let seed = 1; seed <= 6; seed++) {
      const ids = randomWalk(c, seed, 60);
      for (let k = 0; k < ids.length; k += 3) {
        const prefix = ids.slice(0, k);
        if (prefix.includes(END)) break;
        const got = [...c.allowedAfter(prefix)].filter((id) => id !== END).sort((a, b) => a - b);
        const expected = bruteForceAllowed(tiny, prefix, (bytes) => c.acceptsPrefix(bytes));
        expect(got).toEqual(expected);
      }
    }
  });

  it('free strings take any UTF-8, tokens that split a character, and JSON escapes; maxLength counts characters', () => {
    const c = jsonFormatConstraint(
      { type: 'json_schema', schema: { type: 'object', properties: { s: { type: 'string', maxLength: 5 } }, required: ['s'] } },
      { tokenizer: tiny, endTokens: [END] },
    );
    expect(c.accepts('{"s": "日本✓"}')).toBe(true);
    expect(c.accepts('{"s": "a\\"\\n\\u001fb"}')).toBe(true); // 5 characters once unescaped
    // Escapes JSON.stringify would not write: one text per string value.
    for (const other of ['\\u00e9', '\\/', '\\u000a', '\\u001F', '\\ud83d\\ude00'])
      expect(c.accepts(`{"s": "${other}"}`), other).toBe(false);
    expect(c.accepts('{"s": "abcdef"}')).toBe(false);
    expect(c.accepts('{"s": "a\nb"}')).toBe(false); // a raw control character
    expect(c.accepts('{"s": "\\x"}')).toBe(false);
    expect(JSON.stringify(JSON.parse('"a\\"\\n\\u001fb"'))).toBe('"a\\"\\n\\u001fb"');
    expect(c.accepts('{"s":"a"}')).toBe(false); // not the canonical spacing
    // A token holding the first byte of "日" is allowed, and then only continuation bytes.
    const open = tiny.encode('{"s": "');
    const allowed = new Set(c.allowedAfter(open));
    const lead = [...Array(tiny.vocabSize).keys()].find(
      (id) => !tiny.isSpecial(id) && tiny.tokenBytes(id).length === 1 && tiny.tokenBytes(id)[0] === 0xe6,
    );
    expect(lead).toBeDefined();
    expect(allowed.has(lead!)).toBe(true);
    const next = c.allowedAfter([...open, lead!]);
    expect(next.length).toBeGreaterThan(0);
    for (const id of next) expect(tiny.tokenBytes(id)[0] >> 6).toBe(0b10);
  });

  it('numbers: one text per value as JSON.stringify writes it, at most 15 digits; integers without a fraction', () => {
    const int = jsonFormatConstraint({ type: 'json_schema', schema: { type: 'integer' } }, { tokenizer: tiny, endTokens: [END] });
    for (const ok of ['0', '-7', '123456789012345']) expect(int.accepts(ok), ok).toBe(true);
    for (const bad of ['01', '1.5', '1e3', '-', '-0', '1234567890123456', '+1']) expect(int.accepts(bad), bad).toBe(false);
    const num = jsonFormatConstraint({ type: 'json_schema', schema: { type: 'number' } }, { tokenizer: tiny, endTokens: [END] });
    for (const ok of ['0.5', '-0.25', '10', '0.000001', '12.345']) {
      expect(num.accepts(ok), ok).toBe(true);
      expect(JSON.stringify(JSON.parse(ok))).toBe(ok);
    }
    // Each of these is not JSON or parses to a value JSON.stringify writes otherwise.
    for (const bad of ['.5', '1.', '1e3', '2E+10', '--1', '1.50', '-0', '0.0000001', '1.0']) expect(num.accepts(bad), bad).toBe(false);
    // After a whole integer the end token is allowed, and digits.
    const after = int.allowedAfter(tiny.encode('12'));
    expect(after).toContain(END);
  });

  it('optional properties may be left out, in schema order; required ones may not', () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'boolean' }, c: { const: 'x' } }, required: ['b'] };
    const c = jsonFormatConstraint({ type: 'json_schema', schema }, { tokenizer: tiny, endTokens: [END] });
    expect(c.accepts('{"b": true}')).toBe(true);
    expect(c.accepts('{"a": 1, "b": false, "c": "x"}')).toBe(true);
    expect(c.accepts('{"b": true, "c": "x"}')).toBe(true);
    expect(c.accepts('{"a": 1}')).toBe(false);
    expect(c.accepts('{"b": true, "a": 1}')).toBe(false);
    expect(c.accepts('{}')).toBe(false);
  });

  it('json_object: any object, nested values, canonical spacing', () => {
    const c = jsonFormatConstraint({ type: 'json_object' }, { tokenizer: tiny, endTokens: [END] });
    expect(c.accepts('{}')).toBe(true);
    expect(c.accepts('{"a": [1, {"b": null}, "x", true], "c": {}}')).toBe(true);
    expect(c.accepts('[1]')).toBe(false);
    expect(c.accepts('{"a": 1,}')).toBe(false);
    for (let seed = 1; seed <= 40; seed++) {
      const ids = randomWalk(c, seed, 200);
      if (ids[ids.length - 1] !== END) continue;
      const text = decodeBody(tiny, ids);
      const value = JSON.parse(text);
      expect(typeof value === 'object' && value !== null && !Array.isArray(value), text).toBe(true);
      expect(canonicalJson(value)).toBe(text);
    }
  });
});

describe('tool calls', () => {
  it('hermes: the finite texts are exactly the sentences the automaton accepts, each the vLLM hermes form', () => {
    const c = toolCallConstraint({
      tools: [{ name: 'act', parameters: ACT_SCHEMA }, { name: 'look' }],
      choice: 'required',
      parser: 'hermes',
      tokenizer: tiny,
      endTokens: [END],
    });
    const texts = c.finiteTexts();
    expect(texts).toEqual([
      '<tool_call>\n{"name": "act", "arguments": {"action": "go north"}}\n</tool_call>',
      '<tool_call>\n{"name": "act", "arguments": {"action": "take key"}}\n</tool_call>',
      '<tool_call>\n{"name": "act", "arguments": {"action": "open red box"}}\n</tool_call>',
      '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>',
    ]);
    // Every byte sequence the automaton accepts, enumerated byte by byte.
    expect(enumerateBytes(c).sort()).toEqual([...texts!].sort());
  });

  it('a named function restricts the call to it; llama3_json writes "parameters"', () => {
    const c = toolCallConstraint({
      tools: [{ name: 'act', parameters: ACT_SCHEMA }, { name: 'look' }],
      choice: { name: 'look' },
      parser: 'llama3_json',
      tokenizer: tiny,
      endTokens: [END],
    });
    expect(c.finiteTexts()).toEqual(['{"name": "look", "parameters": {}}']);
    expect(() =>
      toolCallConstraint({ tools: [{ name: 'act' }], choice: { name: 'nope' }, parser: 'hermes', tokenizer: tiny, endTokens: [END] }),
    ).toThrow(/tool_choice\.name.*"nope"/);
  });

  it('free arguments have no finite texts but every walk is a parseable call of a given tool', () => {
    const tools = [
      {
        name: 'search',
        parameters: { type: 'object', properties: { q: { type: 'string', maxLength: 20 }, k: { type: 'integer' } }, required: ['q', 'k'] },
      },
      { name: 'act', parameters: ACT_SCHEMA },
    ];
    const c = toolCallConstraint({ tools, choice: 'required', parser: 'hermes', tokenizer: tiny, endTokens: [END] });
    expect(c.finiteTexts()).toBeNull();
    let finished = 0;
    for (let seed = 1; seed <= 60; seed++) {
      const ids = randomWalk(c, seed, 200);
      if (ids[ids.length - 1] !== END) continue;
      finished++;
      const text = decodeBody(tiny, ids);
      const m = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec(text);
      expect(m, text).not.toBeNull();
      const call = JSON.parse(m![1]);
      const tool = tools.find((t) => t.name === call.name)!;
      expect(z.fromJSONSchema(tool.parameters as never).safeParse(call.arguments).success, text).toBe(true);
    }
    expect(finished).toBeGreaterThan(20);
  });

  it('unsupported keywords and malformed schemas are errors naming the keyword and where it is', () => {
    const mk = (parameters: JsonSchemaObject) => () =>
      toolCallConstraint({
        tools: [{ name: 'ok' }, { name: 'f', parameters }],
        choice: 'required',
        parser: 'hermes',
        tokenizer: tiny,
        endTokens: [END],
      });
    expect(mk({ type: 'object', properties: { s: { type: 'string', pattern: '^a' } } })).toThrow(
      /tools\[1\]\.parameters\.properties\.s\.pattern: the keyword "pattern" is not supported/,
    );
    expect(mk({ type: 'object', properties: { n: { type: 'integer', minimum: 0 } } })).toThrow(/properties\.n\.minimum/);
    expect(mk({ $ref: '#/$defs/x' })).toThrow(/parameters\.\$ref/);
    expect(mk({ type: 'object', required: ['x'] })).toThrow(/parameters\.required: names "x"/);
    expect(mk({ type: 'strange' })).toThrow(/parameters\.type: unknown type "strange"/);
    expect(mk({ anyOf: [{ type: 'object' }, { type: 'object', properties: {} }] })).toThrow(/parameters\.anyOf: .*start differently/);
    expect(() => checkConstrainableSchema({ type: 'string', format: 'email' }, 'response_format.schema')).toThrow(JsonSchemaError);
    expect(() =>
      jsonFormatConstraint({ type: 'json_schema', schema: { type: 'array', items: [{}] } }, { tokenizer: tiny, endTokens: [END] }),
    ).toThrow(/response_format\.schema\.items: tuple items/);
  });
});

/** Every text the automaton accepts, found by trying each byte at each step (small grammars only). */
function enumerateBytes(c: JsonTokenConstraint): string[] {
  const out: string[] = [];
  const walk = (bytes: number[]) => {
    if (out.length > 1000) throw new Error('too many texts');
    const text = new TextDecoder().decode(Uint8Array.from(bytes));
    if (bytes.length > 0 && c.accepts(text)) out.push(text);
    for (let b = 0; b < 256; b++) if (c.acceptsPrefix(Uint8Array.from([...bytes, b]))) walk([...bytes, b]);
  };
  walk([]);
  return out;
}

describe('the TfJS engine samples under a constraint as under an allowed-texts trie', () => {
  let engine: TfjsEngine;
  let prompt: number[];

  beforeAll(async () => {
    await initBackend();
    const model = Qwen2Model.random(
      {
        model_type: 'qwen2',
        vocab_size: tiny.vocabSize,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 1,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        max_position_embeddings: 1024,
        rms_norm_eps: 1e-6,
        rope_theta: 10000,
        tie_word_embeddings: false,
        initializer_range: 0.3,
        eos_token_id: END,
      },
      11,
    );
    engine = new TfjsEngine(model, tiny, {
      optimizer: { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
      maxGradNorm: 0,
      microBatchTokens: 100_000,
      endTokens: [END],
      padToken: END,
    });
    prompt = tiny.encode('<|im_start|>user\nYou are in the hall.<|im_end|>\n<|im_start|>assistant\n');
  });
  afterAll(() => engine?.dispose());

  it('every sampled call (40 seeds, T = 1.3, three rows a call) parses, names a tool and validates, enums included', async () => {
    const tools = [
      { name: 'act', parameters: ACT_SCHEMA },
      {
        name: 'note',
        parameters: {
          type: 'object',
          properties: { text: { type: 'string', maxLength: 8 }, n: { type: 'integer' } },
          required: ['text', 'n'],
        },
      },
    ];
    const c = toolCallConstraint({ tools, choice: 'required', parser: 'hermes', tokenizer: tiny, endTokens: [END] });
    const seen = new Set<string>();
    for (let seed = 1; seed <= 40; seed++) {
      const gens = await engine.generate([prompt, prompt, prompt], {
        temperature: 1.3,
        topP: 1,
        maxTokens: 120,
        seed,
        constraints: [c, c, null],
      });
      for (const g of gens.slice(0, 2)) {
        expect(g.finish).toBe('stop');
        expect(g.tokens[g.tokens.length - 1]).toBe(END);
        const m = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec(g.text);
        expect(m, g.text).not.toBeNull();
        const call = JSON.parse(m![1]);
        const tool = tools.find((t) => t.name === call.name);
        expect(tool, g.text).toBeDefined();
        expect(z.fromJSONSchema(tool!.parameters as never).safeParse(call.arguments).success, g.text).toBe(true);
        expect(canonicalJson(call)).toBe(m![1]);
        seen.add(call.name === 'act' ? call.arguments.action : 'note');
      }
    }
    // The sampler explores: both tools and more than one enum value come out.
    expect(seen.has('note')).toBe(true);
    expect(seen.size).toBeGreaterThan(2);
  });

  it('the recorded log-probs equal logprobs() of the same tokens (the policy’s own, as the trie path records)', async () => {
    const c = toolCallConstraint({
      tools: [{ name: 'act', parameters: ACT_SCHEMA }],
      choice: 'required',
      parser: 'hermes',
      tokenizer: tiny,
      endTokens: [END],
    });
    const texts = c.finiteTexts()!;
    for (const seed of [3, 4, 5]) {
      const [viaConstraint, viaTrie] = await engine.generate([prompt, prompt], {
        temperature: 0.9,
        topP: 1,
        maxTokens: 80,
        seed,
        constraints: [c, null],
        allowedTexts: [null, texts],
      });
      expect(texts).toContain(viaConstraint.text);
      expect(texts).toContain(viaTrie.text);
      const scored = await engine.logprobs(
        [viaConstraint, viaTrie].map((g) => ({ prompt, response: g.tokens })),
        0.9,
      );
      [viaConstraint, viaTrie].forEach((g, i) => {
        expect(g.logprobs).toHaveLength(scored[i].length);
        g.logprobs.forEach((lp, k) => expect(Math.abs(lp - scored[i][k])).toBeLessThan(1e-4));
      });
    }
  });

  it('response_format json_schema: every sampled answer (30 seeds, T = 1.5) parses, validates and is canonical', async () => {
    const schema = {
      type: 'object',
      properties: { verdict: { enum: ['yes', 'no'] }, reason: { type: 'string', maxLength: 10 }, score: { type: 'integer' } },
      required: ['verdict', 'reason', 'score'],
    };
    const c = jsonFormatConstraint({ type: 'json_schema', schema }, { tokenizer: tiny, endTokens: [END] });
    const validate = z.fromJSONSchema(schema as never);
    for (let seed = 1; seed <= 30; seed++) {
      const [g] = await engine.generate([prompt], { temperature: 1.5, topP: 1, maxTokens: 100, seed, constraints: [c] });
      expect(g.finish, g.text).toBe('stop');
      const value = JSON.parse(g.text);
      expect(validate.safeParse(value).success, g.text).toBe(true);
      expect(canonicalJson(value)).toBe(g.text);
    }
  });

  it('a row with both allowedTexts and a constraint, or a wrong number of constraints, is refused', async () => {
    const c = toolCallConstraint({ tools: [{ name: 'look' }], choice: 'required', parser: 'hermes', tokenizer: tiny, endTokens: [END] });
    await expect(
      engine.generate([prompt], { temperature: 1, topP: 1, maxTokens: 4, seed: 1, constraints: [c], allowedTexts: [['x']] }),
    ).rejects.toThrow(/row 0 has both allowedTexts and constraints\[0\]/);
    await expect(engine.generate([prompt], { temperature: 1, topP: 1, maxTokens: 4, seed: 1, constraints: [c, c] })).rejects.toThrow(
      /constraints has 2 entries for 1 prompts/,
    );
  });

  it('the trie is a TokenConstraint too: greedy decoding under it and under the equivalent finite constraint agree on the text', async () => {
    const c = toolCallConstraint({
      tools: [{ name: 'act', parameters: ACT_SCHEMA }],
      choice: 'required',
      parser: 'hermes',
      tokenizer: tiny,
      endTokens: [END],
    });
    const trie = TokenTrie.fromTexts(c.finiteTexts()!, (t) => tiny.encode(t), END);
    const [a, b] = await engine.generate([prompt, prompt], {
      temperature: 0,
      topP: 1,
      maxTokens: 80,
      seed: 1,
      constraints: [trie, null],
      allowedTexts: [null, c.finiteTexts()],
    });
    expect(a.tokens).toEqual(b.tokens);
  });
});

describe.skipIf(!smol)('SmolLM2 tokenizer (49,152 ids)', () => {
  it('a tool call with a free string and an enum: allowed ids match brute force at sampled steps', () => {
    const tok = smol!;
    const end = tok.requireTokenId(IM_END);
    const tools = [
      {
        name: 'say',
        parameters: {
          type: 'object',
          properties: { text: { type: 'string', maxLength: 40 }, mood: { enum: ['calm', 'loud'] } },
          required: ['text', 'mood'],
        },
      },
    ];
    const c = toolCallConstraint({ tools, choice: 'required', parser: 'hermes', tokenizer: tok, endTokens: [end] });
    let s = 7;
    const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
    const ids: number[] = [];
    for (let k = 0; k < 40; k++) {
      const allowed = c.allowedAfter(ids);
      if (k % 8 === 3) {
        const expected = bruteForceAllowed(tok, ids, (bytes) => c.acceptsPrefix(bytes));
        expect([...allowed].filter((id) => id !== end).sort((x, y) => x - y)).toEqual(expected);
      }
      const id = allowed[Math.floor(rnd() * allowed.length)];
      ids.push(id);
      if (id === end) break;
    }
  });
});
