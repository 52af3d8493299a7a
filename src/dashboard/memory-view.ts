/**
 * The tip memory of a run (its latest checkpoint's memory.json) or of an adapt output, for the page:
 * entries per slot, searchable, and the tips a chosen state would be shown. Retrieval goes through
 * the trainer's own `MemoryRuntime.tipSource` with the run's config (embedder, top-k, threshold and
 * the retrieval filters), so the page shows what training would have shown.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, validateConfig } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { findMemoryFile } from '../memory/memory-file.ts';
import { MemoryRuntime } from '../trainer/memory-runtime.ts';
import type { ShownTip } from '../run/records.ts';
import { DataError, readAdaptReport } from './run-data.ts';
import type { Source } from './sources.ts';

/** A request the page got wrong (unknown slot, a state that is not text); sent as 400. */
export class MemoryRequestError extends Error {}

export interface RetrievalQuery {
  slot: string;
  state: string;
  taken: string[];
  scoreSoFar: number;
  validActions: string[];
}

interface Loaded {
  file: string;
  mtimeMs: number;
  runtime: MemoryRuntime;
}

export class MemoryViews {
  private readonly loaded = new Map<string, Loaded>();

  /** The memory of `source` as saved now (read again when its file changes); a DataError when there is none. */
  async open(source: Source): Promise<Loaded> {
    const file = memoryFileOf(source);
    const mtimeMs = statSync(file).mtimeMs;
    const cached = this.loaded.get(source.id);
    if (cached && cached.file === file && cached.mtimeMs === mtimeMs) return cached;
    const runtime = await MemoryRuntime.forRetrieval(configOf(source), file).catch((e: unknown) => {
      throw new DataError((e as Error).message);
    });
    cached?.runtime.dispose();
    const fresh = { file, mtimeMs, runtime };
    this.loaded.set(source.id, fresh);
    return fresh;
  }

  async overview(source: Source, slot: string | null, search: string, limit: number) {
    const { file, runtime } = await this.open(source);
    const tips = runtime.tips;
    const slots = tips.slotNames().map((name) => ({ name, size: tips.size(name) }));
    const chosen = slot ?? slots[0]?.name ?? null;
    if (chosen !== null && !tips.slotNames().includes(chosen))
      throw new MemoryRequestError(`${file} has no slot "${chosen}" (slots: ${tips.slotNames().join(', ') || 'none'})`);
    const needle = search.trim().toLowerCase();
    const newestFirst = chosen === null ? [] : tips.entries(chosen).reverse();
    const matching = needle
      ? newestFirst.filter((e) => e.text.toLowerCase().includes(needle) || (e.action ?? '').toLowerCase().includes(needle))
      : newestFirst;
    const m = runtime.cfg.memory;
    const x = runtime.cfg.experimental;
    return {
      file,
      embedder: runtime.embedder.name,
      settings: tips.settings,
      slot_per: m.slot,
      filters: {
        tip_order: x.tip_order,
        skip_taken_actions: x.skip_taken_actions,
        valid_actions_only: x.valid_actions_only,
        match_progress: x.match_progress,
        min_tip_score: x.min_tip_score,
      },
      slots,
      slot: chosen,
      total: tips.size(),
      matching: matching.length,
      entries: matching.slice(0, limit),
    };
  }

  /** The tips `query.state` would be shown, in prompt order, by the training code path. */
  async retrieve(source: Source, query: RetrievalQuery): Promise<{ file: string; tips: ShownTip[] }> {
    const { file, runtime } = await this.open(source);
    if (!runtime.tips.slotNames().includes(query.slot))
      throw new MemoryRequestError(`${file} has no slot "${query.slot}" (slots: ${runtime.tips.slotNames().join(', ') || 'none'})`);
    const [task, variation] = runtime.cfg.memory.slot === 'variation' ? splitVariationSlot(query.slot) : [query.slot, 0];
    const [tips] = await runtime.tipSource()([
      {
        episode: 0,
        job: { task, variation, group: 0 },
        state: query.state,
        taken: query.taken,
        scoreSoFar: query.scoreSoFar,
        validActions: query.validActions,
        oracleAction: () => null,
      },
    ]);
    return { file, tips };
  }

  dispose(): void {
    for (const l of this.loaded.values()) l.runtime.dispose();
    this.loaded.clear();
  }
}

function splitVariationSlot(slot: string): [string, number] {
  const at = slot.lastIndexOf('#');
  const variation = Number(slot.slice(at + 1));
  if (at < 0 || !Number.isInteger(variation))
    throw new MemoryRequestError(`slot "${slot}" is not task#variation, but the run keeps a memory per variation (memory.slot: variation)`);
  return [slot.slice(0, at), variation];
}

function memoryFileOf(source: Source): string {
  if (source.kind === 'adapt') {
    const file = join(source.path, 'memory.json');
    if (!existsSync(file)) throw new DataError(`${source.path} has no memory.json (adapt --method tips writes it when its trials end)`);
    return file;
  }
  if (source.kind !== 'run')
    throw new DataError(`${source.path} is a ${source.kind} folder: only runs and adapt outputs have a tip memory`);
  try {
    return findMemoryFile(source.path);
  } catch (e) {
    throw new DataError((e as Error).message);
  }
}

/** The settings retrieval used: the run's config.yaml, or the memory settings an adapt output records. */
function configOf(source: Source): Config {
  try {
    if (source.kind === 'adapt') {
      // An adapt.json from before the experimental section gives its tip filters under memory (validateConfig reads them there).
      const { memory, experimental } = readAdaptReport(source.path);
      return memory
        ? validateConfig({ memory, ...(experimental ? { experimental } : {}) }, join(source.path, 'adapt.json'))
        : loadConfig(null);
    }
    return loadConfig(join(source.path, 'config.yaml'));
  } catch (e) {
    throw new DataError((e as Error).message);
  }
}
