/**
 * The trainer's side of EMPO²'s memory: which slot an episode uses, tips for memory rollouts, the
 * intrinsic reward, and tip writing after each training episode. It also times itself, because
 * the memory must stay a small share of rollout time (the reference spends ~19%).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { resolveAlgo, type Config, type ResolvedAlgo } from '../config/schema.ts';
import { noveltyReward, retrievalReward } from '../algo/intrinsic.ts';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import { ExternalModel } from '../external/client.ts';
import type { ExternalUsage } from '../external/usage.ts';
import { ExternalReflector } from '../memory/external-reflector.ts';
import { NoveltyList } from '../memory/novelty.ts';
import { PolicyReflector, TrajectorySummaryReflector, stepTipText, type Reflector, type Trajectory } from '../memory/reflector.ts';
import { findMemoryFile } from '../memory/memory-file.ts';
import { TipMemory, type RetrievedTip } from '../memory/store.ts';
import type { Embedder } from '../memory/types.ts';
import { IM_END, IM_START, type ChatMessage } from '../policy/index.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { MEMORY_FILE } from '../run/checkpoint.ts';
import { isFailed, type Episode, type RolloutJob, type ShownTip } from '../run/records.ts';
import { promptSettings } from './prompt-style.ts';
import type { TipQuery, TipSource } from './rollout.ts';

export async function createEmbedder(cfg: Config): Promise<Embedder> {
  if (cfg.memory.embedder === 'hashed') return new HashedNgramEmbedder({ dim: cfg.memory.dim });
  const { MiniLmEmbedder, findMiniLmDir } = await import('../memory/minilm.ts');
  return MiniLmEmbedder.load(cfg.memory.embedder_path ?? findMiniLmDir());
}

function chatML(messages: { role: string; content: string }[]): string {
  return messages.map((m) => `${IM_START}${m.role}\n${m.content}${IM_END}\n`).join('') + `${IM_START}assistant\n`;
}

/** How the policy is asked to reflect: in the chat template it acts in (plain ChatML for the tiny model). */
export function reflectionRender(cfg: Config): (messages: { role: 'system' | 'user' | 'assistant'; content: string }[]) => string {
  const template = promptSettings(cfg).template;
  return template ? (messages: ChatMessage[]) => template.render(messages, { addGenerationPrompt: true }) : chatML;
}

/** Steps of a trajectory the reflection prompt shows (the policy and openai reflectors alike). */
const REFLECTION_HISTORY_STEPS = 12;

/** Where an external tip writer keeps its answers (null: the run folder) and says what failed. */
export interface WriterPlace {
  cacheDir: string | null;
  log: (line: string) => void;
}

export function createReflector(cfg: Config, engine: PolicyEngine, seed: number, place?: WriterPlace): Reflector {
  const kind = cfg.memory.reflector === 'auto' ? (cfg.model.path ? 'policy' : 'summary') : cfg.memory.reflector;
  if (kind === 'summary') return new TrajectorySummaryReflector();
  if (kind === 'openai') {
    if (!cfg.memory.reflector_model) throw new Error('memory.reflector: openai needs memory.reflector_model');
    const model = new ExternalModel(cfg.memory.reflector_model, {
      role: 'reflector',
      defaultCacheDir: place?.cacheDir ?? cfg.run_dir,
      log: place?.log ?? ((line) => process.stderr.write(`${line}\n`)),
    });
    return new ExternalReflector(model, engine.tokenizer, {
      maxTokens: cfg.memory.reflection_max_tokens,
      historySteps: REFLECTION_HISTORY_STEPS,
      seed,
    });
  }
  return new PolicyReflector(engine, reflectionRender(cfg), {
    maxTokens: cfg.memory.reflection_max_tokens,
    temperature: cfg.rollout.eval_temperature,
    seed,
    historySteps: REFLECTION_HISTORY_STEPS,
  });
}

/** An episode as a reflector reads it. */
export function trajectoryOf(e: Episode): Trajectory {
  return {
    task: e.description,
    steps: e.steps.map((s) => ({ observation: s.observation, action: s.action, score: s.score })),
    finalObservation: e.finalObservation,
    score: e.score,
    success: e.success,
  };
}

/** Points the oracle tip claims, in the step-tip format the warm-up taught the model to follow. */
const ORACLE_TIP_POINTS = 20;
export const ORACLE_TIP_SUMMARY = 'A solver that can see the whole world suggests this step.';

/** `experimental.tip_source: oracle`: the solver's next action as the only tip (none once it has no action). */
export function oracleTips(action: string | null, credit: Config['experimental']['step_credit'], reflection = true): ShownTip[] {
  return action === null
    ? []
    : [
        {
          text: stepTipText(reflection ? ORACLE_TIP_SUMMARY : '', action, ORACLE_TIP_POINTS, credit),
          score: ORACLE_TIP_POINTS,
          similarity: null,
          action,
        },
      ];
}

function emptyMemory(cfg: Config, embedder: Embedder): { tips: TipMemory; novelty: NoveltyList } {
  return {
    tips: new TipMemory(embedder.dim, { capacity: cfg.memory.capacity, threshold: cfg.memory.threshold, topK: cfg.memory.top_k }),
    novelty: new NoveltyList(cfg.algo.novelty_threshold),
  };
}

/**
 * A fresh run's memory: empty, or (memory.init_from) holding the tips of another memory.json (a run's,
 * or a memory proxy's export), added oldest first under this run's capacity, so a full slot keeps the newest.
 */
function seededMemory(cfg: Config, embedder: Embedder): { tips: TipMemory; novelty: NoveltyList } {
  const fresh = emptyMemory(cfg, embedder);
  if (cfg.memory.init_from === null) return fresh;
  const file = findMemoryFile(cfg.memory.init_from);
  const where = `memory.init_from (${file})`;
  let saved: { embedder?: unknown; tips?: unknown };
  try {
    saved = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${where} is corrupt (${(e as Error).message})`);
  }
  if (saved?.embedder !== embedder.name)
    throw new Error(
      `${where} was written with embedder ${String(saved?.embedder)}, but this run uses ${embedder.name}: keys would not compare`,
    );
  const from = TipMemory.fromJSON(saved.tips, where);
  const { slots } = from.toJSON();
  for (const slot of from.slotNames()) {
    const bytes = Buffer.from(slots[slot].keys, 'base64');
    const keys = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    from
      .entries(slot)
      .forEach((e, i) => fresh.tips.add(slot, keys.subarray(i * from.dim, (i + 1) * from.dim), e.text, e.score, e.action, e.progress));
  }
  return fresh;
}

/** A checkpoint's memory.json, refused when it is corrupt or keyed by another embedder. */
function loadSavedMemory(file: string, embedder: Embedder): { tips: TipMemory; novelty: NoveltyList } {
  let saved: unknown;
  try {
    saved = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file} is corrupt (${(e as Error).message})`);
  }
  return restoreMemory(saved, embedder, file);
}

/** A memory as `MemoryRuntime.toJSON` wrote it; `where` names its file in errors. */
function restoreMemory(saved: unknown, embedder: Embedder, where: string): { tips: TipMemory; novelty: NoveltyList } {
  if (typeof saved !== 'object' || saved === null) throw new Error(`${where}: the saved memory is not an object`);
  const m = saved as { embedder?: unknown; tips?: unknown; novelty?: Parameters<typeof NoveltyList.fromJSON>[0] };
  if (m.embedder !== embedder.name)
    throw new Error(`${where} was written with embedder ${String(m.embedder)}, but this run uses ${embedder.name}: keys would not compare`);
  return { tips: TipMemory.fromJSON(m.tips, where), novelty: NoveltyList.fromJSON(m.novelty!, embedder.dim, where) };
}

const READ_ONLY_REFLECTOR: Reflector = {
  name: 'none (opened for retrieval only)',
  reflect: async () => {
    throw new Error('this tip memory was opened for retrieval only; nothing is written to it');
  },
};

export class MemoryRuntime {
  /** Seconds spent embedding, retrieving, computing intrinsic rewards and writing tips since the last `takeSeconds`. */
  private seconds = 0;
  /** Episodes since the last `takeWriting` whose tip the reflector could not write (an external writer that failed). */
  private skipped = 0;
  private readonly cache = new Map<string, Float32Array>();

  readonly embedder: Embedder;
  readonly reflector: Reflector;
  readonly tips: TipMemory;
  readonly novelty: NoveltyList;

  constructor(
    readonly cfg: Config,
    readonly algo: ResolvedAlgo,
    parts: { embedder: Embedder; reflector: Reflector; tips: TipMemory; novelty: NoveltyList },
  ) {
    this.embedder = parts.embedder;
    this.reflector = parts.reflector;
    this.tips = parts.tips;
    this.novelty = parts.novelty;
  }

  /**
   * The memory saved in the checkpoint `from.checkpoint` (null: an empty one), or, with `from.saved`, the
   * memory `toJSON` gave (an adaptation resumed from its state file, named by `saved.where`).
   */
  static async create(
    cfg: Config,
    algo: ResolvedAlgo,
    engine: PolicyEngine,
    from: { checkpoint: string | null; saved?: { memory: unknown; where: string }; writer?: WriterPlace },
  ): Promise<MemoryRuntime> {
    const { checkpoint: restoreFrom, saved } = from;
    const embedder = await createEmbedder(cfg);
    try {
      const file = restoreFrom ? join(restoreFrom, MEMORY_FILE) : null;
      if (!saved && file && !existsSync(file) && algo.memory)
        throw new Error(`checkpoint ${restoreFrom} has no ${MEMORY_FILE}, but this run keeps a tip memory`);
      const { tips, novelty } = saved
        ? restoreMemory(saved.memory, embedder, saved.where)
        : file && existsSync(file)
          ? loadSavedMemory(file, embedder)
          : seededMemory(cfg, embedder);
      return new MemoryRuntime(cfg, algo, { embedder, reflector: createReflector(cfg, engine, cfg.seed, from.writer), tips, novelty });
    } catch (e) {
      embedder.dispose?.();
      throw e;
    }
  }

  /**
   * The memory saved in `file`, opened only to retrieve (the dashboard asks what a state would be
   * shown): retrieval goes through `tipSource`, as in training, and nothing is written.
   */
  static async forRetrieval(cfg: Config, file: string): Promise<MemoryRuntime> {
    const readOnly: Config = { ...cfg, experimental: { ...cfg.experimental, tip_source: 'memory' } };
    const embedder = await createEmbedder(readOnly);
    try {
      const { tips, novelty } = loadSavedMemory(file, embedder);
      return new MemoryRuntime(readOnly, resolveAlgo(readOnly), { embedder, reflector: READ_ONLY_REFLECTOR, tips, novelty });
    } catch (e) {
      embedder.dispose?.();
      throw e;
    }
  }

  slotOf(job: RolloutJob): string {
    return this.cfg.memory.slot === 'variation' ? `${job.task}#${job.variation}` : job.task;
  }

  /** Embeddings of state texts, cached: episodes revisit the same states all the time. */
  async embed(texts: readonly string[]): Promise<Float32Array[]> {
    const missing = [...new Set(texts.filter((t) => !this.cache.has(t)))];
    if (missing.length) {
      const vectors = await this.embedder.embed(missing);
      if (this.cache.size + missing.length > 50_000) this.cache.clear();
      missing.forEach((t, i) => this.cache.set(t, vectors[i]));
    }
    return texts.map((t) => this.cache.get(t)!);
  }

  /**
   * Retr(s; M) for the rollout: the top-k tips of the episode's slot for its current state.
   * `observe`, if given, sees every query with the actions of the tips it got, best first (what
   * `empo2 adapt` reports: whether the agent acted on its tips).
   */
  tipSource(observe?: (query: TipQuery, tipActions: (string | null)[]) => void): TipSource {
    if (this.cfg.experimental.tip_source === 'oracle')
      return async (queries) =>
        queries.map((q) => {
          const action = q.oracleAction();
          observe?.(q, action === null ? [] : [action]);
          return oracleTips(action, this.cfg.experimental.step_credit, this.cfg.experimental.step_tip_reflection);
        });
    return async (queries) => {
      const t0 = performance.now();
      const keys = await this.embed(queries.map((q) => q.state));
      const bestLast = this.cfg.experimental.tip_order === 'best_last';
      const out = queries.map((q, i) => {
        const filter = {
          keepAction: this.actionFilter(q),
          minScore: this.cfg.experimental.min_tip_score,
          progress: this.cfg.experimental.match_progress ? q.scoreSoFar : null,
        };
        const hits: RetrievedTip[] = this.tips.retrieve(this.slotOf(q.job), keys[i], undefined, filter);
        observe?.(
          q,
          hits.map((h) => h.action),
        );
        const shown: ShownTip[] = hits.map(({ text, score, similarity, action }) => ({ text, score, similarity, action }));
        return bestLast ? shown.reverse() : shown;
      });
      this.seconds += (performance.now() - t0) / 1000;
      return out;
    };
  }

  /**
   * Which per-step tips may be shown in this state (experimental.skip_taken_actions, experimental.valid_actions_only).
   * A state that lists no valid actions (an environment that takes free text) has nothing to check
   * a tip against, so its tips are not filtered for validity.
   */
  private actionFilter(q: TipQuery): ((action: string) => boolean) | undefined {
    const taken = this.cfg.experimental.skip_taken_actions ? new Set(q.taken) : null;
    const valid = this.cfg.experimental.valid_actions_only && q.validActions.length > 0 ? new Set(q.validActions) : null;
    if (!taken && !valid) return undefined;
    return (action) => !taken?.has(action) && (!valid || valid.has(action));
  }

  /**
   * Weighted intrinsic reward of every step (docs/EMPO2.md §6), visited in time order across the batch so
   * the novelty counts are what they would be had they been taken during the rollout (the memory
   * does not change during a rollout: tips are written after it).
   */
  async intrinsicRewards(episodes: readonly Episode[]): Promise<number[][]> {
    const coef = this.cfg.algo.intrinsic_coef;
    const out = episodes.map((e) => new Array<number>(e.steps.length).fill(0));
    if (this.algo.intrinsic === 'none' || coef === 0) return out;
    const t0 = performance.now();
    const keys = await Promise.all(episodes.map((e) => this.embed(e.steps.map((s) => s.observation))));
    const longest = Math.max(0, ...episodes.map((e) => e.steps.length));
    for (let t = 0; t < longest; t++) {
      episodes.forEach((e, i) => {
        // An episode a failure ended is not trained on, and its states are not counted as visited.
        if (t >= e.steps.length || isFailed(e)) return;
        const slot = this.slotOf(e);
        const r =
          this.algo.intrinsic === 'novelty'
            ? noveltyReward(this.novelty.visit(slot, keys[i][t]))
            : retrievalReward(Math.min(this.cfg.memory.top_k, this.tips.countSimilar(slot, keys[i][t])));
        out[i][t] = coef * r;
      });
    }
    this.seconds += (performance.now() - t0) / 1000;
    return out;
  }

  /** Tip writing after training episodes: one reflection each, stored per step (reference) or per episode; returns the entries added. */
  async write(episodes: readonly Episode[]): Promise<number> {
    return (await this.writeTips(episodes)).added;
  }

  /**
   * `write`, also returning each episode's reflection (the tip the reflector wrote; null where none
   * was written: no tip memory, or per-step entries without the reflection in front).
   */
  async writeTips(batch: readonly Episode[]): Promise<{ added: number; reflections: (string | null)[] }> {
    // An episode a failure ended says nothing about the task: no tip is written from it.
    const kept = [...batch.keys()].filter((i) => !isFailed(batch[i]));
    const written = await this.writeFrom(kept.map((i) => batch[i]));
    const reflections = batch.map(() => null as string | null);
    kept.forEach((i, k) => (reflections[i] = written.reflections[k]));
    return { added: written.added, reflections };
  }

  private async writeFrom(episodes: readonly Episode[]): Promise<{ added: number; reflections: (string | null)[] }> {
    if (!this.algo.memory || episodes.length === 0) return { added: 0, reflections: episodes.map(() => null) };
    const t0 = performance.now();
    const trajectories = episodes.map(trajectoryOf);
    // Per-step tips without the reflection never read it: skip the reflector (a generation pass for the policy reflector).
    const reflect = !this.cfg.memory.per_step_entries || this.cfg.experimental.step_tip_reflection;
    const reflections = reflect ? await this.reflector.reflect(trajectories) : trajectories.map(() => '');
    let added = 0;
    for (const [i, e] of episodes.entries()) {
      const reflection = reflections[i];
      // No tip could be written for this episode: it adds nothing, rather than entries without the tip their kind carries.
      if (reflection === null) {
        this.skipped++;
        continue;
      }
      const slot = this.slotOf(e);
      if (this.cfg.memory.per_step_entries) {
        const keys = await this.embed(e.steps.map((s) => s.observation));
        const credit = this.cfg.experimental.step_credit;
        e.steps.forEach((s, t) => {
          const before = t > 0 ? e.steps[t - 1].score : 0;
          const score = credit === 'final' ? e.score : credit === 'to_go' ? e.score - before : s.score - before;
          if (this.tips.add(slot, keys[t], stepTipText(reflection, s.action, score, credit), score, s.action, before)) added++;
        });
      } else {
        const [key] = await this.embed([e.finalObservation]);
        if (this.tips.add(slot, key, reflection, e.score)) added++;
      }
    }
    this.seconds += (performance.now() - t0) / 1000;
    return { added, reflections: reflect ? reflections : episodes.map(() => null) };
  }

  takeSeconds(): number {
    const s = this.seconds;
    this.seconds = 0;
    return s;
  }

  /**
   * Since the last take: the episodes whose tip could not be written (skipped, nothing stored from
   * them), and what the tip writer's external model cost (null: the writer calls none).
   */
  takeWriting(): { skipped: number; external: ExternalUsage | null } {
    const skipped = this.skipped;
    this.skipped = 0;
    return { skipped, external: this.reflector.takeUsage?.() ?? null };
  }

  toJSON(): object {
    return { embedder: this.embedder.name, tips: this.tips.toJSON(), novelty: this.novelty.toJSON() };
  }

  dispose(): void {
    this.reflector.close?.();
    this.embedder.dispose?.();
  }
}
