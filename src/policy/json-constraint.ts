/**
 * Decoding constrained to JSON: a tool call of given function tools' JSON Schemas (tool_choice
 * "required" or a named function) or a `response_format` (json_schema, json_object).
 *
 * A schema is compiled into a small grammar whose only sentences are its canonical serialisations
 * (properties in schema order, Python json.dumps whitespace: `{"a": 1, "b": [1, 2]}`), run as a
 * byte-level pushdown automaton. Byte-level, not character-level, because byte-level BPE tokens may
 * hold part of a UTF-8 character. At each step the token ids allowed are those whose bytes keep the
 * text a prefix of a sentence: the vocabulary's bytes are put in a trie once per tokenizer and walked
 * with the automaton, pruning at the first byte that leaves the grammar; inside a free string most of
 * the vocabulary is allowed, so there the tokens without a quote, a backslash or a control byte are
 * taken from a precomputed list instead of walking them.
 *
 * The canonical form makes a constrained answer one text per value (what the tool-call and exact-token
 * layers above compare against), and a schema whose leaves are all enums, consts or booleans a finite
 * list of texts that every engine can take as `allowedTexts`.
 */
import type { TokenConstraint } from './types.ts';

/** A JSON Schema as given (a tool's `parameters`, a `response_format`'s `schema`). */
export type JsonSchemaObject = Record<string, unknown>;

/** What the constraint needs of a tokenizer: each token's bytes (byte-level BPE) or, failing that, its text. */
export interface ConstraintTokenizer {
  readonly vocabSize: number;
  decode(ids: number[]): string;
  /** The exact bytes token `id` stands for (./tokenizer.ts Tokenizer); absent: the UTF-8 of decode([id]). */
  tokenBytes?(id: number): Uint8Array;
  /** Special tokens are never part of a constrained text (the end token is added on its own). */
  isSpecial?(id: number): boolean;
}

/** An unsupported or malformed schema: `path` is where in it (`$.properties.x.pattern`). */
export class JsonSchemaError extends Error {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}

// ------------------------------------------------------------------ grammar

/** A trie of literal texts; a terminal carries a tag (which text ended there). */
class LitTrie {
  readonly next: Map<number, number>[] = [new Map()];
  /** Per node: the tag of the text that ends there, or -1. */
  readonly tag: number[] = [-1];
  readonly texts: string[] = [];

  add(text: string, tag: number, where: string): void {
    let node = 0;
    for (const b of utf8(text)) {
      let child = this.next[node].get(b);
      if (child === undefined) {
        child = this.next.length;
        this.next.push(new Map());
        this.tag.push(-1);
        this.next[node].set(b, child);
      }
      node = child;
    }
    if (this.tag[node] >= 0) {
      if (this.texts[this.tag[node]] === text) return; // a repeated enum value
      throw new JsonSchemaError(where, `two alternatives serialise to the same text ${JSON.stringify(text)}`);
    }
    this.tag[node] = tag;
    this.texts[tag] = text;
  }
}

type GNode =
  | { k: 'lit'; bytes: Uint8Array; text: string }
  /** One of the trie's texts; a text tagged j continues with then[j] (null: the node ends there). */
  | { k: 'switch'; trie: LitTrie; then: (GNode | null)[] }
  | { k: 'string'; min: number; max: number }
  | { k: 'number'; integer: boolean }
  /** `{` then the trie after[-1 → index 0], a text tagged j enters property j's value, then after[j + 1]; tag -1 closes. */
  | { k: 'object'; after: LitTrie[]; values: GNode[] }
  /** Any keys (free strings), values of one kind. */
  | { k: 'map'; value: GNode }
  | { k: 'array'; item: GNode; min: number; max: number }
  /** One of the options, told apart by the first byte. */
  | { k: 'any'; options: GNode[]; first: (GNode | undefined)[] }
  | { k: 'seq'; parts: GNode[] }
  /** The whole text is done. */
  | { k: 'end' };

const MAX_DIGITS = 15; // exact in a double, as JSON parsers read it

const KNOWN_ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  '$schema',
  '$comment',
  '$id',
  'deprecated',
  'readOnly',
  'writeOnly',
]);
const HANDLED = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'enum',
  'const',
  'items',
  'minItems',
  'maxItems',
  'minLength',
  'maxLength',
  'anyOf',
  'oneOf',
  'strict',
]);

/** Python json.dumps's text of a JSON value (separators ", " and ": ", keys in their order, non-ASCII as is). */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`canonicalJson: ${value} is not a JSON number`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(', ')}]`;
  if (typeof value === 'object')
    return `{${Object.entries(value as Record<string, unknown>)
      .map(([k, v]) => `${JSON.stringify(k)}: ${canonicalJson(v)}`)
      .join(', ')}}`;
  throw new Error(`canonicalJson: ${typeof value} is not a JSON value`);
}

function lit(text: string): GNode {
  return { k: 'lit', bytes: utf8(text), text };
}

function choice(texts: readonly string[], where: string): GNode {
  const trie = new LitTrie();
  texts.forEach((t, i) => trie.add(t, i, where));
  return { k: 'switch', trie, then: texts.map(() => null) };
}

function seq(parts: (GNode | null)[]): GNode {
  const kept = parts.filter((p): p is GNode => p !== null && !(p.k === 'lit' && p.bytes.length === 0));
  return kept.length === 1 ? kept[0] : { k: 'seq', parts: kept };
}

function anyOf(options: GNode[], where: string): GNode {
  const first: (GNode | undefined)[] = new Array(256);
  for (const o of options) {
    for (const b of firstBytes(o)) {
      if (first[b] && first[b] !== o)
        throw new JsonSchemaError(
          where,
          `anyOf/oneOf branches must start differently (e.g. a string and a number, an object and null); two of them can start with ${JSON.stringify(String.fromCharCode(b))}`,
        );
      first[b] = o;
    }
  }
  return { k: 'any', options, first };
}

function firstBytes(n: GNode): number[] {
  switch (n.k) {
    case 'lit':
      return [n.bytes[0]];
    case 'switch':
      return [...n.trie.next[0].keys()];
    case 'string':
      return [0x22];
    case 'number':
      return [0x2d, ...range(0x30, 0x3a)];
    case 'object':
    case 'map':
      return [0x7b];
    case 'array':
      return [0x5b];
    case 'any':
      return n.first.flatMap((o, b) => (o ? [b] : []));
    case 'seq':
      return firstBytes(n.parts[0]);
    case 'end':
      return [];
  }
}

/** Any JSON value (json_object's values, a schema with no constraint). */
function genericValue(): GNode {
  const any: GNode & { k: 'any' } = { k: 'any', options: [], first: new Array(256) };
  const options: GNode[] = [
    { k: 'map', value: any },
    { k: 'array', item: any, min: 0, max: Infinity },
    { k: 'string', min: 0, max: Infinity },
    { k: 'number', integer: false },
    choice(['true', 'false', 'null'], '$'),
  ];
  const built = anyOf(options, '$') as GNode & { k: 'any' };
  any.options = built.options;
  any.first = built.first;
  return any;
}

function nonNegativeInt(s: JsonSchemaObject, key: string, where: string): number | undefined {
  const v = s[key];
  if (v === undefined) return undefined;
  if (!(typeof v === 'number' && Number.isInteger(v) && v >= 0))
    throw new JsonSchemaError(`${where}.${key}`, `must be a whole number >= 0, got ${JSON.stringify(v)}`);
  return v;
}

/** Compiles a JSON Schema (the subset above) into the grammar of its canonical serialisations. */
function compileSchema(schema: unknown, where: string): GNode {
  if (schema === true) return genericValue();
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema))
    throw new JsonSchemaError(where, `a schema must be an object, got ${JSON.stringify(schema)}`);
  const s = schema as JsonSchemaObject;
  for (const key of Object.keys(s)) {
    if (HANDLED.has(key) || KNOWN_ANNOTATIONS.has(key)) continue;
    throw new JsonSchemaError(
      `${where}.${key}`,
      `the keyword "${key}" is not supported by constrained decoding (supported: ${[...HANDLED].filter((k) => k !== 'strict').join(', ')}; annotations such as description are ignored)`,
    );
  }
  if (s.const !== undefined) return lit(canonicalJson(s.const));
  if (s.enum !== undefined) {
    if (!Array.isArray(s.enum) || s.enum.length === 0) throw new JsonSchemaError(`${where}.enum`, 'must be a non-empty array');
    return choice(
      s.enum.map((v) => canonicalJson(v)),
      `${where}.enum`,
    );
  }
  for (const key of ['anyOf', 'oneOf'] as const) {
    if (s[key] === undefined) continue;
    const list = s[key];
    if (!Array.isArray(list) || list.length === 0) throw new JsonSchemaError(`${where}.${key}`, 'must be a non-empty array of schemas');
    return anyOf(
      list.map((sub, i) => compileSchema(sub, `${where}.${key}[${i}]`)),
      `${where}.${key}`,
    );
  }
  let type = s.type;
  if (type === undefined) {
    if (s.properties !== undefined || s.additionalProperties !== undefined) type = 'object';
    else if (s.items !== undefined) type = 'array';
    else return genericValue();
  }
  if (Array.isArray(type)) {
    if (type.length === 0) throw new JsonSchemaError(`${where}.type`, 'must not be empty');
    if (type.length > 1)
      return anyOf(
        type.map((t, i) => compileTyped(s, t, `${where}.type[${i}]`, where)),
        `${where}.type`,
      );
    type = type[0];
  }
  return compileTyped(s, type, `${where}.type`, where);
}

function compileTyped(s: JsonSchemaObject, type: unknown, typeWhere: string, where: string): GNode {
  switch (type) {
    case 'null':
      return lit('null');
    case 'boolean':
      return choice(['true', 'false'], where);
    case 'integer':
    case 'number':
      return { k: 'number', integer: type === 'integer' };
    case 'string': {
      const min = nonNegativeInt(s, 'minLength', where) ?? 0;
      const max = nonNegativeInt(s, 'maxLength', where) ?? Infinity;
      if (min > max) throw new JsonSchemaError(where, `minLength ${min} is above maxLength ${max}`);
      return { k: 'string', min, max };
    }
    case 'array': {
      const min = nonNegativeInt(s, 'minItems', where) ?? 0;
      const max = nonNegativeInt(s, 'maxItems', where) ?? Infinity;
      if (min > max) throw new JsonSchemaError(where, `minItems ${min} is above maxItems ${max}`);
      if (Array.isArray(s.items))
        throw new JsonSchemaError(`${where}.items`, 'tuple items (an array of schemas) are not supported; give one schema');
      const item = s.items === undefined ? genericValue() : compileSchema(s.items, `${where}.items`);
      return { k: 'array', item, min, max };
    }
    case 'object':
      return compileObject(s, where);
    default:
      throw new JsonSchemaError(typeWhere, `unknown type ${JSON.stringify(type)} (string, number, integer, boolean, null, array, object)`);
  }
}

function compileObject(s: JsonSchemaObject, where: string): GNode {
  const props = s.properties ?? {};
  if (typeof props !== 'object' || props === null || Array.isArray(props))
    throw new JsonSchemaError(`${where}.properties`, 'must be an object of schemas');
  const names = Object.keys(props);
  const required = s.required ?? [];
  if (!Array.isArray(required) || !required.every((r) => typeof r === 'string'))
    throw new JsonSchemaError(`${where}.required`, 'must be an array of property names');
  for (const r of required)
    if (!names.includes(r)) throw new JsonSchemaError(`${where}.required`, `names "${r}", which is not in properties`);
  const extra = s.additionalProperties;
  if (extra !== undefined && typeof extra !== 'boolean' && (typeof extra !== 'object' || extra === null))
    throw new JsonSchemaError(`${where}.additionalProperties`, 'must be a boolean or a schema');
  // No properties named and others allowed: any keys (json_object, a free-form map).
  if (names.length === 0 && extra !== false && extra !== undefined)
    return { k: 'map', value: extra === true ? genericValue() : compileSchema(extra, `${where}.additionalProperties`) };
  if (names.length === 0 && extra === undefined && s.type === 'object' && s.properties === undefined)
    return { k: 'map', value: genericValue() };
  // With properties, only they are written: valid whether or not others would be allowed.
  const values = names.map((n) => compileSchema((props as Record<string, unknown>)[n], `${where}.properties.${n}`));
  const isRequired = names.map((n) => required.includes(n));
  // after[i]: what may follow once i properties' slots are behind (property i-1 written or skipped):
  // the key of any later property j with nothing required between, or the closing brace.
  const after: LitTrie[] = [];
  for (let i = 0; i <= names.length; i++) {
    const trie = new LitTrie();
    const sep = i === 0 ? '' : ', ';
    for (let j = i; j < names.length; j++) {
      trie.add(`${sep}${JSON.stringify(names[j])}: `, j, `${where}.properties`);
      if (isRequired[j]) break;
    }
    if (isRequired.slice(i).every((r) => !r)) trie.add('}', names.length, where);
    after.push(trie);
  }
  return { k: 'object', after, values };
}

// ------------------------------------------------------------------ automaton

/**
 * One frame of the automaton's stack, immutable so that a state is shared by every token that
 * starts with the same bytes. `s`, `i`, `t` mean what the node kind says; `p` is the frame to resume
 * once this one's node is done.
 */
interface Frame {
  readonly n: GNode;
  readonly s: number;
  readonly i: number;
  readonly t: number;
  readonly p: Frame | null;
}

const END_NODE: GNode = { k: 'end' };
const END: Frame = { n: END_NODE, s: 0, i: 0, t: 0, p: null };

function frame(n: GNode, s: number, i: number, t: number, p: Frame | null): Frame {
  return { n, s, i, t, p };
}

/** The frame that starts node `n`, to be followed by `p`. */
function enter(n: GNode, p: Frame): Frame {
  if (n.k === 'seq') return enterPart(n, 0, p);
  return frame(n, 0, 0, 0, p);
}

function enterPart(n: GNode & { k: 'seq' }, k: number, p: Frame): Frame {
  if (k === n.parts.length) return resume(p);
  return enter(n.parts[k], frame(n, 0, k + 1, 0, p));
}

/** `f` is the continuation of a node that just finished: the state after it. */
function resume(f: Frame): Frame {
  const n = f.n;
  switch (n.k) {
    case 'end':
      return f;
    case 'seq':
      return enterPart(n, f.i, f.p!);
    case 'switch':
      // Resumed after the node a text led into: the switch is done.
      return resume(f.p!);
    case 'object':
      // Property f.i's value is done: next, the texts after it.
      return frame(n, 1, f.i + 1, 0, f.p);
    case 'map':
      // s 2: the key is done (": " next); s 5: a value is done ("," or "}" next).
      return frame(n, f.s === 2 ? 3 : 6, 0, 0, f.p);
    case 'array':
      return frame(n, 3, f.i + 1, 0, f.p);
    default:
      throw new Error(`json constraint: cannot resume a ${n.k} node`);
  }
}

/** The frame that would follow if `f`'s node ended here without another byte, or null if it cannot. */
function finish(f: Frame): Frame | null {
  const n = f.n;
  if (n.k === 'end') return f;
  if (n.k === 'number') return numberDone(f) ? resume(f.p!) : null;
  if (n.k === 'switch') {
    const tag = n.trie.tag[f.s];
    return tag >= 0 && n.then[tag] === null && n.trie.next[f.s].size > 0 ? resume(f.p!) : null;
  }
  return null;
}

/** Whether the text so far is a whole sentence. */
function complete(f: Frame): boolean {
  for (let g: Frame | null = f; g; g = finish(g)) if (g.n.k === 'end') return true;
  return false;
}

const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

/** The state after byte `b`, or null when `b` cannot come next. */
function step(f: Frame, b: number): Frame | null {
  const n = f.n;
  switch (n.k) {
    case 'end':
      return null;
    case 'lit': {
      if (n.bytes[f.s] !== b) return null;
      return f.s + 1 === n.bytes.length ? resume(f.p!) : frame(n, f.s + 1, 0, 0, f.p);
    }
    case 'switch':
      return stepSwitch(n.trie, f, b, (tag) => {
        const then = n.then[tag];
        return then === null ? resume(f.p!) : enter(then, frame(n, 0, 0, 0, f.p));
      });
    case 'string':
      return stepString(n, f, b);
    case 'number':
      return stepNumber(n, f, b);
    case 'object': {
      if (f.s === 0) return b === 0x7b ? frame(n, 1, 0, 0, f.p) : null;
      // s 1: walking the texts after[i] from trie node t.
      return stepSwitch(n.after[f.i], frame(n, 1, f.i, f.t, f.p), b, (tag) =>
        tag === n.values.length ? resume(f.p!) : enter(n.values[tag], frame(n, 2, tag, 0, f.p)),
      );
    }
    case 'map':
      return stepMap(n, f, b);
    case 'array':
      return stepArray(n, f, b);
    case 'any': {
      const o = n.first[b];
      return o ? step(enter(o, f.p!), b) : null;
    }
    case 'seq':
      throw new Error('json constraint: a seq frame is never stepped');
  }
}

/** Walks a literal trie whose current node is f.t (object) or f.s (switch); `done(tag)` is the frame after a text. */
function stepSwitch(trie: LitTrie, f: Frame, b: number, done: (tag: number) => Frame): Frame | null {
  const at = f.n.k === 'object' ? f.t : f.s;
  const child = trie.next[at].get(b);
  if (child === undefined) {
    // A text that is a prefix of another (enum [1, 12]) ends when the next byte cannot go on.
    const tag = trie.tag[at];
    if (tag >= 0 && at !== 0) {
      const after = done(tag);
      return step(after, b);
    }
    return null;
  }
  const tag = trie.tag[child];
  if (tag >= 0 && trie.next[child].size === 0) return done(tag);
  return f.n.k === 'object' ? frame(f.n, 1, f.i, child, f.p) : frame(f.n, child, 0, 0, f.p);
}

// String frame: s = phase | pending << 4 | range << 6, i = length so far in UTF-16 units (JavaScript's and
// zod's count; JSON Schema counts a 4-byte character once, so a string within maxLength here is there too); pending: UTF-8 continuation
// bytes still due, range: which bytes the next may be (CONT_RANGES: strict UTF-8, no overlong forms or surrogates).
// Phases: 0 before the opening quote, 1 in the body, 2 after a backslash, 3..7 in \u00XX (3, 4: the zeros; 5: 0 or 1;
// 6, 7: the last digit after 0 / 1). Only the escapes JSON.stringify writes, so a string value has one text.
function stepString(n: GNode & { k: 'string' }, f: Frame, b: number): Frame | null {
  const phase = f.s & 15;
  const pending = (f.s >> 4) & 3;
  switch (phase) {
    case 0:
      return b === 0x22 ? frame(n, 1, 0, 0, f.p) : null;
    case 1: {
      if (pending > 0) {
        const [lo, hi] = CONT_RANGES[(f.s >> 6) & 7];
        return b >= lo && b <= hi ? frame(n, 1 | ((pending - 1) << 4), f.i, 0, f.p) : null;
      }
      if (b === 0x22) return f.i >= n.min ? resume(f.p!) : null;
      if (b < 0x20 || f.i >= n.max) return null;
      if (b === 0x5c) return frame(n, 2, f.i + 1, 0, f.p);
      if (b < 0x80) return frame(n, 1, f.i + 1, 0, f.p);
      const more = utf8Continuations(b);
      // A 4-byte character is 2 UTF-16 units, as JavaScript (and zod) count a string's length.
      const units = more === 3 ? 2 : 1;
      if (more === 0 || f.i + units > n.max) return null;
      return frame(n, 1 | (more << 4) | (firstContRange(b) << 6), f.i + units, 0, f.p);
    }
    case 2:
      if (b === 0x75) return frame(n, 3, f.i, 0, f.p);
      // The escapes JSON.stringify writes: \" \\ \b \f \n \r \t (no \/).
      return b === 0x22 || b === 0x5c || b === 0x62 || b === 0x66 || b === 0x6e || b === 0x72 || b === 0x74
        ? frame(n, 1, f.i, 0, f.p)
        : null;
    case 3:
    case 4:
      return b === 0x30 ? frame(n, phase + 1, f.i, 0, f.p) : null;
    case 5:
      return b === 0x30 ? frame(n, 6, f.i, 0, f.p) : b === 0x31 ? frame(n, 7, f.i, 0, f.p) : null;
    case 6:
      // \u0000-\u001f but those with a short escape (\b \t \n \f \r), lowercase as JSON.stringify writes them.
      return (isDigit(b) && b !== 0x38 && b !== 0x39) || b === 0x62 || b === 0x65 || b === 0x66 ? frame(n, 1, f.i, 0, f.p) : null;
    case 7:
      return isDigit(b) || (b >= 0x61 && b <= 0x66) ? frame(n, 1, f.i, 0, f.p) : null;
    default:
      return null;
  }
}

const CONT_RANGES: readonly (readonly [number, number])[] = [
  [0x80, 0xbf],
  [0xa0, 0xbf], // after E0
  [0x80, 0x9f], // after ED
  [0x90, 0xbf], // after F0
  [0x80, 0x8f], // after F4
];

/** Which CONT_RANGES entry the byte after lead byte `b` must be in. */
function firstContRange(b: number): number {
  return b === 0xe0 ? 1 : b === 0xed ? 2 : b === 0xf0 ? 3 : b === 0xf4 ? 4 : 0;
}

/** Continuation bytes a UTF-8 lead byte announces; 0 for a byte that cannot lead. */
function utf8Continuations(b: number): number {
  if (b >= 0xc2 && b <= 0xdf) return 1;
  if (b >= 0xe0 && b <= 0xef) return 2;
  if (b >= 0xf0 && b <= 0xf4) return 3;
  return 0;
}

// Number frame: s = state, i = digits so far, t = flags (NEG, LAST_ZERO, INT_ZERO, FRAC_NONZERO).
// 0 start, 1 after '-', 2 after a leading 0, 3 integer digits, 4 after '.', 5 fraction digits.
// Numbers are written as JSON.stringify writes them, so a value has one text: no exponent, no "-0",
// no trailing zero in a fraction, at most 15 digits (exact in a double), below 1 at least 1e-6.
const NEG = 1;
const LAST_ZERO = 2;
const INT_ZERO = 4;
const FRAC_NONZERO = 8;
const MAX_FRACTION_LEADING_ZEROS = 5;

function stepNumber(n: GNode & { k: 'number' }, f: Frame, b: number): Frame | null {
  const digit = (s: number, flags: number): Frame | null => (f.i + 1 > MAX_DIGITS ? null : frame(n, s, f.i + 1, flags, f.p));
  switch (f.s) {
    case 0:
      if (b === 0x2d) return frame(n, 1, 0, NEG, f.p);
    // fall through
    case 1:
      // "-0" must go on with a fraction, which an integer has not: no dead end.
      if (b === 0x30) return f.t & NEG && n.integer ? null : digit(2, f.t | INT_ZERO);
      if (b >= 0x31 && b <= 0x39) return digit(3, f.t);
      return null;
    case 3:
      if (isDigit(b)) return digit(3, f.t);
    // fall through
    case 2:
      if (!n.integer && b === 0x2e) return frame(n, 4, f.i, f.t, f.p);
      return numberDone(f) ? passOn(f, b) : null;
    case 4:
    case 5: {
      if (!isDigit(b)) return f.s === 5 && numberDone(f) ? passOn(f, b) : null;
      const zero = b === 0x30;
      // A zero must leave room for the nonzero digit that ends the fraction.
      if (zero && (f.i + 2 > MAX_DIGITS || (f.t & INT_ZERO && !(f.t & FRAC_NONZERO) && f.i >= 1 + MAX_FRACTION_LEADING_ZEROS))) return null;
      return digit(5, zero ? f.t | LAST_ZERO : (f.t & ~LAST_ZERO) | FRAC_NONZERO);
    }
    default:
      return null;
  }
}

/** Whether a number frame's text so far is a whole number in canonical form. */
function numberDone(f: Frame): boolean {
  if (f.s === 2) return !(f.t & NEG);
  if (f.s === 3) return true;
  return f.s === 5 && !(f.t & LAST_ZERO);
}

/** The number is done; the byte belongs to what follows it. */
function passOn(f: Frame, b: number): Frame | null {
  return step(resume(f.p!), b);
}

// Map frame (any keys): s 0 before '{', 1 after '{', 2 in a key, 3 after the key (':'), 4 after ':' (' '),
// 5 in a value, 6 after a value (',' or '}'), 7 after ',' (' '), 8 before the next key ('"').
const KEY: GNode = { k: 'string', min: 0, max: Infinity };
function stepMap(n: GNode & { k: 'map' }, f: Frame, b: number): Frame | null {
  switch (f.s) {
    case 0:
      return b === 0x7b ? frame(n, 1, 0, 0, f.p) : null;
    case 1:
      if (b === 0x7d) return resume(f.p!);
    // fall through
    case 8:
      return b === 0x22 ? step(enter(KEY, frame(n, 2, 0, 0, f.p)), b) : null;
    case 3:
      return b === 0x3a ? frame(n, 4, 0, 0, f.p) : null;
    case 4:
      return b === 0x20 ? enter(n.value, frame(n, 5, 0, 0, f.p)) : null;
    case 6:
      if (b === 0x7d) return resume(f.p!);
      return b === 0x2c ? frame(n, 7, 0, 0, f.p) : null;
    case 7:
      return b === 0x20 ? frame(n, 8, 0, 0, f.p) : null;
    default:
      return null;
  }
}

// Array frame: s 0 before '[', 1 after '[', 3 after an item (i items so far), 4 after ',' (' '), 2 in an item (a continuation).
function stepArray(n: GNode & { k: 'array' }, f: Frame, b: number): Frame | null {
  switch (f.s) {
    case 0:
      return b === 0x5b ? frame(n, 1, 0, 0, f.p) : null;
    case 1:
      if (b === 0x5d) return n.min === 0 ? resume(f.p!) : null;
      return n.max >= 1 ? step(enter(n.item, frame(n, 2, 0, 0, f.p)), b) : null;
    case 3:
      if (b === 0x5d) return f.i >= n.min ? resume(f.p!) : null;
      return b === 0x2c && f.i < n.max ? frame(n, 4, f.i, 0, f.p) : null;
    case 4:
      return b === 0x20 ? enter(n.item, frame(n, 2, f.i, 0, f.p)) : null;
    default:
      return null;
  }
}

// ------------------------------------------------------------------ finite sentences

/** Every sentence of `n` followed by those of `rest`, or null when there are more than `limit` (or infinitely many). */
function sentences(n: GNode, limit: number): string[] | null {
  switch (n.k) {
    case 'lit':
      return [n.text];
    case 'switch': {
      const out: string[] = [];
      for (let tag = 0; tag < n.trie.texts.length; tag++) {
        const then = n.then[tag];
        const tails = then === null ? [''] : sentences(then, limit);
        if (!tails) return null;
        for (const t of tails) out.push(n.trie.texts[tag] + t);
        if (out.length > limit) return null;
      }
      return out;
    }
    case 'seq': {
      let acc = [''];
      for (const part of n.parts) {
        const s = sentences(part, limit);
        if (!s || acc.length * s.length > limit) return null;
        acc = acc.flatMap((a) => s.map((x) => a + x));
      }
      return acc;
    }
    case 'any': {
      const out: string[] = [];
      for (const o of n.options) {
        const s = sentences(o, limit);
        if (!s) return null;
        out.push(...s);
        if (out.length > limit) return null;
      }
      return out;
    }
    case 'object': {
      const values: (string[] | null)[] = n.values.map((v) => sentences(v, limit));
      const out: string[] = [];
      // From slot i with text so far: each text of after[i] (a key, or the closing brace).
      const walk = (i: number, text: string): boolean => {
        const trie = n.after[i];
        for (let tag = 0; tag < trie.texts.length; tag++) {
          const key = trie.texts[tag];
          if (key === undefined) continue;
          if (tag === n.values.length) {
            out.push(text + key);
            if (out.length > limit) return false;
            continue;
          }
          const vs = values[tag];
          if (!vs) return false;
          for (const v of vs) if (!walk(tag + 1, text + key + v)) return false;
        }
        return true;
      };
      return walk(0, '{') ? out : null;
    }
    case 'array': {
      if (n.max === Infinity) return null;
      const items = sentences(n.item, limit);
      if (!items) return null;
      const out: string[] = [];
      let layer = [''];
      for (let count = 0; count <= n.max; count++) {
        if (count >= n.min) for (const l of layer) out.push(`[${l}]`);
        if (out.length > limit) return null;
        if (count === n.max) break;
        if (layer.length * items.length > limit) return null;
        layer = layer.flatMap((l) => items.map((it) => (count === 0 ? it : `${l}, ${it}`)));
      }
      return out;
    }
    default:
      return null;
  }
}

// ------------------------------------------------------------------ EBNF for servers

/**
 * The grammar as EBNF in the GBNF dialect xgrammar reads (vLLM's `structured_outputs.grammar`,
 * `guided_grammar` before it). Its sentences are a subset of the automaton's, so whatever a server
 * samples under it the automaton accepts, though not all of them: string lengths are counted in characters
 * (a 4-byte one counts 1 there, 2 here), and a fraction below 1 has at most 14 digits, its first nonzero among the first 6.
 */
function toEbnf(root: GNode): string {
  const names = new Map<GNode, string>();
  const rules: string[] = [];
  let count = 0;
  const fresh = () => (count++ === 0 ? 'root' : `r${count}`);
  const ruleOf = (n: GNode): string => {
    let name = names.get(n);
    if (name) return name;
    name = fresh();
    names.set(n, name);
    const at = rules.length;
    rules.push('');
    rules[at] = `${name} ::= ${body(n)}`;
    return name;
  };
  const strChar = 'strchar';
  let needsStr = false;
  const body = (n: GNode): string => {
    switch (n.k) {
      case 'lit':
        return ebnfLiteral(n.text);
      case 'switch':
        return n.trie.texts
          .map((text, tag) => {
            const then = n.then[tag];
            return then === null ? ebnfLiteral(text) : `${ebnfLiteral(text)} ${ruleOf(then)}`;
          })
          .map((alt) => `(${alt})`)
          .join(' | ');
      case 'string':
        needsStr = true;
        return `"\\"" ${strChar}${repeat(n.min, n.max)} "\\""`;
      case 'number':
        return n.integer ? `("0" | "-"? [1-9] [0-9]{0,14})` : `("0" | "-"? [1-9] [0-9]{0,14} | "-"? ${FRACTIONS})`;
      case 'object': {
        // slot i: what may follow once i properties' slots are behind.
        const slot = (i: number): string => {
          const trie = n.after[i];
          const alts: string[] = [];
          trie.texts.forEach((text, tag) => {
            if (text === undefined) return;
            alts.push(tag === n.values.length ? ebnfLiteral(text) : `${ebnfLiteral(text)} ${ruleOf(n.values[tag])} ${slotRule(tag + 1)}`);
          });
          return alts.map((a) => `(${a})`).join(' | ');
        };
        const slotNames = new Map<number, string>();
        const slotRule = (i: number): string => {
          let name = slotNames.get(i);
          if (name) return name;
          name = fresh();
          slotNames.set(i, name);
          const at = rules.length;
          rules.push('');
          rules[at] = `${name} ::= ${slot(i)}`;
          return name;
        };
        return `"{" ${slotRule(0)}`;
      }
      case 'map': {
        needsStr = true;
        const kv = `"\\"" ${strChar}* "\\"" ": " ${ruleOf(n.value)}`;
        return `"{" ("}" | ${kv} (", " ${kv})* "}")`;
      }
      case 'array': {
        const item = ruleOf(n.item);
        const more =
          n.max === Infinity ? `(", " ${item})*` : n.max <= 1 ? '' : `(", " ${item})${repeat(Math.max(0, n.min - 1), n.max - 1)}`;
        const full = `${item} ${more} "]"`;
        return n.min === 0 ? (n.max === 0 ? '"[" "]"' : `"[" ("]" | ${full})`) : `"[" ${full}`;
      }
      case 'any':
        return n.options.map((o) => ruleOf(o)).join(' | ');
      case 'seq':
        return n.parts.map((p) => ruleOf(p)).join(' ');
      case 'end':
        return '""';
    }
  };
  ruleOf(root);
  if (needsStr) rules.push(`${strChar} ::= [^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\bfnrt] | "u00" ("0" [0-7bef] | "1" [0-9a-f]))`);
  return rules.join('\n') + '\n';
}

/**
 * Numbers with a fraction, as the automaton writes them: 15 digits at most, no trailing zero, and below 1
 * at most 5 zeros after the point (one alternative per length of the integer part).
 */
const FRACTIONS = [
  `"0." "0"{0,5} [1-9] ([0-9]{0,6} [1-9])?`,
  ...Array.from({ length: 14 }, (_, k) => `[1-9] [0-9]{${k}} "." ([0-9]{0,${13 - k}} [1-9])`),
]
  .map((a) => `(${a})`)
  .join(' | ')
  .replace(/^/, '(')
  .concat(')');

function repeat(min: number, max: number): string {
  if (max === Infinity) return min === 0 ? '*' : `{${min},}`;
  return `{${min},${max}}`;
}

/** A GBNF string literal: quote, backslash and control characters escaped, everything else as is. */
function ebnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return out + '"';
}

// ------------------------------------------------------------------ vocabulary

/**
 * A tokenizer's vocabulary as the constraint walks it, built once per tokenizer: every token's bytes
 * in a trie (first child / next sibling, typed arrays), and the tokens that can sit inside a free
 * JSON string as a whole (no quote, backslash or control byte; well-formed UTF-8 but for a character
 * cut at either end), with what they need and add there.
 */
class Vocabulary {
  readonly size: number;
  /** Trie over every token but specials. Node 0 is the root. */
  readonly full: ByteTrie;
  /** Trie over the tokens that are not plain string content. */
  readonly rest: ByteTrie;
  /** Plain string tokens: id, continuation bytes they start with, characters they start, and their length. */
  readonly plainIds: Int32Array;
  readonly plainLead: Uint8Array;
  readonly plainChars: Int32Array;
  readonly plainAllCont: Uint8Array;
  readonly bytes: (Uint8Array | null)[];
  /** The most UTF-16 units one plain token adds to a string. */
  readonly maxPlainChars: number;
  /** Per pending continuation count: the plain tokens that fit when the string's length does not limit them. */
  private readonly fitting: (Int32Array | undefined)[] = [];

  plainFitting(pending: number): Int32Array {
    let list = this.fitting[pending];
    if (!list) {
      const ids: number[] = [];
      for (let k = 0; k < this.plainIds.length; k++) {
        const lead = this.plainLead[k];
        if (pending === 0 ? lead === 0 : this.plainAllCont[k] ? lead <= pending : lead === pending) ids.push(this.plainIds[k]);
      }
      list = Int32Array.from(ids);
      this.fitting[pending] = list;
    }
    return list;
  }

  constructor(tok: ConstraintTokenizer) {
    this.size = tok.vocabSize;
    const bytes: (Uint8Array | null)[] = new Array(this.size).fill(null);
    const encoder = new TextEncoder();
    for (let id = 0; id < this.size; id++) {
      if (tok.isSpecial?.(id)) continue;
      let b: Uint8Array | null = null;
      try {
        b = tok.tokenBytes ? tok.tokenBytes(id) : encoder.encode(tok.decode([id]));
      } catch {
        b = null; // ids the vocabulary does not use
      }
      if (b && b.length > 0) bytes[id] = b;
    }
    this.bytes = bytes;
    const plain: number[] = [];
    const lead: number[] = [];
    const chars: number[] = [];
    const allCont: number[] = [];
    const restIds: number[] = [];
    bytes.forEach((b, id) => {
      if (!b) return;
      const p = plainShape(b);
      if (!p) {
        restIds.push(id);
        return;
      }
      plain.push(id);
      lead.push(p.lead);
      chars.push(p.chars);
      allCont.push(p.lead === b.length ? 1 : 0);
    });
    this.plainIds = Int32Array.from(plain);
    this.plainLead = Uint8Array.from(lead);
    this.plainChars = Int32Array.from(chars);
    this.plainAllCont = Uint8Array.from(allCont);
    this.maxPlainChars = chars.reduce((m, c) => Math.max(m, c), 0);
    this.full = new ByteTrie(bytes, null);
    this.rest = new ByteTrie(bytes, restIds);
  }
}

/** For a token that can sit inside a JSON string as a whole: its leading continuation bytes and the characters it starts. */
function plainShape(b: Uint8Array): { lead: number; chars: number } | null {
  let k = 0;
  while (k < b.length && b[k] >= 0x80 && b[k] <= 0xbf) k++;
  if (k > 3) return null;
  let chars = 0;
  let pending = 0;
  let range = 0;
  for (let j = k; j < b.length; j++) {
    const x = b[j];
    if (pending > 0) {
      const [lo, hi] = CONT_RANGES[range];
      if (x < lo || x > hi) return null;
      pending--;
      range = 0;
      continue;
    }
    if (x < 0x20 || x === 0x22 || x === 0x5c) return null;
    chars += x >= 0xf0 ? 2 : 1;
    if (x >= 0x80) {
      pending = utf8Continuations(x);
      if (pending === 0) return null;
      range = firstContRange(x);
    }
  }
  return { lead: k, chars };
}

class ByteTrie {
  readonly byte: Uint8Array;
  readonly firstChild: Int32Array;
  readonly nextSibling: Int32Array;
  /** First token whose bytes end at the node (-1 none); tokenNext links tokens with equal bytes. */
  readonly firstToken: Int32Array;
  readonly tokenNext: Int32Array;

  constructor(bytes: readonly (Uint8Array | null)[], ids: readonly number[] | null) {
    const children: Map<number, number>[] = [new Map()];
    const ends: number[][] = [[]];
    const list = ids ?? bytes.map((_, id) => id);
    for (const id of list) {
      const b = bytes[id];
      if (!b) continue;
      let node = 0;
      for (const x of b) {
        let c = children[node].get(x);
        if (c === undefined) {
          c = children.length;
          children.push(new Map());
          ends.push([]);
          children[node].set(x, c);
        }
        node = c;
      }
      ends[node].push(id);
    }
    const N = children.length;
    this.byte = new Uint8Array(N);
    this.firstChild = new Int32Array(N).fill(-1);
    this.nextSibling = new Int32Array(N).fill(-1);
    this.firstToken = new Int32Array(N).fill(-1);
    this.tokenNext = new Int32Array(bytes.length).fill(-1);
    for (let node = 0; node < N; node++) {
      let prev = -1;
      for (const [x, c] of [...children[node]].sort((a, b) => a[0] - b[0])) {
        this.byte[c] = x;
        if (prev < 0) this.firstChild[node] = c;
        else this.nextSibling[prev] = c;
        prev = c;
      }
      let prevTok = -1;
      for (const id of ends[node]) {
        if (prevTok < 0) this.firstToken[node] = id;
        else this.tokenNext[prevTok] = id;
        prevTok = id;
      }
    }
  }

  /** Pushes onto `out` every token whose bytes, fed to the automaton from `f`, keep it alive. */
  walk(f: Frame, out: number[]): void {
    const visit = (node: number, state: Frame): void => {
      for (let c = this.firstChild[node]; c >= 0; c = this.nextSibling[c]) {
        const next = step(state, this.byte[c]);
        if (!next) continue;
        for (let id = this.firstToken[c]; id >= 0; id = this.tokenNext[id]) out.push(id);
        if (this.firstChild[c] >= 0) visit(c, next);
      }
    };
    visit(0, f);
  }
}

const vocabularies = new WeakMap<object, Vocabulary>();

function vocabularyOf(tok: ConstraintTokenizer): Vocabulary {
  let v = vocabularies.get(tok);
  if (!v) {
    v = new Vocabulary(tok);
    vocabularies.set(tok, v);
  }
  return v;
}

// ------------------------------------------------------------------ constraints

/** A TokenConstraint from a grammar: what the engines take, plus what lets a server without it constrain too. */
export interface JsonTokenConstraint extends TokenConstraint {
  /** Every text the constraint allows (without the end token) when they are few enough, else null. */
  finiteTexts(): string[] | null;
  /** Whether `text` (without the end token) is one of the constraint's texts. */
  accepts(text: string): boolean;
  /** Whether these bytes begin one of the constraint's texts (a stream's text so far may still become one). */
  acceptsPrefix(bytes: Uint8Array): boolean;
  /** The texts as EBNF for a server that constrains by grammar (vLLM); a subset of what allowedAfter allows. */
  grammar(): string;
}

const STATE_CACHE_LIMIT = 4096;

class GrammarConstraint implements JsonTokenConstraint {
  private readonly vocab: Vocabulary;
  private readonly start: Frame;
  /** States by prefix (ids joined): each step of a row extends the last one by a token. */
  private readonly states = new Map<string, Frame | null>();
  private finite: string[] | null | undefined;

  constructor(
    private readonly root: GNode,
    tokenizer: ConstraintTokenizer,
    private readonly endTokens: readonly number[],
    private readonly finiteLimit: number,
  ) {
    if (endTokens.length === 0) throw new Error('json constraint: give the end-of-turn token id (endTokens)');
    this.vocab = vocabularyOf(tokenizer);
    this.start = enter(root, END);
  }

  finiteTexts(): string[] | null {
    if (this.finite === undefined) this.finite = sentences(this.root, this.finiteLimit);
    return this.finite ? [...this.finite] : null;
  }

  accepts(text: string): boolean {
    const f = feedBytes(this.start, utf8(text));
    return f !== null && complete(f);
  }

  acceptsPrefix(bytes: Uint8Array): boolean {
    return feedBytes(this.start, bytes) !== null;
  }

  grammar(): string {
    return toEbnf(this.root);
  }

  private stateAfter(prefix: readonly number[]): Frame | null {
    if (prefix.length === 0) return this.start;
    const key = prefix.join(',');
    const known = this.states.get(key);
    if (known !== undefined) return known;
    const before = this.stateAfter(prefix.slice(0, -1));
    const last = prefix[prefix.length - 1];
    const b = last >= 0 && last < this.vocab.size ? this.vocab.bytes[last] : null;
    const state = before && b ? feedBytes(before, b) : null;
    if (this.states.size >= STATE_CACHE_LIMIT) this.states.clear();
    this.states.set(key, state);
    return state;
  }

  allowedAfter(prefix: readonly number[]): number[] {
    const f = this.stateAfter(prefix);
    if (!f) return [];
    const out: number[] = [];
    const top = f.n;
    // Inside a free string (but right after a lead byte that narrows the next byte, rare: walk all).
    if (top.k === 'string' && (f.s & 15) === 1 && f.s >> 6 === 0) {
      // The plain tokens in bulk, the rest by walking.
      const v = this.vocab;
      const pending = (f.s >> 4) & 3;
      const room = top.max - f.i;
      if (room >= v.maxPlainChars) for (const id of v.plainFitting(pending)) out.push(id);
      else
        for (let k = 0; k < v.plainIds.length; k++) {
          const lead = v.plainLead[k];
          const fits = pending === 0 ? lead === 0 : v.plainAllCont[k] ? lead <= pending : lead === pending;
          if (fits && v.plainChars[k] <= room) out.push(v.plainIds[k]);
        }
      v.rest.walk(f, out);
    } else {
      this.vocab.full.walk(f, out);
    }
    if (complete(f)) out.push(this.endTokens[0]);
    return out;
  }
}

function feedBytes(f: Frame, bytes: Uint8Array): Frame | null {
  let g: Frame | null = f;
  for (let k = 0; k < bytes.length && g; k++) g = step(g, bytes[k]);
  return g;
}

/** Options common to the constraints below. */
export interface ConstraintBase {
  tokenizer: ConstraintTokenizer;
  /** The first ends the answer (as the allowed-texts trie ends each text with it). */
  endTokens: readonly number[];
  /** finiteTexts() gives null above this many texts (default 100,000). */
  finiteLimit?: number;
}

/** A function tool as the constraint needs it (openai/'s FunctionTool fits). */
export interface ToolSpec {
  name: string;
  /** JSON Schema of the arguments; absent: no arguments (`{}`). */
  parameters?: JsonSchemaObject;
}

/** How a model writes a tool call (vLLM's tool parsers of the same names). */
export type ToolCallFormat = 'hermes' | 'llama3_json';

export interface ToolCallConstraintOptions extends ConstraintBase {
  tools: readonly ToolSpec[];
  /** `required`: a call of any one of the tools; `{name}`: a call of that one. */
  choice: 'required' | { name: string };
  parser: ToolCallFormat;
}

/**
 * The answer is exactly one call of one of the tools, its arguments valid for the tool's schema, then
 * the end token. hermes (vLLM's hermes parser, Qwen2.5's template):
 * `<tool_call>\n{"name": "get", "arguments": {"x": 1}}\n</tool_call>`; llama3_json:
 * `{"name": "get", "parameters": {"x": 1}}`. Throws JsonSchemaError (path `tools[i].parameters…`) for
 * a schema it cannot constrain.
 */
export function toolCallConstraint(o: ToolCallConstraintOptions): JsonTokenConstraint {
  return new GrammarConstraint(toolCallGrammar(o.tools, o.choice, o.parser), o.tokenizer, o.endTokens, o.finiteLimit ?? 100_000);
}

function toolCallGrammar(tools: readonly ToolSpec[], choice: ToolCallConstraintOptions['choice'], parser: ToolCallFormat): GNode {
  if (parser !== 'hermes' && parser !== 'llama3_json')
    throw new Error(`tool call constraint: unknown parser ${JSON.stringify(parser)} (hermes, llama3_json)`);
  const chosen = tools.map((t, i) => ({ t, i })).filter(({ t }) => choice === 'required' || t.name === choice.name);
  if (chosen.length === 0)
    throw new JsonSchemaError(
      choice === 'required' ? 'tools' : 'tool_choice.name',
      choice === 'required' ? 'tool_choice "required" needs at least one tool' : `names "${choice.name}", which is not one of the tools`,
    );
  const argsKey = parser === 'hermes' ? 'arguments' : 'parameters';
  const [open, close] = parser === 'hermes' ? ['<tool_call>\n', '}\n</tool_call>'] : ['', '}'];
  const trie = new LitTrie();
  const then: GNode[] = [];
  chosen.forEach(({ t, i }, k) => {
    if (typeof t.name !== 'string' || t.name.length === 0) throw new JsonSchemaError(`tools[${i}].name`, 'must be a non-empty string');
    const args = t.parameters === undefined ? lit('{}') : compileSchema(t.parameters, `tools[${i}].parameters`);
    trie.add(`${open}{"name": ${JSON.stringify(t.name)}, "${argsKey}": `, k, `tools[${i}].name`);
    then.push(seq([args, lit(close)]));
  });
  return { k: 'switch', trie, then };
}

/** A `response_format` that constrains: any JSON object, or JSON valid for a schema. */
export type JsonFormat = { type: 'json_object' } | { type: 'json_schema'; schema: JsonSchemaObject };

/**
 * The answer is one JSON value in canonical form, then the end token: for json_object any object,
 * for json_schema one valid for the schema (JsonSchemaError, path `response_format.schema…`, for a schema
 * it cannot constrain).
 */
export function jsonFormatConstraint(format: JsonFormat, o: ConstraintBase): JsonTokenConstraint {
  let root: GNode;
  if (format.type === 'json_object') root = { k: 'map', value: genericValue() };
  else if (format.type === 'json_schema') root = compileSchema(format.schema, 'response_format.schema');
  else throw new Error(`json constraint: unknown format type ${JSON.stringify((format as { type: unknown }).type)}`);
  return new GrammarConstraint(root, o.tokenizer, o.endTokens, o.finiteLimit ?? 100_000);
}

/** Checks that a schema can be constrained; throws JsonSchemaError naming the keyword and where (`where` prefixes the path). */
export function checkConstrainableSchema(schema: unknown, where = '$'): void {
  compileSchema(schema, where);
}

// ------------------------------------------------------------------ helpers

const encoder = new TextEncoder();
function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, k) => from + k);
}
