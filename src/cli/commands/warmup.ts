import type { Command } from 'commander';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../../config/load.ts';
import type { Config } from '../../config/schema.ts';
import { createEnv, environmentCorpus } from '../../envs/index.ts';
import type { TipFollowing, WarmupExample } from '../../trainer/tip-warmup.ts';
import { checkOutputDir } from '../output-paths.ts';
import { configFrom, withConfig } from '../options.ts';

export function register(program: Command): void {
  withConfig(
    program
      .command('warmup')
      .description(
        'tiny model: build it and teach it to read tips (supervised, on synthetic prompts) before RL; saves a model directory for model.path',
      ),
    'YAML or JSON config file (env, model, prompt and memory settings are used)',
  )
    .option('--seed <n>', 'shortcut for --set seed=<n>')
    .requiredOption('--out <dir>', 'directory to write the model to (config.json, model.safetensors, tokenizer.json, warmup.json)')
    .option('--examples <n>', 'synthetic prompts (default: experimental.tip_warmup_examples, or 6000 when that is 0)')
    .action(async (opts) => {
      const cfg = configFrom(opts);
      const examples = opts.examples !== undefined ? Number(opts.examples) : cfg.experimental.tip_warmup_examples || 6000;
      if (!Number.isInteger(examples) || examples <= 0)
        throw new ConfigError(`--examples: expected a positive integer, got "${opts.examples}"`);
      checkOutputDir(opts.out, '--out');
      await warmupModelDir({ ...cfg, experimental: { ...cfg.experimental, tip_warmup_examples: examples } }, opts.out);
    });
}

/**
 * `empo2 warmup`: build the tiny model, warm it up and save it in the Hugging Face layout, with
 * `warmup.json` saying how well it follows tips before and after (200 held-out prompts each from
 * the configured tasks and from the environment's other tasks, built with another seed).
 */
export async function warmupModelDir(cfg: Config, outDir: string, log: (line: string) => void = console.log): Promise<object> {
  if (existsSync(join(outDir, 'config.json'))) throw new Error(`${outDir} already holds a model; choose another --out`);
  if (cfg.experimental.tip_warmup_examples <= 0) throw new Error('experimental.tip_warmup_examples must be positive for a warm-up');
  // Loaded here, not at the top: the command line starts without TensorFlow.js.
  const { createEngine, initBackend } = await import('../../policy/index.ts');
  const { buildWarmupExamples, measureTipFollowing, runTipWarmup, tipWarmupSettings } = await import('../../trainer/tip-warmup.ts');
  await initBackend();
  const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
  const env = await createEnv({ ...cfg.env, tasks: null });
  try {
    const tasks = cfg.env.tasks ?? env.tasks();
    const others = env.tasks().filter((t) => !tasks.includes(t));
    const ws = tipWarmupSettings(cfg);
    const examples = await buildWarmupExamples(env, tasks, engine.tokenizer, ws);
    const heldOut = {
      same_tasks: await buildWarmupExamples(env, tasks, engine.tokenizer, { ...ws, examples: 200, seed: ws.seed + 1 }),
    } as Record<string, WarmupExample[]>;
    if (others.length)
      heldOut.other_tasks = await buildWarmupExamples(env, others, engine.tokenizer, { ...ws, examples: 200, seed: ws.seed + 2 });
    const measure = async () =>
      Object.fromEntries(
        await Promise.all(Object.entries(heldOut).map(async ([k, v]) => [k, await measureTipFollowing(engine, v)] as const)),
      );
    const before = await measure();
    log(
      `tip warm-up: ${examples.length} prompts from ${tasks.join(', ')} (train split), ${ws.epochs} epochs, lr ${ws.lr}; before: follows the best tip ${fmtFollow(before)}`,
    );
    const report = await runTipWarmup(engine, examples, ws, log);
    const after = await measure();
    log(`after: follows the best tip ${fmtFollow(after)}`);
    mkdirSync(outDir, { recursive: true });
    await engine.save(outDir);
    const summary = { ...report, tasks, held_out_tasks: others, before, after, settings: { ...ws, prompt: undefined }, prompt: ws.prompt };
    writeFileSync(join(outDir, 'warmup.json'), JSON.stringify(summary, null, 2) + '\n');
    log(`saved ${outDir}`);
    return summary;
  } finally {
    await env.close();
    engine.dispose();
  }
}

function fmtFollow(m: Record<string, TipFollowing>): string {
  return Object.entries(m)
    .map(
      ([k, v]) =>
        `${k}: p(target) ${v.followProbability.toFixed(2)} vs uniform ${v.uniformProbability.toFixed(2)}, top-1 ${(v.follow * 100).toFixed(0)}%`,
    )
    .join('; ');
}
