/**
 * The training loop: sample (task, variation) groups, roll out N episodes each, take a GRPO
 * update, log a JSON line, evaluate on held-out variations now and then, checkpoint. Ctrl-C stops
 * at the next iteration boundary after saving; a second Ctrl-C exits at once (the last complete
 * checkpoint stays intact either way, since checkpoints are written atomically; ./interrupt.ts).
 */
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { ConfigError, loadConfig } from '../config/load.ts';
import { RESUMABLE_OPTIONS, resolveAlgo, resumeConflicts, type Config } from '../config/schema.ts';
import { turnEventLoop } from '../util/event-loop.ts';
import { formatDuration } from '../util/duration.ts';
import { drawMode, scheduledP, usesMemory, type Mode } from '../algo/modes.ts';
import { createEnv } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { nativeMatMulStatus } from '../policy/tfjs/native-matmul.ts';
import { resolveModelPath } from '../policy/gguf/model-path.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { TfjsEngine } from '../policy/tfjs/engine.ts';
import { buildWarmupExamples, runTipWarmup, TipRehearsal, tipWarmupSettings } from './tip-warmup.ts';
import { Rng } from '../util/rng.ts';
import { latestCheckpoint, loadTrainerState, removeOwnTemporaryFiles, removeStaleTemporaryFiles, saveCheckpoint, type TrainerState } from './checkpoint.ts';
import { createRemoteRollouts, createTrainingEngine } from './engines.ts';
import { InterruptHandling, policyCalls } from './interrupt.ts';
import { MetricsLog } from './metrics-log.ts';
import { EpisodeProgress } from './progress.ts';
import { grpoUpdate } from './grpo.ts';
import { MEMORY_FILE, MemoryRuntime } from './memory.ts';
import { promptSettings } from './prompt-style.ts';
import { environmentCount, oracleOf, rolloutSettings, runEpisodesInChunks, type Episode, type RolloutJob } from './rollout.ts';
import { evaluate, formatEvalTable, timing, type EvalResult } from './evaluate.ts';
import { evaluationEpisodes } from './evaluate-checkpoint.ts';
import { openRunRecorders, recordEpisodes, sampledTokenEntropy, spreadSample, tipFollowRate } from './trajectories.ts';

export interface TrainOptions {
  resume: boolean;
  log?: (line: string) => void;
  /** Install SIGINT handling (the CLI does; tests do not). */
  handleSignals?: boolean;
  /** Show the rollouts' progress in place when stderr is a terminal (the CLI does). */
  progress?: boolean;
}

export interface TrainResult {
  runDir: string;
  iterations: number;
  initialEval: EvalResult | null;
  finalEval: EvalResult;
  interrupted: boolean;
}

export async function train(cfg: Config, opts: TrainOptions): Promise<TrainResult> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const backend = await initBackend();
  const runDir = cfg.run_dir;
  mkdirSync(runDir, { recursive: true });

  const resumeFrom = opts.resume ? latestCheckpoint(runDir) : null;
  if (opts.resume && !resumeFrom) throw new Error(`--resume: no checkpoint in ${join(runDir, 'checkpoints')}`);
  if (!opts.resume && latestCheckpoint(runDir)) throw new Error(`${runDir} already holds a run; use --resume to continue it or choose another run_dir`);
  if (resumeFrom) checkResumeConfig(cfg, runDir, loadTrainerState(resumeFrom).iteration, log);
  for (const path of removeStaleTemporaryFiles(runDir)) log(`removed ${path}, left by a process that stopped while writing it`);
  const trainingEngine = await createTrainingEngine(cfg, resumeFrom ?? 'fresh');
  const baseModelDir = cfg.model.path ? await resolveModelPath(cfg.model.path) : null;
  // Every policy call lets the event loop turn, so Ctrl-C is seen within one call (./interrupt.ts).
  let interrupts: InterruptHandling | null = null;
  const engine = policyCalls(trainingEngine.engine, () => interrupts);
  const remoteRollouts = cfg.rollout.remote ? await createRemoteRollouts(cfg, engine) : null;
  const rolloutEngine: PolicyEngine = remoteRollouts ? policyCalls(remoteRollouts.engine, () => interrupts) : engine;
  const algo = resolveAlgo(cfg);
  const memory = algo.memory || algo.intrinsic !== 'none' ? await MemoryRuntime.create(cfg, algo, engine, resumeFrom) : null;
  const state: TrainerState = trainingEngine.state ?? { iteration: 0, envSteps: 0, rngState: new Rng(cfg.seed).getState(), elapsedSeconds: 0 };
  const rng = new Rng(0);
  rng.setState(state.rngState);
  // On resume, the settings a resume may change (checkResumeConfig) are the run's from now on.
  writeTextAtomic(join(runDir, 'config.yaml'), toYaml(cfg));
  const metricsPath = join(runDir, 'metrics.jsonl');
  const metrics = resumeFrom ? MetricsLog.resume(metricsPath, state.iteration, log) : MetricsLog.fresh(metricsPath, log);
  const recorders = openRunRecorders(cfg, resumeFrom ? state.iteration : null, log);

  const probe = await createEnv(cfg.env);
  if (memory && cfg.memory.source === 'oracle') oracleOf(probe); // fail before training, not at the first memory rollout
  const tasks = cfg.env.tasks ?? probe.tasks();
  const trainVariations = new Map(tasks.map((t) => [t, probe.variations(t, 'train').slice(0, cfg.env.train_variations ?? undefined)]));
  const batchSize = cfg.rollout.tasks_per_batch * cfg.rollout.group_size;
  const envs: Env[] = [probe];
  while (envs.length < environmentCount(cfg, Math.max(batchSize, evaluationEpisodes(probe, tasks, cfg)))) envs.push(await createEnv(cfg.env));

  if (!resumeFrom && cfg.model.tip_warmup_examples > 0) {
    const ws = tipWarmupSettings(cfg);
    const examples = await buildWarmupExamples(probe, tasks, engine.tokenizer, ws);
    log(`tip warm-up: ${examples.length} synthetic prompts from random-action episodes on the train split of ${tasks.join(', ')}, ${ws.epochs} epochs`);
    const report = await runTipWarmup(engine, examples, ws, log);
    // RL starts with fresh AdamW moments, as it would from a pretrained checkpoint.
    if (trainingEngine.engine instanceof TfjsEngine) trainingEngine.engine.optimizer.importState(0, new Map());
    writeFileSync(join(runDir, 'tip-warmup.json'), JSON.stringify(report, null, 2) + '\n');
  }
  const rehearsal = cfg.model.tip_rehearsal > 0 ? await TipRehearsal.build(probe, tasks, engine.tokenizer, cfg) : null;

  log(`empo2 train | run ${runDir} | backend ${backend} (${nativeMatMulStatus().reason}) | ${trainingEngine.description}, vocab ${engine.tokenizer.vocabSize}`);
  log(
    `algo ${cfg.algo.name}: p=${algo.p}${algo.pEnd !== null ? ` → ${algo.pEnd} by iteration ${cfg.train.iterations}` : ''} q=${algo.q} (mode drawn per ${cfg.algo.mode_draw}), intrinsic ${algo.intrinsic}` +
      (algo.stepAdvantage === 'gigpo' ? `, GiGPO step advantage (ω=${cfg.algo.gigpo_omega}, γ=${cfg.algo.gigpo_gamma}, ${cfg.algo.gigpo_mode})` : '') +
      (memory ? ` | memory: ${memory.embedder.name} embedder, ${memory.reflector.name} reflector, slot per ${cfg.memory.slot}, ${memory.tips.size()} tips` : '') +
      (rehearsal ? ` | tip rehearsal: ${cfg.model.tip_rehearsal} of ${rehearsal.pool.length} examples after every update` : ''),
  );
  log(`env ${cfg.env.name}: ${tasks.length} tasks (${tasks.join(', ')}) | ${cfg.rollout.tasks_per_batch} groups x ${cfg.rollout.group_size} rollouts per iteration | ${cfg.train.iterations} iterations` + (resumeFrom ? ` | resuming from ${resumeFrom}` : ''));

  // A second Ctrl-C may land in the middle of a checkpoint write: its temporary folder goes too (one
  // the kernel ends, in a TensorFlow.js run, leaves it to removeStaleTemporaryFiles at the next start).
  if (opts.handleSignals) interrupts = new InterruptHandling(log, () => removeOwnTemporaryFiles(runDir), { holdsTheThread: trainingEngine.engine instanceof TfjsEngine });
  const stopRequested = () => interrupts?.stopRequested ?? false;

  const runEval = async (iteration: number) => {
    const shown = cfg.train.eval_with_memory && memory ? memory : undefined;
    let followed: number | null = null;
    const played = (episodes: readonly Episode[]) => {
      followed = tipFollowRate(episodes);
      const k = cfg.trajectories.eval_per_evaluation;
      const slot = (i: number) => (shown?.algo.memory ? shown.slotOf(episodes[i]) : null);
      recordEpisodes(recorders.eval, episodes, spreadSample(episodes.length, k ?? episodes.length), { source: 'eval', iteration, envSteps: state.envSteps }, (i) => ({ mode: shown ? 'tips' : 'plain', slot: slot(i), reflection: null }));
    };
    const r = await evaluate(engine, envs, tasks, cfg, iteration, shown, `eval @ iter ${iteration}`, played);
    metrics.append({ type: 'eval', iteration, train_env_steps: state.envSteps, ...r.summary, per_task: r.perTask, ...(shown ? { tips_followed: followed } : {}) });
    log(`eval @ iter ${iteration}: mean score ${r.summary.mean_score.toFixed(1)} | success ${(r.summary.success_rate * 100).toFixed(1)}% | ${r.summary.episodes} episodes on ${cfg.env.eval_split} | ${timing(r.summary)}`);
    return r;
  };

  if (remoteRollouts) {
    await remoteRollouts.sync();
    log(`rollouts through ${cfg.rollout.remote!.base_url} (weights pushed after every update: ${cfg.rollout.remote!.sync === 'load_weights' ? 'yes' : 'no'})`);
  }
  // The "before" of the before/after table; on resume, the one logged when the run started.
  let initialEval = metrics.evalAt(0);
  if (!initialEval && state.iteration === 0) initialEval = await runEval(0);
  if (state.iteration >= cfg.train.iterations) log(`the run already finished its ${state.iteration} iterations; raise train.iterations to train it longer`);

  const started = performance.now() - state.elapsedSeconds * 1000;
  const firstIteration = state.iteration + 1;
  let lastEval: EvalResult | null = initialEval;
  let interrupted = false;
  const drawnPer = (scope: Config['algo']['mode_draw']) => algo.drawsModes && cfg.algo.mode_draw === scope;
  try {
    for (let it = firstIteration; it <= cfg.train.iterations; it++) {
      const t0 = performance.now();
      const jobs: RolloutJob[] = [];
      const modes: Mode[] = [];
      const schedule = { p: scheduledP(algo.p, algo.pEnd, it, cfg.train.iterations), q: algo.q };
      const iterationMode: Mode = drawnPer('iteration') ? drawMode(schedule, rng.next(), rng.next()) : 'plain';
      for (let g = 0; g < cfg.rollout.tasks_per_batch; g++) {
        const task = rng.pick(tasks);
        const variation = rng.pick(trainVariations.get(task)!);
        const groupMode = drawnPer('task') ? drawMode(schedule, rng.next(), rng.next()) : iterationMode;
        for (let k = 0; k < cfg.rollout.group_size; k++) {
          jobs.push({ task, variation, group: g });
          // Per rollout, the group's advantage weighs tip-guided rollouts against plain ones of the same task.
          modes.push(drawnPer('rollout') ? drawMode(schedule, rng.next(), rng.next()) : groupMode);
        }
      }
      const withTips = memory && modes.some(usesMemory) ? { tips: memory.tipSource(), uses: (i: number) => usesMemory(modes[i]) } : undefined;
      // Chunks after the first (env.max_instances < batch) get seeds of their own.
      // A real model takes minutes per iteration: on a terminal its rollouts show progress in place.
      const progress = opts.progress && process.stderr.isTTY ? new EpisodeProgress(jobs, { label: `iter ${it} rollouts` }) : undefined;
      const { episodes, stats } = await runEpisodesInChunks(envs, rolloutEngine, jobs, (start) => rolloutSettings(cfg, false, cfg.seed * 1_000_003 + it + 7_919 * start), withTips, progress);
      progress?.finish();
      const t1 = performance.now();
      if (t1 - t0 > 60_000) log(`iter ${it}: ${episodes.length} episodes, ${stats.envSteps} steps rolled out in ${formatDuration((t1 - t0) / 1000)}; updating`);
      const intrinsic = memory ? await memory.intrinsicRewards(episodes) : null;
      const tOptimizer = performance.now();
      const update = await grpoUpdate(
        engine,
        episodes.map((e, i) => ({ ...e, mode: modes[i], intrinsic: intrinsic?.[i] })),
        {
          objective: { clipLow: cfg.algo.clip_low, clipHigh: cfg.algo.clip_high, dualClip: cfg.algo.dual_clip, klCoef: cfg.algo.kl_coef, lowProbDelta: cfg.algo.low_prob_delta },
          seqMinLogprob: cfg.algo.seq_min_logprob,
          minibatches: cfg.algo.minibatches,
          epochs: cfg.algo.epochs,
          rewardScale: cfg.algo.reward_scale,
          skipZeroAdvantage: cfg.algo.skip_zero_advantage,
          temperature: cfg.rollout.temperature > 0 ? cfg.rollout.temperature : 1,
          maskScope: cfg.algo.low_prob_scope,
          offPolicyRatio: cfg.algo.off_policy_ratio,
          offPolicyWeightCap: cfg.algo.off_policy_weight_cap,
          pack: cfg.optim.pack_episodes ?? promptSettings(cfg).template !== undefined,
          gigpo: algo.stepAdvantage === 'gigpo' ? { omega: cfg.algo.gigpo_omega, gamma: cfg.algo.gigpo_gamma, mode: cfg.algo.gigpo_mode } : null,
        },
        rng,
      );
      const tUpdate = performance.now();
      const rehearsalNll = rehearsal ? await rehearsal.step(engine, it) : null;
      // The server samples the next rollouts: give it the weights this update produced.
      if (remoteRollouts) await remoteRollouts.sync();
      const written = memory ? await memory.writeTips(episodes) : null;
      const tipsAdded = written?.added ?? 0;
      const memorySeconds = memory ? memory.takeSeconds() : 0;
      const t2 = performance.now();
      state.iteration = it;
      state.envSteps += stats.envSteps;
      state.rngState = rng.getState();
      state.elapsedSeconds = (t2 - started) / 1000;
      const meanScore = episodes.reduce((a, e) => a + e.score, 0) / episodes.length;
      const success = episodes.filter((e) => e.success).length / episodes.length;
      const byMode = scoreByMode(episodes, modes);
      recordEpisodes(recorders.train, episodes, spreadSample(episodes.length, cfg.trajectories.train_per_iteration), { source: 'train', iteration: it, envSteps: state.envSteps }, (i) => ({
        mode: modes[i],
        slot: memory?.algo.memory ? memory.slotOf(episodes[i]) : null,
        reflection: written?.reflections[i] ?? null,
      }));
      const rolloutTokPerS = (stats.promptTokens + stats.generatedTokens) / Math.max(1e-9, stats.policySeconds);
      const trainTokPerS = update.tokens / Math.max(1e-9, (t2 - t1) / 1000);
      const eta = (cfg.train.iterations - it) * ((t2 - t0) / 1000);
      metrics.append({
        type: 'train', iteration: it, env_steps: state.envSteps, mean_score: meanScore, success_rate: success,
        loss: update.loss, clip_fraction: update.clipFraction, mean_ratio: update.meanRatio, grad_norm: update.gradNorm, kl: update.kl,
        sequences: update.sequences, trained_tokens: update.tokens, packed_share: update.packedSteps / Math.max(1, update.steps), rollout_seconds: (t1 - t0) / 1000, update_seconds: (t2 - t1) / 1000, optimizer_seconds: (tUpdate - tOptimizer) / 1000,
        rollout_tokens_per_s: rolloutTokPerS, mean_prompt_tokens: stats.promptTokens / Math.max(1, stats.envSteps), prompt_tokens: stats.promptTokens, prefill_tokens: rolloutEngine.prefillCounts ? stats.prefilledTokens : null, sequence_tokens: update.sequenceTokens, elapsed_seconds: state.elapsedSeconds,
        modes: countModes(modes), score_by_mode: byMode, off_policy_sequences: update.offPolicySequences, off_policy_mean_weight: update.offPolicyMeanWeight, dropped_low_prob: update.droppedLowProb,
        intrinsic_mean: intrinsic ? intrinsic.flat().reduce((a, b) => a + b, 0) / Math.max(1, episodes.length) : 0,
        memory_seconds: memorySeconds, memory_share_of_rollout: memorySeconds / Math.max(1e-9, (t1 - t0) / 1000),
        tips_added: tipsAdded, memory_size: memory ? memory.tips.size() : 0, tips_followed: tipFollowRate(episodes), entropy: sampledTokenEntropy(episodes),
        ...(update.stepGroups ? { step_groups: { count: update.stepGroups.count, mean_size: update.stepGroups.meanSize, max_size: update.stepGroups.maxSize, singleton_share: update.stepGroups.singletonShare, varied_rollouts: update.stepGroups.variedRollouts } } : {}),
        ...(rehearsalNll !== null ? { tip_rehearsal_nll: rehearsalNll } : {}),
      });
      log(
        `iter ${it}/${cfg.train.iterations}${algo.drawsModes ? ` [${describeModes(modes, cfg.rollout.group_size, drawnPer('rollout'))}]` : ''} | env steps ${state.envSteps} | score ${meanScore.toFixed(1)}${describeScores(byMode)} | success ${(success * 100).toFixed(0)}% | loss ${update.loss.toFixed(4)}${rehearsalNll !== null ? ` | tip NLL ${rehearsalNll.toFixed(2)}` : ''} | clip ${(update.clipFraction * 100).toFixed(1)}% | ` +
          `rollout ${((t1 - t0) / 1000).toFixed(1)}s (${rolloutTokPerS.toFixed(0)} tok/s) | update ${((t2 - t1) / 1000).toFixed(1)}s (${trainTokPerS.toFixed(0)} resp tok/s) | ETA ${formatDuration(eta)}`,
      );
      await turnEventLoop(); // so that Ctrl-C is seen between iterations
      const last = it === cfg.train.iterations;
      if (cfg.train.eval_every > 0 && it % cfg.train.eval_every === 0 && !last) lastEval = await runEval(it);
      if (it % cfg.train.checkpoint_every === 0 || last || stopRequested()) {
        const where = await saveCheckpoint(runDir, trainingEngine.checkpointWriter, state, cfg.train.keep_checkpoints, memory ? { [MEMORY_FILE]: JSON.stringify(memory.toJSON()) } : {}, baseModelDir);
        log(`checkpoint ${where}`);
      }
      if (stopRequested() && !last) {
        interrupted = true;
        break;
      }
    }
  } catch (e) {
    // Environments may own processes (ScienceWorld simulators): never leave them behind on an error.
    await Promise.all(envs.map((env) => env.close().catch(() => undefined)));
    memory?.dispose();
    await trainingEngine.close().catch(() => undefined);
    throw e;
  } finally {
    interrupts?.dispose();
  }
  let finalEval = lastEval;
  if (!interrupted) {
    // A finished run that is resumed (or one stopped between its final checkpoint and evaluation) keeps its logged evaluation.
    finalEval = metrics.evalAt(state.iteration) ?? (await runEval(state.iteration));
    const table = formatEvalTable(finalEval, initialEval);
    writeFileSync(join(runDir, 'eval.md'), table + '\n');
    log('\n' + table);
  }
  await Promise.all(envs.map((e) => e.close()));
  memory?.dispose();
  await trainingEngine.close();
  return { runDir, iterations: state.iteration, initialEval, finalEval: finalEval!, interrupted };
}

/**
 * A resume continues the run as it was configured: options other than RESUMABLE_OPTIONS must equal
 * the run's config.yaml (the checkpoint's weights and optimiser would otherwise be silently kept
 * under a config that says something else), and the run cannot be shortened below its checkpoint.
 */
function checkResumeConfig(cfg: Config, runDir: string, checkpointIteration: number, log: (line: string) => void): void {
  if (cfg.train.iterations < checkpointIteration) {
    throw new ConfigError(`--resume: train.iterations is ${cfg.train.iterations}, but the run's latest checkpoint is at iteration ${checkpointIteration}; a run cannot be shortened (evaluate an earlier checkpoint instead)`);
  }
  const savedPath = join(runDir, 'config.yaml');
  if (!existsSync(savedPath)) {
    log(`--resume: ${savedPath} is missing, so the options cannot be checked against the run's`);
    return;
  }
  const conflicts = resumeConflicts(loadConfig(savedPath), cfg);
  if (conflicts.length > 0) {
    throw new ConfigError(
      `--resume: these options differ from the run's (${savedPath}) and cannot change in the middle of a run:\n` +
        conflicts.map((c) => `  - ${c}`).join('\n') +
        `\nA resume may change only: ${RESUMABLE_OPTIONS.join(', ')}. Start a new run (another run_dir) to change the others.`,
    );
  }
}

function writeTextAtomic(path: string, text: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

function countModes(modes: readonly Mode[]): Record<Mode, number> {
  const out: Record<Mode, number> = { plain: 0, 'tips-on-policy': 0, 'tips-off-policy': 0 };
  for (const m of modes) out[m]++;
  return out;
}

/**
 * Mean rollout score per mode that ran this iteration: the first thing to look at when asking whether
 * the tips help the rollouts they are shown to (groups differ by task, so compare over many iterations).
 */
function scoreByMode(episodes: readonly { score: number }[], modes: readonly Mode[]): Partial<Record<Mode, number>> {
  const sum: Partial<Record<Mode, [number, number]>> = {};
  episodes.forEach((e, i) => {
    const acc = (sum[modes[i]] ??= [0, 0]);
    acc[0] += e.score;
    acc[1]++;
  });
  return Object.fromEntries(Object.entries(sum).map(([m, [total, n]]) => [m, total / n]));
}

function describeScores(byMode: Partial<Record<Mode, number>>): string {
  const entries = Object.entries(byMode) as [Mode, number][];
  return entries.length > 1 ? ` (${entries.map(([m, v]) => `${MODE_SHORT[m]} ${v.toFixed(1)}`).join(', ')})` : '';
}

const MODE_SHORT: Record<Mode, string> = { plain: 'plain', 'tips-on-policy': 'tips/on', 'tips-off-policy': 'tips/off' };
/** One mode for the batch, the mode of each group, or (modes drawn per rollout) how many rollouts ran in each. */
function describeModes(modes: readonly Mode[], groupSize: number, perRollout: boolean): string {
  const distinct = [...new Set(modes)];
  if (distinct.length === 1) return MODE_SHORT[distinct[0]];
  if (!perRollout) return modes.filter((_, i) => i % groupSize === 0).map((m) => MODE_SHORT[m]).join(',');
  return Object.entries(countModes(modes))
    .filter(([, n]) => n > 0)
    .map(([m, n]) => `${MODE_SHORT[m as Mode]} ${n}`)
    .join(', ');
}

