/**
 * `model.engine: auto`: which engine runs the policy. Models the project builds (and any model under
 * REAL_MODEL_PARAMETERS) run in process on the tfjs engine: no worker to start, and they fit its heap.
 * Real models run on the PyTorch worker on CPU: on SmolLM2-135M it measured faster than the tfjs engine
 * here (results/smollm2-speed: evaluation 0.40 against 0.49 s per step; scoring and LoRA steps 0.4–0.7× the
 * worker's rate), and the tfjs engine's 32-bit WebAssembly heap bounds the batch and sequence sizes it
 * can take.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/schema.ts';
import { parseHfConfig } from './hf/config.ts';
import { countParameters } from './tfjs/qwen2.ts';
import { PYTHON_SETUP_ADVICE, projectPython } from './torch/python.ts';

/** From this many parameters on, `auto` prefers the PyTorch worker. */
export const REAL_MODEL_PARAMETERS = 20_000_000;

export interface EngineChoice {
  engine: 'tfjs' | 'torch';
  /** Why, in a few words, for the run's first log line; null when the config named the engine. */
  reason: string | null;
}

/**
 * The engine for `cfg`, given `modelDir` (the resolved model.path: a GGUF file already imported, or null
 * for the default tiny model). `torchAvailable` is asked only when the answer depends on it.
 */
export function chooseEngine(cfg: Config, modelDir: string | null, torchAvailable: () => string | null = torchProblem): EngineChoice {
  if (cfg.model.engine !== 'auto') return { engine: cfg.model.engine, reason: null };
  if (!modelDir) return { engine: 'tfjs', reason: 'auto: the default tiny model runs in process' };
  const file = join(modelDir, 'config.json');
  if (!existsSync(file)) return { engine: 'tfjs', reason: `auto: no ${file} to size the model` };
  const parameters = countParameters(parseHfConfig(JSON.parse(readFileSync(file, 'utf8')), file));
  const size = `${(parameters / 1e6).toFixed(0)}M parameters`;
  if (parameters < REAL_MODEL_PARAMETERS) return { engine: 'tfjs', reason: `auto: ${size} run in process` };
  const problem = torchAvailable();
  if (problem) {
    return {
      engine: 'tfjs',
      reason: `auto: ${size} would run faster on the PyTorch worker, but ${problem}; running on the tfjs engine (set model.engine: tfjs to silence this)`,
    };
  }
  return { engine: 'torch', reason: `auto: ${size}, the PyTorch worker (faster than the tfjs engine for real models on CPU)` };
}

let torchChecked: { python: string; problem: string | null } | null = null;

/** Null when the project's Python imports torch, transformers and peft; else why not. Asked once per process. */
export function torchProblem(timeoutMs = 120_000): string | null {
  const python = projectPython();
  if (torchChecked?.python === python) return torchChecked.problem;
  let problem: string | null = null;
  if (!existsSync(python)) problem = `there is no Python at ${python} (${PYTHON_SETUP_ADVICE})`;
  else {
    const r = spawnSync(python, ['-c', 'import torch, transformers, peft'], { encoding: 'utf8', timeout: timeoutMs });
    // A busy machine can take minutes to import torch: that is not a missing install, and must not read as one.
    if (r.error && (r.error as NodeJS.ErrnoException).code === 'ETIMEDOUT')
      problem = `${python} did not finish importing torch, transformers and peft within ${timeoutMs / 1000} s (a busy machine?); set model.engine: torch to use the worker anyway`;
    else if (r.status !== 0) problem = `${python} cannot import torch, transformers and peft (${PYTHON_SETUP_ADVICE})`;
  }
  torchChecked = { python, problem };
  return problem;
}
