/**
 * `empo2 eval`: a checkpoint or model directory played on held-out variations, by an engine of this
 * process or through an OpenAI-compatible server, printed as the evaluation table.
 */
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../../config/load.ts';
import type { Config } from '../../config/schema.ts';
import type { RemoteEngineOptions } from '../../policy/remote/index.ts';
import type { EvalResult } from '../../run/records.ts';
import { checkOutputFile } from '../output-paths.ts';
import { configFrom, modelArgument, withConfig } from '../options.ts';

export function register(program: Command): void {
  withConfig(
    program.command('eval').description('evaluate a checkpoint or model directory on held-out variations'),
    "YAML or JSON config (default: the run's config.yaml when present)",
  )
    .argument('<path>', 'a run directory (its latest checkpoint), a model directory or a .gguf file')
    .option(
      '--remote <url>',
      'generate through this OpenAI-compatible server (empo2 serve, vLLM...); <path> then only supplies tokenizer.json',
    )
    .option('--remote-model <name>', 'with --remote: the model name to request (default: the first one the server lists)')
    .option('--remote-timeout <seconds>', 'with --remote: time limit per request attempt', '120')
    .option('--json <file>', 'also write the result (with the checkpoint name and evaluation settings) to this JSON file')
    .option(
      '--trajectories <file>',
      "record the episodes played as JSON lines in this file (default: <run>/trajectories/eval-<checkpoint>.jsonl for a run's checkpoint; none for a bare model directory)",
    )
    .action(async (given: string, opts) => {
      if (opts.json) checkOutputFile(opts.json, '--json');
      if (opts.trajectories) checkOutputFile(opts.trajectories, '--trajectories');
      const { latestCheckpoint } = await import('../../run/checkpoint.ts');
      const path = await modelArgument(given);
      const runConfig = join(path, 'config.yaml');
      const cfg = configFrom(opts, existsSync(runConfig) ? runConfig : undefined);
      const modelDir = existsSync(join(path, 'checkpoints')) ? latestCheckpoint(path) : path;
      if (!modelDir) throw new Error(`${path} has no checkpoint`);
      const { defaultEvalTrajectories } = await import('../../adapt/checkpoint-eval.ts');
      const trajectories: string | undefined = opts.trajectories ?? defaultEvalTrajectories(modelDir) ?? undefined;
      if (opts.remote) {
        const timeout = Number(opts.remoteTimeout);
        if (!(timeout > 0)) throw new ConfigError(`--remote-timeout must be a positive number of seconds, got "${opts.remoteTimeout}"`);
        const remote = { baseUrl: opts.remote, model: opts.remoteModel, timeoutMs: timeout * 1000 };
        await evaluateRemote(modelDir, remote, cfg, { json: opts.json, trajectories });
        return;
      }
      await evaluateModelDir(modelDir, cfg, { json: opts.json, trajectories });
    });
}

export async function evaluateModelDir(dir: string, cfg: Config, opts: { json?: string; trajectories?: string } = {}): Promise<EvalResult> {
  // Loaded here, not at the top, so `eval --remote` does not load TensorFlow.js or the training code.
  const { createPlayingEngine, initBackend } = await import('../../policy/index.ts');
  const { evaluateEngine } = await import('../../adapt/checkpoint-eval.ts');
  await initBackend();
  const { engine, description } = await createPlayingEngine(cfg, dir);
  console.error(`empo2 eval | ${dir} | ${description}`);
  try {
    return await evaluateEngine(engine, cfg, { column: 'checkpoint', json: opts.json, modelDir: dir, trajectories: opts.trajectories });
  } finally {
    engine.dispose();
  }
}

/** `empo2 eval <model dir> --remote <url>`: every policy call answered by the server; the model directory only supplies tokenizer.json. */
export async function evaluateRemote(
  tokenizerDir: string,
  remote: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>,
  cfg: Config,
  opts: { json?: string; trajectories?: string } = {},
): Promise<void> {
  const { remoteEngineFromDir } = await import('../../policy/remote/index.ts');
  const { evaluateEngine } = await import('../../adapt/checkpoint-eval.ts');
  const engine = remoteEngineFromDir(tokenizerDir, remote);
  console.log(`evaluating "${await engine.model()}" served at ${engine.baseUrl}, tokenizer from ${tokenizerDir}`);
  try {
    await evaluateEngine(engine, cfg, { column: 'served model', json: opts.json, modelDir: tokenizerDir, trajectories: opts.trajectories });
  } finally {
    engine.dispose();
  }
}
