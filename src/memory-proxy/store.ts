/**
 * The proxy's tip memory on disk: an SQLite database (./sqlite.ts) that every stored tip reaches
 * before the proxy tells the agent its episode is recorded, with the retrieval index (./tip-index.ts)
 * rebuilt from it when the proxy starts.
 *
 * Durability: write-ahead log and `synchronous = FULL`, and one transaction per ended episode, so a
 * tip whose episode was answered "recorded" survives the process being killed (and the machine losing
 * power); an episode killed half-way stores nothing of itself rather than part.
 *
 * A slot keeps its newest `capacity` tips, as the trainer's memory does: the ones evicted are deleted
 * in the same transaction, so the database and the index hold the same tips. The database exports to
 * a run's memory.json (`{embedder, tips, novelty}`, ../trainer/memory-runtime.ts) and imports from one.
 */
import { existsSync } from 'node:fs';
import { TipMemory, type MemorySettings, type SerializedMemory } from '../memory/store.ts';
import { sqlite, type Database, type Statement } from './sqlite.ts';
import { denseKey, sparseKey, TipIndex, type SparseKey } from './tip-index.ts';

/** What a database is keyed by: fixed when it is created, checked when it is opened. */
export interface StoreIdentity {
  /** The embedder's name (e.g. hashed-tfidf-1024): keys of another would not compare. */
  embedder: string;
  dim: number;
}

export interface NewTip {
  slot: string;
  text: string;
  score: number;
  action: string | null;
  progress: number | null;
  key: Float32Array;
}

export interface StoredEpisode {
  id: string;
  task: string;
  score: number | null;
  calls: number;
  tipsAdded: number;
  /** Why no tip was written (the writer failed), or null. */
  skipped: string | null;
}

export interface TipRow {
  id: number;
  slot: string;
  text: string;
  score: number;
  action: string | null;
  progress: number | null;
  episode: string | null;
  created_at: string;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tips (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  slot TEXT NOT NULL,
  text TEXT NOT NULL,
  score REAL NOT NULL,
  action TEXT,
  progress REAL,
  key_idx BLOB NOT NULL,
  key_val BLOB NOT NULL,
  episode TEXT,
  created_at TEXT NOT NULL,
  UNIQUE (slot, text)
);
CREATE INDEX IF NOT EXISTS tips_by_slot ON tips (slot, id);
CREATE TABLE IF NOT EXISTS episodes (
  id TEXT PRIMARY KEY,
  task TEXT NOT NULL,
  score REAL,
  calls INTEGER NOT NULL,
  tips_added INTEGER NOT NULL,
  skipped TEXT,
  ended_at TEXT NOT NULL
);
`;

const FORMAT = 'empo2-memory-proxy';
const VERSION = '1';

function blob(a: ArrayBufferView): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

function keyOf(idx: Buffer, val: Buffer, dim: number): SparseKey {
  // Copied out: the row's buffers may share memory that SQLite reuses.
  const v = new Float32Array(new Uint8Array(val).buffer);
  const i = dim <= 65536 ? new Uint16Array(new Uint8Array(idx).buffer) : new Uint32Array(new Uint8Array(idx).buffer);
  return { idx: i, val: v };
}

export class TipStore {
  readonly index: TipIndex;
  private readonly insert: Statement;
  private readonly remove: Statement;
  private readonly insertEpisode: Statement;

  private constructor(
    readonly file: string,
    readonly db: Database,
    readonly identity: StoreIdentity,
    readonly settings: MemorySettings,
  ) {
    this.index = new TipIndex(identity.dim, settings);
    this.insert = db.prepare(
      'INSERT INTO tips (slot, text, score, action, progress, key_idx, key_val, episode, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.remove = db.prepare('DELETE FROM tips WHERE id = ?');
    this.insertEpisode = db.prepare(
      'INSERT OR REPLACE INTO episodes (id, task, score, calls, tips_added, skipped, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
  }

  /**
   * Opens (or, with `create`, creates) the database at `file`. A database keyed by another embedder or
   * dimension is refused; the retrieval settings are the caller's (they may change between starts).
   */
  static open(file: string, o: { identity: StoreIdentity; settings: MemorySettings; create: boolean }): TipStore {
    if (!o.create && !existsSync(file)) throw new Error(`${file} does not exist`);
    const Db = sqlite();
    const db = new Db(file, { timeout: 10_000 });
    try {
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
      db.exec(SCHEMA);
      const meta = new Map(
        db
          .prepare<{ key: string; value: string }>('SELECT key, value FROM meta')
          .all()
          .map((r) => [r.key, r.value]),
      );
      if (meta.size === 0) {
        const put = db.prepare('INSERT INTO meta (key, value) VALUES (?, ?)');
        db.transaction(() => {
          put.run('format', FORMAT);
          put.run('version', VERSION);
          put.run('embedder', o.identity.embedder);
          put.run('dim', String(o.identity.dim));
        })();
      } else {
        if (meta.get('format') !== FORMAT || meta.get('version') !== VERSION)
          throw new Error(`${file}: not an empo2 memory-proxy database (format ${meta.get('format')} version ${meta.get('version')})`);
        if (meta.get('embedder') !== o.identity.embedder || Number(meta.get('dim')) !== o.identity.dim)
          throw new Error(
            `${file} was written with embedder ${meta.get('embedder')} (dim ${meta.get('dim')}), but this proxy uses ${o.identity.embedder} (dim ${o.identity.dim}): keys would not compare`,
          );
      }
      const store = new TipStore(file, db, o.identity, o.settings);
      store.load();
      return store;
    } catch (e) {
      db.close();
      throw e;
    }
  }

  /** The identity a database was created with (for `memory show` and export, which take it from the file). */
  static identityOf(file: string): StoreIdentity {
    if (!existsSync(file)) throw new Error(`${file} does not exist`);
    const Db = sqlite();
    const db = new Db(file, { readonly: true, fileMustExist: true });
    try {
      const meta = new Map(
        db
          .prepare<{ key: string; value: string }>('SELECT key, value FROM meta')
          .all()
          .map((r) => [r.key, r.value]),
      );
      if (meta.get('format') !== FORMAT) throw new Error(`${file}: not an empo2 memory-proxy database`);
      return { embedder: meta.get('embedder')!, dim: Number(meta.get('dim')) };
    } catch (e) {
      if ((e as Error).message.includes('no such table')) throw new Error(`${file}: not an empo2 memory-proxy database`);
      throw e;
    } finally {
      db.close();
    }
  }

  /** The index built from the rows, oldest first (a slot over capacity, after a smaller capacity is set, is cut now). */
  private load(): void {
    const rows = this.db
      .prepare<TipRow & { key_idx: Buffer; key_val: Buffer }>(
        'SELECT id, slot, text, score, action, progress, key_idx, key_val FROM tips ORDER BY id',
      )
      .iterate();
    const evicted: number[] = [];
    for (const r of rows) {
      const tip = { id: r.id, text: r.text, score: r.score, action: r.action, progress: r.progress };
      for (const e of this.index.add(r.slot, tip, keyOf(r.key_idx, r.key_val, this.identity.dim))) evicted.push(e.id);
    }
    if (evicted.length) this.db.transaction(() => evicted.forEach((id) => this.remove.run(id)))();
  }

  /**
   * Stores an ended episode's tips and its record in one transaction (committed, with the WAL synced,
   * when this returns); returns the tips added (a text its slot already holds is stored once).
   */
  addEpisode(episode: StoredEpisode, tips: readonly NewTip[]): number {
    const now = new Date().toISOString();
    const staged: { slot: string; id: number; tip: NewTip; key: SparseKey }[] = [];
    const seen = new Set<string>();
    const commit = this.db.transaction(() => {
      for (const t of tips) {
        if (this.index.has(t.slot, t.text) || seen.has(`${t.slot}\u0000${t.text}`)) continue;
        seen.add(`${t.slot}\u0000${t.text}`);
        const key = sparseKey(t.key);
        const r = this.insert.run(t.slot, t.text, t.score, t.action, t.progress, blob(key.idx), blob(key.val), episode.id, now);
        staged.push({ slot: t.slot, id: Number(r.lastInsertRowid), tip: t, key });
      }
      this.insertEpisode.run(episode.id, episode.task, episode.score, episode.calls, staged.length, episode.skipped, now);
      // Evictions are worked out on the index after the commit; rows are deleted here, before it, so both agree.
      for (const [slot, n] of countBySlot(staged)) {
        const over = this.index.size(slot) + n - this.settings.capacity;
        if (over > 0)
          this.db.prepare('DELETE FROM tips WHERE id IN (SELECT id FROM tips WHERE slot = ? ORDER BY id LIMIT ?)').run(slot, over);
      }
    });
    commit();
    for (const s of staged) {
      const { text, score, action, progress } = s.tip;
      this.index.add(s.slot, { id: s.id, text, score, action, progress }, s.key);
    }
    return staged.length;
  }

  /** Rows, newest first, per slot at most `limit`. */
  newest(limit: number, slot?: string): { slot: string; size: number; tips: TipRow[] }[] {
    const slots =
      slot !== undefined
        ? [slot]
        : this.db
            .prepare<{ slot: string }>('SELECT DISTINCT slot FROM tips ORDER BY slot')
            .all()
            .map((r) => r.slot);
    const count = this.db.prepare<{ n: number }>('SELECT COUNT(*) AS n FROM tips WHERE slot = ?');
    const rows = this.db.prepare<TipRow>(
      'SELECT id, slot, text, score, action, progress, episode, created_at FROM tips WHERE slot = ? ORDER BY id DESC LIMIT ?',
    );
    return slots.map((s) => ({ slot: s, size: count.get(s)!.n, tips: rows.all(s, limit) }));
  }

  count(): { tips: number; episodes: number; slots: number } {
    const one = (sql: string) => this.db.prepare<{ n: number }>(sql).get()!.n;
    return {
      tips: one('SELECT COUNT(*) AS n FROM tips'),
      episodes: one('SELECT COUNT(*) AS n FROM episodes'),
      slots: one('SELECT COUNT(DISTINCT slot) AS n FROM tips'),
    };
  }

  /** The tips as a run's memory.json holds its memory (`{embedder, tips, novelty}`), oldest first per slot. */
  exportRunMemory(): {
    embedder: string;
    tips: SerializedMemory;
    novelty: { threshold: number; capacity: number; slots: Record<string, never> };
  } {
    // TipMemory holds room for `capacity` keys per slot from its first tip: as many as the fullest slot has, not the setting.
    const fullest =
      this.db.prepare<{ n: number | null }>('SELECT MAX(n) AS n FROM (SELECT COUNT(*) AS n FROM tips GROUP BY slot)').get()!.n ?? 0;
    const memory = new TipMemory(this.identity.dim, { ...this.settings, capacity: Math.max(1, fullest) });
    const rows = this.db
      .prepare<TipRow & { key_idx: Buffer; key_val: Buffer }>(
        'SELECT slot, text, score, action, progress, key_idx, key_val FROM tips ORDER BY id',
      )
      .iterate();
    for (const r of rows)
      memory.add(
        r.slot,
        denseKey(keyOf(r.key_idx, r.key_val, this.identity.dim), this.identity.dim),
        r.text,
        r.score,
        r.action,
        r.progress,
      );
    // A proxy counts no visits, so the novelty list is empty; the trainer fills its own (algo.novelty_threshold applies).
    return { embedder: this.identity.embedder, tips: memory.toJSON(), novelty: { threshold: 0, capacity: 0, slots: {} } };
  }

  /** Adds the tips of a run's memory.json (an episode named `where` records the import); returns the tips added. */
  importRunMemory(saved: unknown, where: string): number {
    const m = saved as { embedder?: unknown; tips?: unknown };
    if (typeof m !== 'object' || m === null || !('tips' in m)) throw new Error(`${where}: not a run's memory.json (no "tips")`);
    if (m.embedder !== this.identity.embedder)
      throw new Error(
        `${where} was written with embedder ${String(m.embedder)}, but ${this.file} uses ${this.identity.embedder}: keys would not compare`,
      );
    const memory = TipMemory.fromJSON(m.tips, where);
    if (memory.dim !== this.identity.dim)
      throw new Error(`${where}: keys have ${memory.dim} dimensions, ${this.file} has ${this.identity.dim}`);
    const tips: NewTip[] = [];
    const keys = memory.toJSON().slots;
    for (const slot of memory.slotNames()) {
      const bytes = Buffer.from(keys[slot].keys, 'base64');
      const all = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
      memory.entries(slot).forEach((e, i) =>
        tips.push({
          slot,
          text: e.text,
          score: e.score,
          action: e.action,
          progress: e.progress,
          key: all.subarray(i * memory.dim, (i + 1) * memory.dim),
        }),
      );
    }
    return this.addEpisode(
      { id: `import-${new Date().toISOString()}`, task: where, score: null, calls: 0, tipsAdded: 0, skipped: null },
      tips,
    );
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}

function countBySlot(staged: readonly { slot: string }[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const s of staged) m.set(s.slot, (m.get(s.slot) ?? 0) + 1);
  return m;
}
