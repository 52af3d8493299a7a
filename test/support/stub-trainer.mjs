// A stand-in for bin/empo2.js in test/strong-writer-run.test.ts: `train` writes what a run folder holds (metrics,
// checkpoints with a weights file, trajectories, the writer's cache, eval.md at the end) one iteration every
// STUB_ITER_MS, asking the writer on STUB_WRITER for its models before it starts; a SIGINT ends the iteration
// under way, saves it and exits 130, as the trainer's first Ctrl-C does; --resume goes on after latest.json.
// `eval` writes the --json record. Every call is appended to <run>/calls.log, and its pid to <run>/pid.
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

const args = process.argv.slice(2);
const sets = Object.fromEntries(
  args.flatMap((a, i) => (args[i - 1] === '--set' ? [[a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]] : [])),
);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const iterations = Number(process.env.STUB_ITERS ?? 8);
const pad = (k) => `iter-${String(k).padStart(6, '0')}`;

if (args[0] === 'eval') {
  const json = args[args.indexOf('--json') + 1];
  const ck = args[1];
  const state = JSON.parse(readFileSync(join(ck, 'trainer_state.json'), 'utf8'));
  const run = dirname(dirname(ck));
  appendFileSync(join(run, 'calls.log'), `eval ${args.join(' ')}\n`);
  writeFileSync(json, JSON.stringify({ checkpoint: ck.split('/').pop(), train_env_steps: state.env_steps, mean_score: 1 }));
  process.exit(0);
}

const run = sets.run_dir;
mkdirSync(join(run, 'checkpoints'), { recursive: true });
mkdirSync(join(run, 'trajectories'), { recursive: true });
writeFileSync(join(run, 'pid'), String(process.pid));
const resume = args.includes('--resume');
const writer = await fetch(`${process.env.STUB_WRITER}/models`).then(
  (r) => r.text(),
  (e) => `unreachable: ${e.message}`,
);
appendFileSync(join(run, 'calls.log'), `train${resume ? ' --resume' : ''} writer=${writer.includes('oracle-writer') ? 'ok' : writer}\n`);
let start = 0;
if (resume) start = Number(JSON.parse(readFileSync(join(run, 'checkpoints', 'latest.json'), 'utf8')).checkpoint.slice(5));
writeFileSync(join(run, 'config.yaml'), `seed: ${sets.seed}\n`);
let stop = false;
process.on('SIGINT', () => (stop = true));
for (let k = start + 1; k <= iterations; k++) {
  await sleep(Number(process.env.STUB_ITER_MS ?? 200));
  const ck = join(run, 'checkpoints', pad(k));
  mkdirSync(ck, { recursive: true });
  writeFileSync(join(ck, 'trainer_state.json'), JSON.stringify({ iteration: k, env_steps: 100 * k }));
  writeFileSync(join(ck, 'adapter.safetensors'), 'weights');
  writeFileSync(join(ck, 'memory.json'), '{"tips": []}');
  writeFileSync(join(run, 'checkpoints', 'latest.json'), JSON.stringify({ checkpoint: pad(k) }));
  appendFileSync(join(run, 'metrics.jsonl'), JSON.stringify({ type: 'train', iteration: k, tips_added: 2, tips_skipped: 1 }) + '\n');
  appendFileSync(join(run, 'external-cache.jsonl'), JSON.stringify({ key: String(k), text: 'To do it: a, then b.' }) + '\n');
  const step = (followed) => ({ tips: followed === null ? [] : [{ action: 'a' }], followed_tip: followed });
  appendFileSync(
    join(run, 'trajectories', 'train.jsonl'),
    JSON.stringify({
      type: 'episode',
      source: 'train',
      iteration: k,
      index: 0,
      mode: 'tips-off-policy',
      steps: [step(true), step(false), step(null)],
    }) + '\n',
  );
  if (stop && k < iterations) {
    appendFileSync(join(run, 'calls.log'), `stopped at ${k}\n`);
    process.exit(130);
  }
}
writeFileSync(join(run, 'eval.md'), '| score | 1 |\n');
if (!existsSync(join(run, 'eval.md'))) process.exit(1);
process.exit(0);
