/**
 * `empo2 critic train`: Retrospex's retrospection. A critic is trained by IQL on the episodes run
 * folders, adapt outputs or trajectory files hold, and written to one file for `empo2 eval --method
 * retrospex --critic <file>`.
 */
import { Option, type Command } from 'commander';
import { existsSync } from 'node:fs';
import { ConfigError } from '../../config/load.ts';
import type { ActingSettings } from '../../retrospex/actor.ts';
import { ENCODER_KINDS, type EncoderKind } from '../../retrospex/encoder.ts';
import type { CriticTraining } from '../../retrospex/train.ts';
import { checkOutputFile } from '../output-paths.ts';

export function register(program: Command): void {
  const critic = program.command('critic').description("Retrospex's offline critic (docs/BASELINES.md)");
  critic
    .command('train')
    .description(
      'train a critic Q(s, a), V(s) by implicit Q-learning on logged episodes, for empo2 eval --method retrospex --critic <file>',
    )
    .argument('<sources...>', 'run folders, adapt or compare outputs, or trajectory .jsonl files: every episode recorded there is used')
    .requiredOption('--out <file>', 'the critic file to write')
    .addOption(
      new Option('--encoder <name>', 'frozen text encoder: minilm (all-MiniLM-L6-v2) or hashed (n-grams, nothing to install)').default(
        'minilm',
      ),
    )
    .option('--tasks <list>', 'only episodes of these tasks, e.g. power,clue,unlock')
    .option('--seed <n>', 'initial weights and batch order', '0')
    .option('--epochs <n>', 'passes over the data (default 20, as Retrospex)')
    .option('--batch-size <n>', 'transitions per update (default 128)')
    .option('--lr <x>', 'Adam learning rate of Q and V (default 1e-4)')
    .option('--hidden <n>', 'width of every layer above the encoder (default 128)')
    .option('--expectile <tau>', 'IQL expectile τ of V (default 0.7)')
    .option('--discount <gamma>', 'γ (default 0.99)')
    .option('--polyak <alpha>', 'target critic update rate α (default 0.005)')
    .option('--reward-scale <x>', 'rewards are multiplied by this (default 0.01: Q in units of the 0–100 score)')
    .action(async (sources: string[], opts) => {
      checkOutputFile(opts.out, '--out');
      await criticTrainCommand(sources, opts);
    });
}

export interface CriticTrainOptions {
  out: string;
  encoder: string;
  tasks?: string;
  seed: string;
  epochs?: string;
  batchSize?: string;
  lr?: string;
  hidden?: string;
  expectile?: string;
  discount?: string;
  polyak?: string;
  rewardScale?: string;
}

/** A number option: the default when not given, else a finite number or an error naming the option. */
function numberOption(raw: string | undefined, flag: string, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new ConfigError(`${flag} must be a number, got "${raw}"`);
  return n;
}

/** The training settings the options ask for, on top of the authors' (RETROSPEX_TRAINING). */
export function criticTraining(o: CriticTrainOptions, defaults: CriticTraining): CriticTraining {
  return {
    iql: {
      expectile: numberOption(o.expectile, '--expectile', defaults.iql.expectile),
      discount: numberOption(o.discount, '--discount', defaults.iql.discount),
      polyak: numberOption(o.polyak, '--polyak', defaults.iql.polyak),
    },
    hidden: numberOption(o.hidden, '--hidden', defaults.hidden),
    epochs: numberOption(o.epochs, '--epochs', defaults.epochs),
    batchSize: numberOption(o.batchSize, '--batch-size', defaults.batchSize),
    learningRate: numberOption(o.lr, '--lr', defaults.learningRate),
    rewardScale: numberOption(o.rewardScale, '--reward-scale', defaults.rewardScale),
    seed: numberOption(o.seed, '--seed', defaults.seed),
  };
}

export interface RetrospexFlags {
  method: string;
  critic?: string;
  candidates?: string;
  proposalTemperature?: string;
  decay?: string;
  floor?: string;
}

/** `eval --method retrospex` and its flags as acting settings (the authors' by default); undefined for the policy alone, which takes none of them. */
export async function retrospexOption(o: RetrospexFlags): Promise<{ critic: string; acting: ActingSettings } | undefined> {
  const flags: [string | undefined, string][] = [
    [o.critic, '--critic'],
    [o.candidates, '--candidates'],
    [o.proposalTemperature, '--proposal-temperature'],
    [o.decay, '--decay'],
    [o.floor, '--floor'],
  ];
  if (o.method !== 'retrospex') {
    const given = flags.filter(([v]) => v !== undefined).map(([, flag]) => flag);
    if (given.length) throw new ConfigError(`${given.join(', ')} ${given.length > 1 ? 'are' : 'is'} for --method retrospex`);
    return undefined;
  }
  if (!o.critic)
    throw new ConfigError('--method retrospex needs --critic <file> (train one with: empo2 critic train <run folders> --out <file>)');
  if (!existsSync(o.critic)) throw new ConfigError(`--critic ${o.critic}: no such file`);
  const { checkActing, RETROSPEX_ACTING } = await import('../../retrospex/actor.ts');
  const acting: ActingSettings = {
    candidates: numberOption(o.candidates, '--candidates', RETROSPEX_ACTING.candidates),
    temperature: numberOption(o.proposalTemperature, '--proposal-temperature', RETROSPEX_ACTING.temperature),
    schedule: {
      decay: numberOption(o.decay, '--decay', RETROSPEX_ACTING.schedule.decay),
      floor: numberOption(o.floor, '--floor', RETROSPEX_ACTING.schedule.floor),
    },
  };
  try {
    checkActing(acting);
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
  return { critic: o.critic, acting };
}

export async function criticTrainCommand(
  sources: string[],
  o: CriticTrainOptions,
  log: (line: string) => void = console.log,
): Promise<void> {
  const { checkTraining, RETROSPEX_TRAINING, saveCritic, trainCritic } = await import('../../retrospex/train.ts');
  if (!ENCODER_KINDS.includes(o.encoder as EncoderKind))
    throw new ConfigError(`--encoder must be ${ENCODER_KINDS.join(' or ')}, got "${o.encoder}"`);
  const training = criticTraining(o, RETROSPEX_TRAINING);
  try {
    checkTraining(training);
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
  const { readLoggedData } = await import('../../retrospex/dataset.ts');
  const tasks = o.tasks
    ?.split(',')
    .map((t) => t.trim())
    .filter(Boolean);
  const data = readLoggedData(sources, tasks);
  for (const p of data.problems.slice(0, 5)) log(`skipped ${p}`);
  if (data.problems.length > 5) log(`skipped ${data.problems.length - 5} more unreadable lines`);
  log(`logged episodes: ${data.files.map((f) => `${f.path} (${f.episodes})`).join(', ')}`);
  if (data.failedEpisodes > 0)
    log(
      `left out ${data.failedEpisodes} episode${data.failedEpisodes === 1 ? '' : 's'} whose outcome is failed (broken off by the environment or the engine)`,
    );
  const { initBackend } = await import('../../policy/tfjs/backend.ts');
  await initBackend();
  const { createEncoder } = await import('../../retrospex/encoder.ts');
  const kind = o.encoder as EncoderKind;
  const embedder = await createEncoder(kind);
  try {
    const result = await trainCritic(data, { kind, embedder }, training, log);
    saveCritic(o.out, result.critic, { data, training, ...result });
    result.critic.dispose();
    const last = result.losses.at(-1)!;
    log(
      `critic written to ${o.out}: ${data.episodes} episodes of ${data.tasks.join(', ')}, ${embedder.name} vectors, ${training.epochs} passes in ${result.seconds.toFixed(1)} s (last pass: V loss ${last.v_loss.toExponential(3)}, Q loss ${last.q_loss.toExponential(3)})`,
    );
  } finally {
    embedder.dispose?.();
  }
}
