import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Tokenizer, trainByteLevelBPE, type ByteLevelBPEJSON } from './tokenizer.ts';

const workDir = mkdtempSync(join(tmpdir(), 'empo2-tokenizer-'));
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];

/** Small deterministic PRNG (mulberry32) so the corpus and the random texts are the same every run. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  'you are in the kitchen . there is a fridge , a stove and a table here . ' +
  'open the fridge ; take the apple ; go to the garden ; look around ; inventory ; ' +
  'the door is closed . the thermometer reads 23 degrees . score : 10 / 100 . ' +
  'search [ red running shoes ] click < buy now > price : $ 19.99 rating 4.5 ' +
  'naïve café résumé über straße Ελληνικά русский 日本語 中文 한국어 🙂 🚀 ✨ '
).split(' ');

/** Documents that look like agent transcripts: English, punctuation, numbers, some Unicode. */
function makeCorpus(documents: number, seed: number): string[] {
  const random = prng(seed);
  const corpus: string[] = [];
  for (let d = 0; d < documents; d++) {
    const words: string[] = [];
    const length = 20 + Math.floor(random() * 60);
    for (let i = 0; i < length; i++) {
      if (random() < 0.3) {
        // Made-up words, so there are more pairs to merge than a fixed word list offers.
        const letters = 2 + Math.floor(random() * 6);
        words.push(Array.from({ length: letters }, () => 'etaoinshrdlucmfw'[Math.floor(random() * 16)]).join(''));
      } else {
        words.push(WORDS[Math.floor(random() * WORDS.length)]);
      }
      if (random() < 0.05) words.push('\n');
    }
    corpus.push(words.join(' '));
  }
  return corpus;
}

/** Random strings over a wide spread of code points, whitespace runs and special tokens. */
function makeRandomTexts(count: number, seed: number): string[] {
  const random = prng(seed);
  const pieces = [' ', '  ', '\n', '\n\n', '\t', '\r\n', "'s", "'ll", '123', '4567', '.', ',', '!?', '\u00a0', '\ufeff', '\u0000'];
  const texts: string[] = [];
  for (let t = 0; t < count; t++) {
    let text = '';
    const length = Math.floor(random() * 40);
    for (let i = 0; i < length; i++) {
      const roll = random();
      if (roll < 0.3) text += pieces[Math.floor(random() * pieces.length)];
      else if (roll < 0.55) text += String.fromCharCode(0x61 + Math.floor(random() * 26));
      else if (roll < 0.75) text += WORDS[Math.floor(random() * WORDS.length)];
      else {
        // Any code point outside the surrogate range, including 4-byte ones.
        let codePoint = Math.floor(random() * 0x10ffff);
        if (codePoint >= 0xd800 && codePoint <= 0xdfff) codePoint = 0x1f600;
        text += String.fromCodePoint(codePoint);
      }
    }
    texts.push(text);
  }
  return texts;
}

const corpus = makeCorpus(400, 1);
const trained = trainByteLevelBPE(corpus, { vocabSize: 600, specialTokens: SPECIALS });
const tokenizer = Tokenizer.fromJSON(trained, 'trained tokenizer');

describe('trainByteLevelBPE', () => {
  it('merges the most frequent pair first, breaking ties by the smaller pair of ids', () => {
    // Pre-tokens: "xy" once, " xy" twice, " zw" once. Pair counts: (x,y)=3, (Ġ,x)=2, (Ġ,z)=1, (z,w)=1.
    const json = trainByteLevelBPE(['xy xy xy zw'], { vocabSize: 300, specialTokens: ['<|endoftext|>'], minFrequency: 2 });
    expect(json.model.merges).toEqual([
      ['x', 'y'], // 3 occurrences
      ['Ġ', 'xy'], // then " xy" twice; every other pair is seen once, below minFrequency
    ]);
    expect(Object.keys(json.model.vocab)).toHaveLength(1 + 256 + 2);
    expect(json.model.vocab['xy']).toBe(257);
    expect(json.model.vocab['Ġxy']).toBe(258);

    // Pre-tokens: low, " lower", " lowest", " newer", " wider", " new" x2, aaa, " aaaa".
    // (a,a) appears 2 + 3 = 5 times; then (e,r), (e,w), (l,o), (o,w), (w,e), (n,e) ... all 3 times:
    // the tie goes to the pair whose ids are smallest, i.e. alphabetical here.
    const words = trainByteLevelBPE(['low lower lowest newer wider new new', 'aaa aaaa'], {
      vocabSize: 262,
      specialTokens: SPECIALS.slice(0, 2),
    });
    expect(words.model.merges).toEqual([
      ['a', 'a'],
      ['e', 'r'],
      ['e', 'w'],
      ['l', 'o'],
    ]);
  });

  it('gives special tokens the first ids and byte symbols the next 256, in code point order', () => {
    expect(trained.added_tokens.map((t) => [t.content, t.id, t.special])).toEqual([
      ['<|endoftext|>', 0, true],
      ['<|im_start|>', 1, true],
      ['<|im_end|>', 2, true],
    ]);
    expect(trained.model.vocab['!']).toBe(3);
    expect(trained.model.vocab['Ġ']).toBe(3 + 188 + 32); // after the 188 visible bytes come bytes 0x00.. moved to U+0100..; space is 0x20
    expect(trained.model.vocab['Ń']).toBe(3 + 255);
  });

  it('produces exactly vocabSize tokens with ids 0..vocabSize-1', () => {
    for (const vocabSize of [259, 300, 600]) {
      const json = trainByteLevelBPE(corpus, { vocabSize, specialTokens: SPECIALS });
      const ids = Object.values(json.model.vocab).sort((a, b) => a - b);
      expect(ids).toEqual(Array.from({ length: vocabSize }, (_, i) => i));
      expect(Tokenizer.fromJSON(json).vocabSize).toBe(vocabSize);
    }
  });

  it('learns no merges across special tokens', () => {
    const json = trainByteLevelBPE(Array(50).fill('<|im_start|>hi<|im_end|>'), { vocabSize: 300, specialTokens: SPECIALS });
    const learned = Object.keys(json.model.vocab).filter((token) => json.model.vocab[token] >= 259);
    expect(learned).toEqual(['hi']);
  });

  it('stops early when no pair is frequent enough', () => {
    const json = trainByteLevelBPE(['abc'], { vocabSize: 1000, specialTokens: [], minFrequency: 2 });
    expect(json.model.merges).toEqual([]);
    expect(Object.keys(json.model.vocab)).toHaveLength(256);
  });

  it('rejects bad options with a clear message', () => {
    expect(() => trainByteLevelBPE(corpus, { vocabSize: 200, specialTokens: SPECIALS })).toThrow(
      /vocabSize must be an integer >= 259 \(3 special tokens \+ 256 byte symbols\), got 200/,
    );
    expect(() => trainByteLevelBPE(corpus, { vocabSize: 300, specialTokens: ['<a>', '<a>'] })).toThrow(/"<a>" is listed twice/);
    expect(() => trainByteLevelBPE(corpus, { vocabSize: 300, specialTokens: [''] })).toThrow(/non-empty strings/);
    expect(() => trainByteLevelBPE([42 as unknown as string], { vocabSize: 300, specialTokens: [] })).toThrow(/corpus item 0 is a number/);
  });
});

describe('Tokenizer', () => {
  it('round-trips arbitrary text through encode and decode', () => {
    const texts = [
      '',
      ' ',
      'Hello, world!',
      '  leading and trailing  ',
      'tabs\tand\nnew\nlines\r\n\n\n',
      'naïve café — “quotes” … 日本語のテキスト 🙂👍🏽 👨‍👩‍👧 e\u0301',
      '\ufeffstarts with a byte order mark',
      "it's they'll I'm 3.14159 1,000,000",
      ...makeRandomTexts(200, 7),
    ];
    for (const text of texts) {
      expect(tokenizer.decode(tokenizer.encode(text)), JSON.stringify(text)).toBe(text);
    }
  });

  it('splits on whitespace as Rust tokenizers does (Unicode White_Space), not as JavaScript \\s does', () => {
    // "a   b" pre-tokenizes as "a", "  ", " b": this learns the merges " b" and "  ".
    const spaces = Tokenizer.fromJSON(trainByteLevelBPE(['a   b'], { vocabSize: 258, specialTokens: [] }));
    const doubleSpace = spaces.requireTokenId('ĠĠ');
    // U+0085 is whitespace: "  \u0085" is one pre-token, so the two spaces merge.
    expect(spaces.encode('x  \u0085')).toContain(doubleSpace);
    // U+FEFF is not: the second space joins it and the first stands alone.
    expect(spaces.encode('x  \ufeff')).not.toContain(doubleSpace);
    expect(
      spaces
        .encode('x  \ufeff')
        .map((id) => spaces.idToToken(id))
        .slice(0, 3),
    ).toEqual(['x', 'Ġ', 'Ġ']);
  });

  it('compresses the text it was trained on', () => {
    const sample = corpus.slice(0, 50).join('\n');
    const bytes = new TextEncoder().encode(sample).length;
    expect(bytes / tokenizer.encode(sample).length).toBeGreaterThan(2.5);
  });

  it('encodes each special token as one id, wherever it appears', () => {
    const start = tokenizer.requireTokenId('<|im_start|>');
    const end = tokenizer.requireTokenId('<|im_end|>');
    expect(tokenizer.specialIds).toEqual(
      new Map([
        ['<|endoftext|>', 0],
        ['<|im_start|>', 1],
        ['<|im_end|>', 2],
      ]),
    );
    for (const special of SPECIALS) expect(tokenizer.encode(special)).toEqual([tokenizer.requireTokenId(special)]);

    const ids = tokenizer.encode('<|im_start|>user\nopen the fridge<|im_end|>\n<|im_start|>assistant\n');
    expect(ids[0]).toBe(start);
    expect(ids.filter((id) => id === start)).toHaveLength(2);
    expect(ids.filter((id) => id === end)).toHaveLength(1);
    expect(tokenizer.decode(ids)).toBe('<|im_start|>user\nopen the fridge<|im_end|>\n<|im_start|>assistant\n');
    expect(tokenizer.decode(ids, { skipSpecial: true })).toBe('user\nopen the fridge\nassistant\n');
    // Glued to other text, a special token is still split out.
    expect(tokenizer.encode('abc<|endoftext|>def')).toContain(0);
  });

  it('maps between tokens and ids', () => {
    const id = tokenizer.requireTokenId('Ġthe');
    expect(tokenizer.idToToken(id)).toBe('Ġthe');
    expect(tokenizer.tokenToId('no such token')).toBeUndefined();
    expect(tokenizer.idToToken(tokenizer.vocabSize)).toBeUndefined();
    expect(() => tokenizer.requireTokenId('no such token')).toThrow(/trained tokenizer: token "no such token" is not in the vocabulary/);
    expect(() => tokenizer.decode([1, 600])).toThrow(/decode: ids\[1\]: 600 is not a token id \(vocabulary size 600\)/);
    expect(() => tokenizer.decode([0.5])).toThrow(/not a token id/);
  });

  it('gives the exact bytes of every token', () => {
    expect(Array.from(tokenizer.tokenBytes(tokenizer.requireTokenId('Ġthe')))).toEqual([0x20, 0x74, 0x68, 0x65]);
    expect(new TextDecoder().decode(tokenizer.tokenBytes(1))).toBe('<|im_start|>');
    // Every byte symbol maps back to its byte.
    const byteIds = Array.from({ length: 256 }, (_, byte) => tokenizer.encode(new TextDecoder('latin1').decode(Uint8Array.of(byte))));
    expect(tokenizer.tokenBytes(tokenizer.encode('\n')[0])).toEqual(Uint8Array.of(0x0a));
    expect(byteIds.length).toBe(256);

    for (const text of makeRandomTexts(50, 11)) {
      const ids = tokenizer.encode(text);
      const bytes = ids.flatMap((id) => Array.from(tokenizer.tokenBytes(id)));
      expect(new TextDecoder('utf-8', { ignoreBOM: true }).decode(Uint8Array.from(bytes))).toBe(text);
    }
  });

  it('decodes incrementally without ever emitting half a character', () => {
    // With few merges, a 4-byte emoji is several tokens: the stream must hold its bytes back.
    const small = Tokenizer.fromJSON(trainByteLevelBPE(corpus, { vocabSize: 300, specialTokens: SPECIALS }));
    const texts = ['🚀 liftoff 👨‍👩‍👧 <|im_end|>', '日本語<|im_start|>中文', ...makeRandomTexts(100, 3)];
    for (const text of texts) {
      const ids = small.encode(text);
      const stream = small.streamDecoder();
      const pieces = ids.map((id) => stream.push(id));
      pieces.push(stream.finish());
      expect(pieces.join('')).toBe(small.decode(ids));
      expect(stream.text).toBe(text);
      for (const piece of pieces) expect(piece).not.toContain('\ufffd');
    }
    const emojiIds = small.encode('🚀');
    expect(emojiIds.length).toBeGreaterThan(1);

    const skipping = small.streamDecoder({ skipSpecial: true });
    const ids = small.encode('<|im_start|>hi<|im_end|>');
    expect(ids.map((id) => skipping.push(id)).join('') + skipping.finish()).toBe('hi');
  });

  it('saves to a file that reloads to identical encodings', () => {
    const path = join(workDir, 'nested', 'dir', 'tokenizer.json');
    tokenizer.save(path);
    const reloaded = Tokenizer.fromFile(path);
    expect(reloaded.toJSON()).toEqual(tokenizer.toJSON());
    expect(reloaded.vocabSize).toBe(tokenizer.vocabSize);
    for (const text of [...corpus.slice(0, 20), ...makeRandomTexts(50, 5)]) {
      expect(reloaded.encode(text)).toEqual(tokenizer.encode(text));
    }
    // A directory holding tokenizer.json loads too.
    expect(Tokenizer.fromFile(join(workDir, 'nested', 'dir')).encode('the fridge')).toEqual(tokenizer.encode('the fridge'));
  });

  it('writes the schema Python tokenizers saves', () => {
    const json = tokenizer.toJSON() as unknown as ByteLevelBPEJSON;
    expect(Object.keys(json).sort()).toEqual(
      ['added_tokens', 'decoder', 'model', 'normalizer', 'padding', 'post_processor', 'pre_tokenizer', 'truncation', 'version'].sort(),
    );
    expect(json.pre_tokenizer).toEqual({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true });
    expect(json.model.type).toBe('BPE');
    expect(json.model.merges[0]).toHaveLength(2);
  });
});

describe('loading other byte-level BPE tokenizers', () => {
  const qwenSplit =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const byteLevelNoRegex = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  /** The trained vocabulary dressed as Qwen2 ships it: special tokens after the vocabulary, Split + ByteLevel, NFC. */
  function qwenStyle(): Record<string, unknown> {
    const base = trainByteLevelBPE(corpus, { vocabSize: 600, specialTokens: [] });
    const added = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'].map((content, i) => ({
      id: 600 + i,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    }));
    return {
      ...base,
      added_tokens: added,
      normalizer: { type: 'NFC' },
      pre_tokenizer: {
        type: 'Sequence',
        pretokenizers: [{ type: 'Split', pattern: { Regex: qwenSplit }, behavior: 'Isolated', invert: false }, byteLevelNoRegex],
      },
      post_processor: byteLevelNoRegex,
      decoder: byteLevelNoRegex,
    };
  }

  it('handles a Qwen2-style tokenizer.json', () => {
    const qwen = Tokenizer.fromJSON(qwenStyle(), 'qwen-style');
    expect(qwen.vocabSize).toBe(603);
    expect(qwen.specialIds.get('<|im_end|>')).toBe(602);
    const chat = '<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nlook 12345<|im_end|>';
    const ids = qwen.encode(chat);
    expect(ids.filter((id) => id >= 600)).toEqual([601, 602, 601, 602]);
    expect(qwen.decode(ids)).toBe(chat);
    // Qwen2 splits numbers into single digits.
    expect(qwen.encode('12345').map((id) => qwen.idToToken(id))).toEqual(['1', '2', '3', '4', '5']);
    for (const text of makeRandomTexts(50, 9)) expect(qwen.decode(qwen.encode(text))).toBe(text.normalize('NFC'));
  });

  it('splits digits one by one as Rust tokenizers does (any Unicode number, not only ASCII 0-9)', () => {
    // Trained without the digit split, the vocabulary holds merges across digits ("٣٤", "12").
    const base = trainByteLevelBPE(Array(20).fill('٣٤ ٣٤٥ x²³ ½¼ 12 123'), { vocabSize: 320, specialTokens: [] });
    const digitsFirst = Tokenizer.fromJSON({
      ...base,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, base.pre_tokenizer] },
    });
    // Each digit is encoded on its own: the ids are those of the digits encoded one at a time.
    const oneByOne = (text: string) => [...text].flatMap((c) => digitsFirst.encode(c));
    expect(digitsFirst.encode('123')).toEqual(oneByOne('123'));
    expect(digitsFirst.encode('123').length).toBe(3);
    // char::is_numeric is \p{N}: Arabic-Indic digits, superscripts and fractions are numbers too.
    for (const text of ['٣٤٥', '²³', '½¼']) expect(digitsFirst.encode(text), text).toEqual(oneByOne(text));
    expect(digitsFirst.decode(digitsFirst.encode('x²³ ٣٤٥'))).toBe('x²³ ٣٤٥');
  });

  it('adds BOS only when a Llama-3-style post-processor asks and addSpecialTokens is not false', () => {
    const json = qwenStyle();
    json.added_tokens = [
      { id: 600, content: '<|begin_of_text|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    ];
    json.post_processor = {
      type: 'Sequence',
      processors: [
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
        {
          type: 'TemplateProcessing',
          single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
          pair: [],
          special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [600], tokens: ['<|begin_of_text|>'] } },
        },
      ],
    };
    const llama = Tokenizer.fromJSON(json);
    const plain = llama.encode('open the door', { addSpecialTokens: false });
    expect(llama.encode('open the door')).toEqual([600, ...plain]);
    expect(plain).not.toContain(600);
    expect(llama.decode(llama.encode('open the door'), { skipSpecial: true })).toBe('open the door');
  });

  it('names the file and the problem when loading fails', () => {
    const missing = join(workDir, 'missing.json');
    expect(() => Tokenizer.fromFile(missing)).toThrow(`tokenizer file not found: ${missing}`);

    const broken = join(workDir, 'broken.json');
    writeFileSync(broken, '{"model": ');
    expect(() => Tokenizer.fromFile(broken)).toThrow(new RegExp(`${broken}: invalid JSON`));

    const wordPiece = join(workDir, 'wordpiece.json');
    writeFileSync(wordPiece, JSON.stringify({ model: { type: 'WordPiece', vocab: { a: 0 } }, decoder: { type: 'WordPiece' } }));
    expect(() => Tokenizer.fromFile(wordPiece)).toThrow(
      `${wordPiece}: unsupported model type "WordPiece"; only byte-level BPE tokenizers are supported`,
    );

    const metaspace = { ...trained, decoder: { type: 'Metaspace', replacement: '▁' } };
    expect(() => Tokenizer.fromJSON(metaspace, 'sp.json')).toThrow(/sp.json: decoder is "Metaspace", not ByteLevel/);
    expect(() => Tokenizer.fromJSON([], 'list.json')).toThrow(/list.json: expected a tokenizer.json object, got an array/);
    expect(() => Tokenizer.fromJSON({ ...trained, model: { ...trained.model, vocab: { a: -1 } } }, 'neg.json')).toThrow(
      /neg.json: model.vocab\["a"\] is -1, not a token id/,
    );
    expect(() => Tokenizer.fromJSON({ ...trained, added_tokens: [{ content: 'x' }] }, 'added.json')).toThrow(
      /added.json: added_tokens\[0\] needs an integer "id"/,
    );
    const emptyDir = join(workDir, 'no-tokenizer-here');
    mkdirSync(emptyDir, { recursive: true });
    expect(() => Tokenizer.fromFile(emptyDir)).toThrow(`tokenizer file not found: ${join(emptyDir, 'tokenizer.json')}`);
  });
});

/**
 * Cross-check with Hugging Face's Python `tokenizers`, when a Python that has it is named in
 * EMPO2_TOKENIZERS_PYTHON (e.g. a virtualenv's bin/python). Skipped otherwise: nothing here
 * installs Python packages.
 */
const python = process.env.EMPO2_TOKENIZERS_PYTHON;
describe.skipIf(!python)('agreement with Python tokenizers', () => {
  const script = `
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
job = json.load(sys.stdin)
reference = Tokenizer(models.BPE())
reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
reference.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=job["vocab_size"], special_tokens=job["specials"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
reference.train_from_iterator(job["corpus"], trainer)
ours = Tokenizer.from_file(job["path"])
print(json.dumps({
  "merges": json.loads(reference.to_str())["model"]["merges"],
  "ids": [ours.encode(t).ids for t in job["texts"]],
  "decoded": [ours.decode(ours.encode(t).ids, skip_special_tokens=False) for t in job["texts"]],
}))
`;

  it('learns the same merges and encodes identically', () => {
    const path = join(workDir, 'python-check.json');
    writeFileSync(path, JSON.stringify(trained));
    const texts = [...corpus.slice(0, 30), '<|im_start|>user\nhi<|im_end|>', ...makeRandomTexts(100, 13)];
    const output = execFileSync(python!, ['-c', script], {
      input: JSON.stringify({ corpus, vocab_size: 600, specials: SPECIALS, path, texts }),
      maxBuffer: 64 * 1024 * 1024,
    });
    const result = JSON.parse(output.toString('utf8')) as { merges: [string, string][]; ids: number[][]; decoded: string[] };
    expect(trained.model.merges).toEqual(result.merges);
    expect(texts.map((t) => tokenizer.encode(t))).toEqual(result.ids);
    expect(result.decoded).toEqual(texts);
    expect(readFileSync(path, 'utf8').length).toBeGreaterThan(0);
  });
});
