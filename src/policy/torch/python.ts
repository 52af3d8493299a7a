/**
 * Where the project's Python lives and where the PyTorch worker script is, for the product path
 * (test/support/python.ts has the test-side twin). The venv is made by `npm run setup:test`.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const REPO_ROOT = resolve(import.meta.dirname, '..', '..', '..');

export const TORCH_WORKER_SCRIPT = join(REPO_ROOT, 'workers', 'torch', 'worker.py');

export const PYTHON_SETUP_ADVICE =
  "run 'npm run setup:test' (creates .venv with torch, transformers and peft from scripts/requirements-torch.txt), or point EMPO2_PYTHON at a Python that has them";

/** EMPO2_PYTHON, else <EMPO2_VENV or repo/.venv>/bin/python. */
export function projectPython(): string {
  return process.env.EMPO2_PYTHON ?? join(process.env.EMPO2_VENV ?? join(REPO_ROOT, '.venv'), 'bin', 'python');
}

/** Null when the interpreter file exists, else the reason it cannot be used. */
export function pythonProblem(python: string): string | null {
  return existsSync(python) ? null : `no Python at ${python}: ${PYTHON_SETUP_ADVICE}`;
}
