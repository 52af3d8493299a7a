/** The tip-reading warm-up: example construction rules, the supervised step, and the CLI's model directory. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { createEnv, environmentCorpus } from '../envs/index.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { loadModelDir } from '../policy/tfjs/checkpoint.ts';
import { Rng } from '../util/rng.ts';
import { TIPS_HEADER, TIP_CLOSE, TIP_OPEN } from './prompt.ts';
import { train } from './trainer.ts';
import { createEngine } from '../policy/create-engine.ts';
import { buildWarmupExamples, makeExample, measureTipFollowing, runTipWarmup, TipRehearsal, tipWarmupSettings } from './tip-warmup.ts';
import { warmupModelDir } from '../cli/commands/warmup.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-warmup-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const cfg = loadConfig(null, [
  ...TINY_MODEL,
  'seed=3',
  'env.tasks=[unlock]',
  'memory.top_k=3',
  'experimental.tip_order=best_last',
  'experimental.tip_warmup_examples=64',
  'experimental.tip_warmup_epochs=2',
]);

beforeAll(async () => {
  await initBackend();
});

/** The tips of a decoded prompt, in the order shown, as (action, score). */
function shownTips(text: string): { action: string; score: number }[] {
  const block = text.includes(TIPS_HEADER) ? text.slice(text.indexOf(TIPS_HEADER)) : '';
  return [
    ...block.matchAll(new RegExp(`${TIP_OPEN} .*? The action you took was (.*?); you finally scored (\\d+)/100\\. ${TIP_CLOSE}`, 'g')),
  ].map((m) => ({ action: m[1], score: Number(m[2]) }));
}

describe('warm-up examples', () => {
  it('target: the best tip when it scored, else an action no tip names; tips ordered by experimental.tip_order', async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const env = await createEnv(cfg.env);
    const tok = engine.tokenizer;
    const state = {
      task: 'unlock',
      description: 'Unlock the door.',
      turns: [{ observation: 'You are in the hall.' }],
      valid: ['go to attic', 'open box', 'look around', 'inventory'],
    };
    const rng = new Rng(11);
    const counts = { follow: 0, avoid: 0, none: 0 };
    for (let i = 0; i < 200; i++) {
      if (i % 25 === 0) await new Promise((r) => setImmediate(r));
      for (const bestLast of [true, false]) {
        const x = makeExample(
          state,
          { maxTips: 3, bestLast, credit: 'final', reflection: true, prompt: { history: 2, showValidActions: false, system: '' } },
          { summaries: ['Final 0/100.'], otherActions: ['take key', 'go to cellar'], tokenizer: tok, rng },
        );
        const tips = shownTips(tok.decode(x.prompt));
        expect(state.valid).toContain(x.action);
        expect(tok.decode(x.response)).toBe(x.action + '<|im_end|>');
        if (tips.length === 0) {
          expect(x.followsTip).toBeNull();
          counts.none++;
          continue;
        }
        const scores = tips.map((t) => t.score);
        const sorted = [...scores].sort((a, b) => (bestLast ? a - b : b - a));
        expect(scores).toEqual(sorted);
        const best = bestLast ? tips[tips.length - 1] : tips[0];
        if (best.score > 0 && state.valid.includes(best.action)) {
          expect(x.followsTip).toBe(true);
          expect(x.action).toBe(best.action);
          counts.follow++;
        } else {
          expect(x.followsTip).toBe(false);
          const untried = state.valid.filter((a) => !tips.some((t) => t.action === a));
          if (untried.length) expect(untried).toContain(x.action);
          counts.avoid++;
        }
      }
    }
    // All three kinds occur in a reasonable mix (no tips 25%; the best tip is followed in most of the rest).
    expect(counts.none).toBeGreaterThan(50);
    expect(counts.follow).toBeGreaterThan(75);
    expect(counts.avoid).toBeGreaterThan(25);
    await env.close();
    engine.dispose();
  });

  it('experimental.step_tip_reflection false: the made-up tips carry no summary, as the memory would write them', async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const tok = engine.tokenizer;
    const state = {
      task: 'unlock',
      description: 'Unlock the door.',
      turns: [{ observation: 'You are in the hall.' }],
      valid: ['go to attic', 'open box'],
    };
    const rng = new Rng(5);
    let shown = 0;
    for (let i = 0; i < 20; i++) {
      const text = tok.decode(
        makeExample(
          state,
          { maxTips: 2, bestLast: true, credit: 'gain', reflection: false, prompt: { history: 2, showValidActions: false, system: '' } },
          { summaries: ['Final 0/100.'], otherActions: ['take key'], tokenizer: tok, rng },
        ).prompt,
      );
      expect(text).not.toContain('Final 0/100.');
      shown += text.split(`${TIP_OPEN} The action you took was `).length - 1;
    }
    expect(shown).toBeGreaterThan(10);
    engine.dispose();
  });

  it('builds deterministic examples from train-split random episodes', async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const env = await createEnv(cfg.env);
    const s = tipWarmupSettings(cfg);
    const a = await buildWarmupExamples(env, ['unlock'], engine.tokenizer, s);
    const b = await buildWarmupExamples(env, ['unlock'], engine.tokenizer, s);
    expect(a).toHaveLength(64);
    expect(a.map((x) => [x.prompt, x.response])).toEqual(b.map((x) => [x.prompt, x.response]));
    const c = await buildWarmupExamples(env, ['unlock'], engine.tokenizer, { ...s, seed: s.seed + 1 });
    expect(c.map((x) => x.prompt)).not.toEqual(a.map((x) => x.prompt));
    await env.close();
    engine.dispose();
  });
});

describe('warm-up training', () => {
  it('lowers the target NLL, and measureTipFollowing agrees with a direct softmax over valid actions', async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const env = await createEnv(cfg.env);
    const s = { ...tipWarmupSettings(cfg), examples: 96, epochs: 3, lr: 1e-2 };
    const examples = await buildWarmupExamples(env, ['unlock'], engine.tokenizer, s);
    const report = await runTipWarmup(engine, examples, s);
    expect(report.steps).toBe(9);
    expect(report.lastLoss).toBeLessThan(report.firstLoss);

    // Independent check of one example's target probability: score each valid action by hand.
    const x = examples.find((e) => e.followsTip === true)!;
    const end = engine.tokenizer.tokenToId('<|im_end|>')!;
    const totals = [];
    for (const a of x.valid) {
      const [lp] = await engine.logprobs([{ prompt: x.prompt, response: [...engine.tokenizer.encode(a), end] }]);
      totals.push(lp.reduce((p, q) => p + q, 0));
    }
    const z = totals.reduce((p, q) => p + Math.exp(q), 0);
    const expected = Math.exp(totals[x.valid.indexOf(x.action)]) / z;
    const m = await measureTipFollowing(engine, [x]);
    expect(m.followProbability).toBeCloseTo(expected, 4);
    expect(m.uniformProbability).toBeCloseTo(1 / x.valid.length, 12);
    expect(m.follow).toBe(totals[x.valid.indexOf(x.action)] === Math.max(...totals) ? 1 : 0);
    await env.close();
    engine.dispose();
  });

  it('train() runs the warm-up before RL when experimental.tip_warmup_examples > 0 and records it', async () => {
    const runDir = join(root, 'run');
    const lines: string[] = [];
    await train(
      loadConfig(null, [
        ...TINY_MODEL,
        `run_dir=${runDir}`,
        'env.tasks=[unlock]',
        'env.max_steps=4',
        'env.eval_variations=1',
        'rollout.tasks_per_batch=1',
        'rollout.group_size=2',
        'train.iterations=1',
        'train.eval_every=0',
        'experimental.tip_warmup_examples=32',
        'experimental.tip_warmup_epochs=1',
      ]),
      { resume: false, log: (l) => lines.push(l) },
    );
    const report = JSON.parse(readFileSync(join(runDir, 'tip-warmup.json'), 'utf8'));
    expect(report.examples).toBe(32);
    expect(report.steps).toBe(1);
    expect(lines.some((l) => l.startsWith('tip warm-up: epoch 1/1'))).toBe(true);
  });
});

describe('tip rehearsal (experimental.tip_rehearsal)', () => {
  const rcfg = { ...cfg, experimental: { ...cfg.experimental, tip_rehearsal: 16, tip_rehearsal_lr: 1e-2 } };

  it('replays only prompts with tips, the same batch for the same iteration, and lowers their NLL', async () => {
    const { engine } = await createEngine(rcfg, 'fresh', () => environmentCorpus(rcfg.env));
    const env = await createEnv(rcfg.env);
    const r = await TipRehearsal.build(env, ['unlock'], engine.tokenizer, rcfg);
    // About 75% of warm-up examples show tips; the rest are left out.
    expect(r.pool.length).toBeGreaterThan(0.65 * TipRehearsal.POOL_SIZE);
    expect(r.pool.length).toBeLessThan(0.85 * TipRehearsal.POOL_SIZE);
    for (const x of r.pool.slice(0, 50)) {
      expect(x.followsTip).not.toBeNull();
      expect(shownTips(engine.tokenizer.decode(x.prompt)).length).toBeGreaterThan(0);
    }
    const b3 = r.batchFor(3);
    expect(b3).toHaveLength(16);
    expect(new Set(b3).size).toBe(16);
    expect(r.batchFor(3)).toEqual(b3);
    expect(r.batchFor(4)).not.toEqual(b3);

    // The reported NLL is the batch's mean −log π(target) before the step, scored independently.
    const before = await engine.logprobs(b3);
    const expected = -before.flat().reduce((a, b) => a + b, 0) / before.flat().length;
    const first = await r.step(engine, 3);
    expect(first).toBeCloseTo(expected, 5);
    let last = first;
    for (let k = 0; k < 4; k++) last = await r.step(engine, 3);
    expect(last).toBeLessThan(first);
    await env.close();
    engine.dispose();
  });

  it('train() rehearses after every update and records the NLL per iteration', async () => {
    const runDir = join(root, 'rehearse');
    const lines: string[] = [];
    await train(
      loadConfig(null, [
        ...TINY_MODEL,
        `run_dir=${runDir}`,
        'env.tasks=[unlock]',
        'env.max_steps=4',
        'env.eval_variations=1',
        'rollout.tasks_per_batch=1',
        'rollout.group_size=2',
        'train.iterations=2',
        'train.eval_every=0',
        'experimental.tip_rehearsal=8',
      ]),
      { resume: false, log: (l) => lines.push(l) },
    );
    const train_ = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((m) => m.type === 'train');
    expect(train_).toHaveLength(2);
    for (const m of train_) expect(m.tip_rehearsal_nll).toBeGreaterThan(0);
    expect(lines.some((l) => /tip rehearsal: 8 of \d+ examples after every update/.test(l))).toBe(true);
    expect(lines.filter((l) => / \| tip NLL \d+\.\d\d \| /.test(l))).toHaveLength(2);
  });
});

describe('empo2 warmup (model directory)', () => {
  it('saves a loadable model with warmup.json, and refuses to overwrite a model', async () => {
    const out = join(root, 'model');
    const logs: string[] = [];
    const summary = (await warmupModelDir(
      { ...cfg, experimental: { ...cfg.experimental, tip_warmup_examples: 32, tip_warmup_epochs: 1 } },
      out,
      (l) => logs.push(l),
    )) as { after: Record<string, unknown> };
    for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'warmup.json']) expect(existsSync(join(out, f))).toBe(true);
    expect(Object.keys(summary.after)).toEqual(['same_tasks', 'other_tasks']);
    const loaded = loadModelDir(out);
    expect(loaded.model.config.hidden_size).toBe(32);
    loaded.model.dispose();
    await expect(warmupModelDir(cfg, out, () => {})).rejects.toThrow(/already holds a model/);
    // ~45 s on an idle 2-core machine (tokenizer training and 400 measured prompts, twice); the
    // margin is for machines that share their cores with other work.
  }, 300_000);
});
