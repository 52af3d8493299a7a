/**
 * `empo2 adapt`: a frozen checkpoint's memory-only adaptation to a task, by retrieved tips (EMPO²'s
 * memory) or by Reflexion's plans, played here or through an OpenAI-compatible server.
 */
import { Option, type Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../../config/load.ts';
import type { Config } from '../../config/schema.ts';
import type { PolicyEngine } from '../../policy/types.ts';
import type { TrialOptions } from '../../adapt/trials.ts';
import { checkOutputDir } from '../output-paths.ts';
import { configFrom, modelArgument, positiveInteger, withConfig } from '../options.ts';

export function register(program: Command): void {
  withConfig(
    program
      .command('adapt')
      .description(
        "memory-only adaptation: frozen weights, K trials on a task (e.g. one never trained on) with the tip memory or Reflexion's plans; score per trial printed and saved",
      ),
    "YAML or JSON config (default: the run's config.yaml when present)",
  )
    .requiredOption('--checkpoint <path>', 'a run directory (its latest checkpoint), a checkpoint / model directory or a .gguf file')
    .requiredOption('--task <name>', 'task to adapt to')
    .addOption(
      new Option(
        '--method <name>',
        "tips: EMPO²'s tip memory, retrieved at every step and written after every trial; reflexion: after a failed trial the policy writes a plan, and a variation's last plans open its next trial's prompts (Shinn et al., 2023)",
      )
        .choices(['tips', 'reflexion'])
        .default('tips'),
    )
    .option('--trials <k>', 'trials (memory grows after each)', '5')
    .option('--variations <n>', 'held-out variations played in each trial', '10')
    .option('--split <name>', 'split the variations come from (train, dev, test)', 'test')
    .option(
      '--out <dir>',
      'where adapt.json, adapt.md (and memory.json for tips) go (default: <checkpoint>/adapt-<task>, or reflexion-<task>)',
    )
    .option('--fresh-memory', "start from an empty memory instead of the checkpoint's")
    .option(
      '--new-draw-each-trial',
      'sample each trial with its own seed (default: the same seed, so only the memory differs between trials)',
    )
    .option(
      '--resume',
      'go on after the last trial an interrupted adaptation in --out finished (started with the same options); with none there, start',
    )
    .option('--remote <url>', 'generate through this OpenAI-compatible server; the checkpoint then only supplies tokenizer.json')
    .option('--remote-model <name>', 'with --remote: the model name to request')
    .option('--reflections <k>', 'with --method reflexion: plans of a variation shown in its next trial (default 3, as Reflexion)')
    .option('--reflection-max-tokens <n>', 'with --method reflexion: most tokens of one plan (default 256, as Reflexion)')
    .action(adaptAction);
}

/** The options of `empo2 adapt`, as commander hands them over. */
interface AdaptFlags {
  config?: string;
  set: string[];
  checkpoint: string;
  task: string;
  method: 'tips' | 'reflexion';
  trials: string;
  variations: string;
  split: 'train' | 'dev' | 'test';
  out?: string;
  freshMemory?: boolean;
  newDrawEachTrial?: boolean;
  resume?: boolean;
  remote?: string;
  remoteModel?: string;
  reflections?: string;
  reflectionMaxTokens?: string;
}

async function adaptAction(opts: AdaptFlags): Promise<void> {
  const { latestCheckpoint } = await import('../../run/checkpoint.ts');
  const path = await modelArgument(opts.checkpoint);
  const isRun = existsSync(join(path, 'checkpoints'));
  const runConfig = isRun ? join(path, 'config.yaml') : join(path, '..', '..', 'config.yaml');
  const cfg = configFrom(opts, existsSync(runConfig) ? runConfig : undefined);
  const dir = isRun ? latestCheckpoint(path) : path;
  if (!dir || !existsSync(dir)) throw new ConfigError(`--checkpoint ${path}: no checkpoint there`);
  if (!['train', 'dev', 'test'].includes(opts.split)) throw new ConfigError(`--split must be train, dev or test, got "${opts.split}"`);
  const reflexion = opts.method === 'reflexion';
  if (!reflexion) {
    for (const [given, flag] of [
      [opts.reflections, '--reflections'],
      [opts.reflectionMaxTokens, '--reflection-max-tokens'],
    ]) {
      if (given !== undefined) throw new ConfigError(`${flag} is for --method reflexion (this is --method ${opts.method})`);
    }
  }
  if (reflexion && opts.freshMemory)
    throw new ConfigError('--fresh-memory is for --method tips: Reflexion keeps no tip memory and starts every variation with no plans');
  const reflexionSettings = {
    window: positiveInteger(opts.reflections, '--reflections'),
    reflectionMaxTokens: positiveInteger(opts.reflectionMaxTokens, '--reflection-max-tokens'),
  };
  if (opts.out) checkOutputDir(opts.out, '--out');
  await adaptCommand(dir, cfg, {
    method: reflexion ? 'reflexion' : 'tips',
    modelIsRunConfig: existsSync(runConfig),
    remote: opts.remote ? { baseUrl: opts.remote, model: opts.remoteModel } : undefined,
    trials: {
      task: opts.task,
      trials: Number(opts.trials),
      variations: Number(opts.variations),
      split: opts.split,
      sameSeed: !opts.newDrawEachTrial,
      resume: !!opts.resume,
      source: dir,
      outDir: opts.out ?? join(dir, `${reflexion ? 'reflexion' : 'adapt'}-${opts.task}`),
    },
    reflexion: reflexionSettings,
    memoryFrom: opts.freshMemory ? null : dir,
  });
}

export interface AdaptCommandOptions {
  method: 'tips' | 'reflexion';
  /** Whether the config came from the checkpoint's run (config.yaml); if not, an instruct model's directory is its own model.path. */
  modelIsRunConfig: boolean;
  remote?: { baseUrl: string; model?: string };
  trials: TrialOptions;
  reflexion: { window?: number; reflectionMaxTokens?: number };
  /** With tips: the checkpoint whose memory to start from (null: an empty memory). */
  memoryFrom: string | null;
}

export async function adaptCommand(dir: string, cfg: Config, o: AdaptCommandOptions): Promise<void> {
  const { chatTemplateIn } = await import('../../trainer/prompt-style.ts');
  if (!o.modelIsRunConfig && !cfg.model.path && chatTemplateIn(dir)) cfg = { ...cfg, model: { ...cfg.model, path: dir } };
  let engine: PolicyEngine;
  if (o.remote) {
    const { remoteEngineFromDir } = await import('../../policy/remote/index.ts');
    engine = remoteEngineFromDir(dir, o.remote);
  } else {
    const { createPlayingEngine, initBackend } = await import('../../policy/index.ts');
    await initBackend();
    engine = (await createPlayingEngine(cfg, dir)).engine;
  }
  try {
    if (o.method === 'reflexion') {
      const { reflexion } = await import('../../adapt/reflexion.ts');
      await reflexion(engine, cfg, { ...o.trials, ...o.reflexion });
    } else {
      const { adapt } = await import('../../adapt/tips.ts');
      await adapt(engine, cfg, { ...o.trials, memoryFrom: o.memoryFrom });
    }
  } finally {
    engine.dispose();
  }
}
