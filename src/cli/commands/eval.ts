/**
 * `empo2 eval`: a checkpoint or model directory played on held-out variations, by an engine of this
 * process or through an OpenAI-compatible server, printed as the evaluation table.
 */
import { Option, type Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../../config/load.ts';
import type { Config } from '../../config/schema.ts';
import type { RemoteEngineOptions } from '../../policy/remote/index.ts';
import type { PolicyEngine } from '../../policy/types.ts';
import type { EvalOutput } from '../../adapt/checkpoint-eval.ts';
import type { ActingSettings } from '../../retrospex/actor.ts';
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
    .addOption(
      new Option(
        '--method <name>',
        "policy: the policy's own actions; retrospex: the policy proposes candidates and a critic (--critic, from empo2 critic train) rescores them (Xiang et al., 2024)",
      )
        .choices(['policy', 'retrospex'])
        .default('policy'),
    )
    .option('--critic <file>', 'with --method retrospex: the critic file')
    .option('--candidates <k>', 'with --method retrospex: answers sampled per step; their distinct actions are the candidates (default 4)')
    .option(
      '--proposal-temperature <t>',
      "with --method retrospex: sampling temperature of the candidates (default 1: the likelihoods are the model's own)",
    )
    .option('--decay <d>', "with --method retrospex: the likelihood's weight is max(b, d^t) after t steps (default d 0.95)")
    .option('--floor <b>', "with --method retrospex: the likelihood's weight never goes below b (default 0.25)")
    .option(
      '--resume',
      'go on from the lockstep chunks a stopped run of this same evaluation finished (kept in <--json or --trajectories file>.partial); refused if anything that decides the episodes differs',
    )
    .action(async (given: string, opts) => {
      if (opts.json) checkOutputFile(opts.json, '--json');
      if (opts.trajectories) checkOutputFile(opts.trajectories, '--trajectories');
      const { retrospexOption } = await import('./critic.ts');
      const retrospex = await retrospexOption(opts);
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
        await evaluateRemote(modelDir, remote, cfg, { json: opts.json, trajectories, retrospex, resume: opts.resume });
        return;
      }
      await evaluateModelDir(modelDir, cfg, { json: opts.json, trajectories, retrospex, resume: opts.resume });
    });
}

export interface EvalCommandOptions {
  json?: string;
  trajectories?: string;
  /** `--method retrospex`: the LLM's candidates rescored by this critic. */
  retrospex?: { critic: string; acting: ActingSettings };
  /** `--resume`: go on from the chunks a stopped run of the same evaluation recorded. */
  resume?: boolean;
}

/** What decides the episodes besides the config and the model's files: the engine that plays, and the critic's content. */
async function identityOf(engine: string, opts: EvalCommandOptions): Promise<Record<string, unknown>> {
  const { fileSha256 } = await import('../../adapt/eval-partial.ts');
  return { engine, ...(opts.retrospex ? { critic_sha256: fileSha256(opts.retrospex.critic) } : {}) };
}

/** The engine that plays: the policy itself, or (Retrospex) the policy's candidates rescored by a critic, which then owns the policy. */
async function playingEngine(
  engine: PolicyEngine,
  opts: EvalCommandOptions,
): Promise<{ engine: PolicyEngine; method?: EvalOutput['method']; column?: string }> {
  if (!opts.retrospex) return { engine };
  const { initBackend } = await import('../../policy/index.ts');
  const { retrospexEngine } = await import('../../retrospex/load.ts');
  try {
    await initBackend();
    const { engine: rescoring, record } = await retrospexEngine(engine, opts.retrospex.critic, opts.retrospex.acting);
    const { candidates, temperature, schedule } = record.acting;
    console.error(
      `retrospex: critic ${record.file} (${record.encoder}), ${candidates} proposals at temperature ${temperature}, λ = max(${schedule.floor}, ${schedule.decay}^t)`,
    );
    return { engine: rescoring, method: { method: 'retrospex', critic: record }, column: 'retrospex' };
  } catch (e) {
    engine.dispose();
    throw e;
  }
}

export async function evaluateModelDir(dir: string, cfg: Config, opts: EvalCommandOptions = {}): Promise<EvalResult> {
  // Loaded here, not at the top, so `eval --remote` does not load TensorFlow.js or the training code.
  const { createPlayingEngine, initBackend } = await import('../../policy/index.ts');
  const { evaluateEngine } = await import('../../adapt/checkpoint-eval.ts');
  await initBackend();
  const created = await createPlayingEngine(cfg, dir);
  console.error(`empo2 eval | ${dir} | ${created.description}`);
  const { engine, method, column } = await playingEngine(created.engine, opts);
  try {
    // The engine's kind and device ("tfjs engine", "torch worker on cpu"), not its parameter counts.
    const identity = await identityOf(created.description.split(',')[0], opts);
    const output: EvalOutput = { column: column ?? 'checkpoint', json: opts.json, modelDir: dir, trajectories: opts.trajectories };
    return await evaluateEngine(engine, cfg, { ...output, method, resume: opts.resume, identity });
  } finally {
    engine.dispose();
  }
}

/** `empo2 eval <model dir> --remote <url>`: every policy call answered by the server; the model directory only supplies tokenizer.json. */
export async function evaluateRemote(
  tokenizerDir: string,
  remote: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>,
  cfg: Config,
  opts: EvalCommandOptions = {},
): Promise<void> {
  const { remoteEngineFromDir } = await import('../../policy/remote/index.ts');
  const { evaluateEngine } = await import('../../adapt/checkpoint-eval.ts');
  const served = remoteEngineFromDir(tokenizerDir, remote);
  console.log(`evaluating "${await served.model()}" served at ${served.baseUrl}, tokenizer from ${tokenizerDir}`);
  const { engine, method, column } = await playingEngine(served, opts);
  try {
    const identity = await identityOf(`served ${await served.model()} at ${served.baseUrl}`, opts);
    const output: EvalOutput = {
      column: column ?? 'served model',
      json: opts.json,
      modelDir: tokenizerDir,
      trajectories: opts.trajectories,
    };
    await evaluateEngine(engine, cfg, { ...output, method, resume: opts.resume, identity });
  } finally {
    engine.dispose();
  }
}
