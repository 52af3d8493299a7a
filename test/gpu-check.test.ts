/**
 * bench/gpu-check.sh in its dry mode (a tiny model on the CPU, empo2 serve in vLLM's place), so
 * that the script the GPU check runs keeps working where CI has no GPU: every figure comes out as
 * a JSON line, the served rollouts used the adapter the worker saved and returned ids and
 * log-probs. And the full mode's refusals before it spends GPU time: no vLLM and no wheels, no GPU.
 */
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate, REPO_ROOT, venvPython } from './support/python.ts';

const gate = pythonGate(['torch', 'transformers', 'peft']);
const SCRIPT = join(REPO_ROOT, 'bench', 'gpu-check.sh');

function run(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', [SCRIPT, ...args], { cwd: REPO_ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => resolve({ code, out }));
  });
}

describe.skipIf(!gate.available)(`bench/gpu-check.sh (${gate.label})`, () => {
  it('--dry: the update, the worker, generate and the server with the hot-loaded adapter, one JSON line per figure', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'empo2-gpu-check-'));
    try {
      const out = join(dir, 'figures.jsonl');
      const r = await run(['--dry', '--out', out], { EMPO2_PYTHON: venvPython() });
      expect(r.code, r.out).toBe(0);
      const lines = readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const figure = (name: string, engine?: string) =>
        lines.find((l) => l.figure === name && (engine === undefined || l.engine === engine));
      // Every line names the versions that produced it (vLLM is bounded from below only in bench/requirements-gpu.txt).
      for (const l of lines)
        expect(l).toMatchObject({
          check: 'gpu-check',
          mode: 'dry',
          model: 'tiny',
          device: 'cpu',
          torch: expect.any(String),
          transformers: expect.any(String),
          peft: expect.any(String),
        });
      expect(figure('update_tokens_per_s')).toMatchObject({ unit: 'tokens/s', tokens: 160, sequences: 4 });
      expect(figure('update_tflops').unit).toBe('TFLOP/s');
      for (const engine of ['hf_generate', 'worker', 'empo2_serve']) {
        const f = figure('generate_tokens_per_s', engine);
        expect(f, engine).toMatchObject({ episodes: 4, prompt_tokens: 32, new_tokens: 8, tokens: 32 });
        expect(f.value).toBeGreaterThan(0);
        if (engine !== 'hf_generate') expect(f.ratio_to_hf_generate).toBeGreaterThan(0);
      }
      expect(figure('generate_tokens_per_s', 'empo2_serve')).toMatchObject({ adapter: 'gpu-check', ids_and_logprobs: true });
      expect(figure('total_seconds').value).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it('the full check refuses to start without vLLM or its wheels, saying how to prepare them; and without a GPU', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'empo2-wheels-'));
    try {
      const noVllm = await run([], { EMPO2_GPU_PYTHON: venvPython(), EMPO2_WHEELS: empty });
      expect(noVllm.code).toBe(2);
      expect(noVllm.out).toContain(`has no vllm and ${empty} holds no vllm wheel`);
      expect(noVllm.out).toContain('pip download -d bench/wheels -r bench/requirements-gpu.txt');
      const noGpu = await run(['--skip-vllm'], { EMPO2_GPU_PYTHON: venvPython(), EMPO2_WHEELS: empty });
      expect(noGpu.code).toBe(2);
      expect(noGpu.out).toMatch(/torch sees no GPU \(--dry runs the CPU check\)/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  }, 120_000);
});
