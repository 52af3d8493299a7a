/**
 * results/strong-writer/memory-only.ts, issue #89's memory-only result, end to end on the tiny model:
 * `empo2 serve`'s server started by the driver on a saved tiny model, the stand-in writer, the two memory
 * proxies, the agent over OpenAI chat. Episodes longer than the writer's 12 shown steps (14 here), so the
 * stand-in places them by their description. Stopped after 5 episodes and resumed; a memory episode whose
 * report did not reach the database is played again, one whose report did is kept; the report computes
 * the paired difference from the state file.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config/load.ts';
import { environmentCorpus } from '../src/envs/index.ts';
import { sqlite } from '../src/memory-proxy/sqlite.ts';
import { createEngine } from '../src/policy/create-engine.ts';
import { initBackend } from '../src/policy/tfjs/backend.ts';
import { passes, playKey, runMemoryOnly, type MemoryOnlyState } from '../results/strong-writer/memory-only.ts';
import { summarizeMemoryOnly } from '../results/strong-writer/memory-only-report.ts';
import { TINY_MODEL } from './support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-memory-only-'));
const modelDir = join(root, 'model');
const out = join(root, 'out');
const TRIALS = 3;
let sets: string[];

beforeAll(async () => {
  await initBackend();
  const cfg = loadConfig(null, [...TINY_MODEL, 'env.tasks=[power, clue]']);
  const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
  await engine.save(modelDir);
  engine.dispose();
  sets = [
    ...TINY_MODEL,
    `model.path=${modelDir}`,
    'seed=2',
    'env.tasks=[power, clue]',
    'env.eval_split=test',
    'env.eval_variations=2',
    'env.max_steps=14',
    'rollout.eval_temperature=1',
  ];
}, 120_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const readState = (): MemoryOnlyState => JSON.parse(readFileSync(join(out, 'state.json'), 'utf8'));
const run = (stopAfter?: number) => runMemoryOnly({ config: null, sets, out, trials: TRIALS, stopAfter, log: () => {} });

describe('the memory-only driver (issue #89)', () => {
  it('plays both arms over the trials, resumes, and the memory arm is shown what its earlier trials wrote', async () => {
    await run(5);
    const partial = readState();
    expect(Object.keys(partial.plays)).toHaveLength(5);
    expect(summarizeMemoryOnly(partial).markdown).toContain('PARTIAL');

    const state = await run();
    const planned = passes(TRIALS).length * 4;
    expect(state.episodes).toEqual([
      { task: 'power', variation: 250 },
      { task: 'power', variation: 251 },
      { task: 'clue', variation: 250 },
      { task: 'clue', variation: 251 },
    ]);
    expect(Object.keys(state.plays)).toHaveLength(planned);
    // What the first call recorded is kept as it was.
    for (const [k, p] of Object.entries(partial.plays)) expect(state.plays[k]).toEqual(p);

    const plays = Object.values(state.plays);
    expect(plays.some((p) => p.steps > 12)).toBe(true);
    for (const p of plays) {
      if (p.arm === 'no-memory' || p.trial === 1) expect(p.steps_with_tips, `${p.arm} ${p.trial} ${p.episode}`).toBe(0);
      // Trial 2 on: the first observation is the one trial 1 stored its tips under, so tips are shown.
      else expect(p.steps_with_tips).toBeGreaterThan(0);
      if (p.arm === 'memory') {
        expect(p.reported).toBe(true);
        expect(p.tip_skipped).toBeNull();
        // A later trial that repeats an earlier one's steps and score adds no tip the slot holds already.
        if (p.trial === 1) expect(p.tips_added).toBeGreaterThan(0);
        else expect(p.tips_added).toBeGreaterThanOrEqual(0);
      }
    }
    // Trial 1 shows no tip in either arm and the calls are seeded alike: the pass-through plays the same episodes.
    for (let e = 0; e < 4; e++)
      expect(state.plays[playKey('no-memory', 1, e)].actions).toEqual(state.plays[playKey('memory', 1, e)].actions);

    // The stand-in's tips are the solver's plans, one slot per episode.
    const Db = sqlite();
    const db = new Db(join(out, 'memory.sqlite'), { readonly: true });
    const tips = db.prepare<{ slot: string; text: string }>('SELECT slot, text FROM tips').all();
    db.close();
    expect(new Set(tips.map((t) => t.slot))).toEqual(new Set(['power#250', 'power#251', 'clue#250', 'clue#251']));
    expect(tips.every((t) => t.text.startsWith('To '))).toBe(true);

    const summary = summarizeMemoryOnly(state);
    expect(summary.recorded).toBe(planned);
    expect(summary.paired!.seeds).toEqual([0, 1, 2, 3]);
    expect(summary.pairedPlays).toBe(8);
    expect(summary.paired!.ci95).not.toBeNull();
    const byHand = [0, 1, 2, 3].map((e) => {
      const d = [2, 3].map((t) => state.plays[playKey('memory', t, e)].score - state.plays[playKey('no-memory', t, e)].score);
      return (d[0] + d[1]) / 2;
    });
    expect(summary.paired!.diffs).toEqual(byHand);
    expect(summary.markdown).toContain("stand-in (the environment's solver, not a model)");
    expect(summary.markdown).not.toContain('PARTIAL');
    expect(summary.markdown).toContain('4 of 4 episodes took the same actions in both arms');
  }, 600_000);

  it('plays a memory episode again when its report did not reach the database, and keeps one whose report did', async () => {
    const state = readState();
    const lost = playKey('memory', TRIALS, 0);
    const reached = playKey('memory', TRIALS, 1);
    const lostId = state.plays[lost].proxy_episode;
    state.plays[lost] = { ...state.plays[lost], reported: false, proxy_episode: 'mp-never-reported' };
    state.plays[reached] = { ...state.plays[reached], reported: false };
    writeFileSync(join(out, 'state.json'), JSON.stringify(state));
    const after = await run();
    expect(after.plays[reached]).toEqual({ ...state.plays[reached], reported: true });
    expect(after.plays[lost].reported).toBe(true);
    expect(after.plays[lost].proxy_episode).not.toBe('mp-never-reported');
    expect(after.plays[lost].proxy_episode).not.toBe(lostId);
    expect(Object.keys(after.plays)).toHaveLength(passes(TRIALS).length * 4);
  }, 300_000);
});
