/**
 * Reflexion beside the tip memory (`empo2 adapt --method reflexion`), with the tiny default model:
 * plans written after failed trials only, the last k of a variation in its own next prompts (read
 * from the prompts the engine was given), solved variations not played again, one report row per trial.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { SUCCESS_SCORE } from '../envs/types.ts';
import { reflexionQuery, type PastReflection } from '../memory/reflexion.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { Tokenizer } from '../policy/tokenizer.ts';
import { reflectionRender } from '../trainer/memory-runtime.ts';
import { INSTRUCT_SYSTEM_PROMPT, REFLECTIONS_HEADER, renderReflections, startDialogue } from '../trainer/prompt.ts';
import { promptSettings } from '../trainer/prompt-style.ts';
import { reflexion, type ReflexionTrialResult } from './reflexion.ts';
import { TRIAL_STATE_FILE } from './trials.ts';
import { createEngine } from '../policy/create-engine.ts';
import { REPO_ROOT } from '../../test/support/python.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { environmentCorpus } from '../envs/index.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-reflexion-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
// An untrained tiny model decoding among the valid actions plays like a random policy: on these 12
// `clue` variations, 8 steps each, it solves one in the first trial and fails the rest, which is what is tested.
const cfg = loadConfig(null, [
  `run_dir=${join(root, 'run')}`,
  'seed=4',
  ...TINY_MODEL,
  'env.max_steps=8',
  'rollout.constrained=true',
  'rollout.eval_temperature=1',
]);
const TASK = 'clue';
const VARIATIONS = 12;
const TRIALS = 4;
const WINDOW = 2;

beforeAll(async () => {
  await initBackend();
});

/** The instruction that opens every reflection query (src/memory/reflexion.ts). */
const REFLECTION_QUERY = 'Devise a concise, new plan of action';

describe('empo2 adapt --method reflexion', () => {
  let results: ReflexionTrialResult[];
  /** The prompts of each generate call, decoded, in order. */
  const calls: string[][] = [];
  const out = join(root, 'reflexion');
  const lines: string[] = [];

  beforeAll(async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const generate = vi.spyOn(engine, 'generate');
    results = await reflexion(engine, cfg, {
      task: TASK,
      trials: TRIALS,
      variations: VARIATIONS,
      split: 'test',
      outDir: out,
      window: WINDOW,
      reflectionMaxTokens: 12,
      log: (l) => lines.push(l),
    });
    for (const [prompts] of generate.mock.calls) calls.push(prompts.map((p) => engine.tokenizer.decode(p)));

    engine.dispose();
  }, 600_000);

  /** The generate calls of each trial's episodes, and of the reflections written after it. */
  function callsByTrial(): { episodes: string[][]; reflections: string[] }[] {
    const trials: { episodes: string[][]; reflections: string[] }[] = [{ episodes: [], reflections: [] }];
    for (const prompts of calls) {
      const isReflection = prompts.every((p) => p.includes(REFLECTION_QUERY));
      expect(isReflection || prompts.every((p) => !p.includes(REFLECTION_QUERY))).toBe(true);
      if (isReflection) {
        trials[trials.length - 1].reflections = prompts;
        trials.push({ episodes: [], reflections: [] });
      } else trials[trials.length - 1].episodes.push(prompts);
    }
    return trials.filter((t) => t.episodes.length > 0 || t.reflections.length > 0);
  }

  const variations = () => JSON.parse(readFileSync(join(out, 'adapt.json'), 'utf8')).variations as number[];
  /** The trial in which each variation was first solved (Infinity: never). */
  const solvedIn = () => new Map(variations().map((v, i) => [v, results.findIndex((r) => r.scores[i] >= SUCCESS_SCORE) + 1 || Infinity]));

  it('plays the unsolved variations each trial and writes a plan for each it failed, none for the solved', () => {
    const solved = solvedIn();
    // The random-like policy both solves and fails variations in the first trial.
    expect([...solved.values()].filter((t) => t === 1).length).toBeGreaterThan(0);
    expect([...solved.values()].filter((t) => t > 1).length).toBeGreaterThan(0);
    results.forEach((r, k) => {
      const trial = k + 1;
      const played = variations().filter((v) => solved.get(v)! >= trial);
      const failed = played.filter((v) => solved.get(v)! > trial);
      expect(r.played).toBe(played.length);
      expect(r.reflections.map((p) => p.variation)).toEqual(failed);
      // At most k plans of every variation held.
      expect(r.memory_size).toBe(variations().reduce((n, v) => n + Math.min(WINDOW, Math.min(trial, solved.get(v)! - 1)), 0));
    });
  });

  it('a solved variation is not played again and keeps its full score in every later trial', () => {
    const solved = solvedIn();
    variations().forEach((v, i) => {
      const t = solved.get(v)!;
      for (let later = t; later <= TRIALS; later++) expect(results[later - 1].scores[i]).toBe(SUCCESS_SCORE);
    });
    // Success only grows, since solved variations stay solved.
    for (let k = 1; k < TRIALS; k++) expect(results[k].success_rate).toBeGreaterThanOrEqual(results[k - 1].success_rate);
  });

  it("shows a variation's last k plans, and only its own, in every prompt of its next trial", () => {
    const trials = callsByTrial();
    expect(trials).toHaveLength(TRIALS);
    const solved = solvedIn();
    const memory = new Map<number, PastReflection[]>();
    trials.forEach(({ episodes }, k) => {
      const trial = k + 1;
      const played = variations().filter((v) => solved.get(v)! >= trial);
      // The first call of a trial asks for every episode's first action, in the order of the variations.
      expect(episodes[0]).toHaveLength(played.length);
      played.forEach((v, i) => {
        const prompt = episodes[0][i];
        const shown = memory.get(v) ?? [];
        if (trial === 1) expect(prompt).not.toContain(REFLECTIONS_HEADER);
        else {
          expect(shown.length).toBe(Math.min(WINDOW, trial - 1));
          // The block, its plans oldest first with their trial numbers, opens the user turn before the task.
          expect(prompt).toContain(`<|im_start|>user\n${renderReflections(shown)}Task: `);
          expect(prompt.split(REFLECTIONS_HEADER)).toHaveLength(2);
          // The window drops the oldest plan: in trial 4, the plans of trials 2 and 3.
          if (trial === 4) expect(shown.map((p) => p.trial)).toEqual([2, 3]);
          const others = played.filter((u) => u !== v).flatMap((u) => memory.get(u) ?? []);
          for (const p of others)
            if (p.plan.length >= 4 && !shown.some((s) => s.plan.includes(p.plan))) expect(prompt).not.toContain(p.plan);
        }
      });
      // Later steps keep the block with the task (history 2 cuts older turns, never the task).
      for (const prompts of episodes.slice(1))
        for (const p of prompts) expect(p.split(REFLECTIONS_HEADER)).toHaveLength(trial === 1 ? 1 : 2);
      for (const r of results[k].reflections)
        memory.set(r.variation, [...(memory.get(r.variation) ?? []), { trial, plan: r.plan }].slice(-WINDOW));
    });
    expect(results[TRIALS - 1].played).toBeGreaterThan(0);
  });

  it("asks for each plan with the failed trial and the earlier plans of that variation (Reflexion's query)", () => {
    const trials = callsByTrial();
    const solved = solvedIn();
    trials.forEach(({ reflections }, k) => {
      const trial = k + 1;
      expect(reflections).toHaveLength(results[k].reflections.length);
      results[k].reflections.forEach(({ variation }, i) => {
        const q = reflections[i];
        expect(q).toMatch(
          /STATUS: FAIL \(score \d+(\.\d)?\/100\)\n\nPlans from past attempts:|STATUS: FAIL \(score \d+(\.\d)?\/100\)\n\nNew plan:/,
        );
        expect(q.endsWith('New plan:<|im_end|>\n<|im_start|>assistant\n')).toBe(true);
        const earlier = results
          .slice(Math.max(0, k - WINDOW), k)
          .flatMap((r, j) =>
            r.reflections.filter((p) => p.variation === variation).map((p) => `Trial #${Math.max(0, k - WINDOW) + j + 1}: ${p.plan}\n`),
          );
        expect(earlier.length).toBe(Math.min(WINDOW, trial - 1));
        if (earlier.length) expect(q).toContain('Plans from past attempts:\n' + earlier.join(''));
        else expect(q).not.toContain('Plans from past attempts');
        expect(solved.get(variation)!).toBeGreaterThan(trial);
      });
    });
  });

  it('records every episode played, with the plans its prompts showed and the plan written after it', () => {
    const records = readFileSync(join(out, 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(records).toHaveLength(results.reduce((n, r) => n + r.played, 0));
    const written = new Map<number, string[]>(); // variation -> its plans so far, oldest first
    for (const [k, r] of results.entries()) {
      const trial = k + 1;
      const ofTrial = records.filter((e) => e.trial === trial);
      expect(ofTrial).toHaveLength(r.played);
      const planOf = new Map(r.reflections.map((p) => [p.variation, p.plan]));
      for (const e of ofTrial) {
        expect(e).toMatchObject({ type: 'episode', source: 'adapt', mode: 'reflexion', task: TASK });
        expect(e.plans_shown).toEqual((written.get(e.variation) ?? []).slice(-WINDOW));
        expect(e.reflection).toBe(planOf.get(e.variation) ?? null);
        expect(e.reflection === null).toBe(e.success);
      }
      for (const p of r.reflections) written.set(p.variation, [...(written.get(p.variation) ?? []), p.plan]);
    }
  });

  it("reports one row per trial, printed and saved like adapt's", () => {
    expect(results.map((r) => r.trial)).toEqual([1, 2, 3, 4]);
    for (const r of results) expect(r.scores).toHaveLength(VARIATIONS);
    const saved = JSON.parse(readFileSync(join(out, 'adapt.json'), 'utf8'));
    expect(saved.method).toBe('reflexion');
    expect(saved.reflexion).toEqual({ window: WINDOW, reflection_max_tokens: 12, temperature: 1 });
    expect(saved.trials).toEqual(JSON.parse(JSON.stringify(results)));
    const table = readFileSync(join(out, 'adapt.md'), 'utf8');
    expect(table).toMatch(
      /^\| trial \| mean score \| success \| variations played \| plans per episode \| plans written \| memory entries \|\n/,
    );
    expect(table.trim().split('\n')).toHaveLength(2 + TRIALS);
    expect(table).toContain(
      `| 2 | ${results[1].mean_score.toFixed(1)} | ${(results[1].success_rate * 100).toFixed(0)}% | ${results[1].played} | 1.0 |`,
    );
    expect(lines.some((l) => l.startsWith('trial 4/4: mean score'))).toBe(true);
  });
});

describe('reflexion resumed after a trial', () => {
  it('goes on from the saved trials and ends as a run never stopped: same rows, plans and solved variations', async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const base = {
      task: TASK,
      trials: 3,
      variations: VARIATIONS,
      split: 'test' as const,
      window: WINDOW,
      reflectionMaxTokens: 12,
      resume: true,
      log: () => {},
    };
    const whole = await reflexion(engine, cfg, { ...base, outDir: join(root, 'whole') });
    // Trial 1 solves a variation and writes plans, so what the resume must restore is not empty.
    expect(whole[0].success_rate).toBeGreaterThan(0);
    expect(whole[0].reflections.length).toBeGreaterThan(0);
    const cut = join(root, 'cut');
    const killAfterTrial2 = (l: string) => {
      if (l.startsWith('trial 2/3: mean score')) throw new Error('killed');
    };
    await expect(reflexion(engine, cfg, { ...base, outDir: cut, log: killAfterTrial2 })).rejects.toThrow('killed');
    await expect(reflexion(engine, cfg, { ...base, window: 1, outDir: cut })).rejects.toThrow(/another settings/);
    const lines: string[] = [];
    const resumed = await reflexion(engine, cfg, { ...base, outDir: cut, log: (l) => lines.push(l) });
    expect(lines.some((l) => l.startsWith('resuming after trial 2'))).toBe(true);
    expect(resumed).toEqual(whole);
    expect(existsSync(join(cut, TRIAL_STATE_FILE))).toBe(false);
    engine.dispose();
  }, 600_000);
});

describe('reflexion refuses bad options', () => {
  it('names the option and the value', async () => {
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const base = { task: TASK, trials: 1, variations: 1, split: 'test' as const, outDir: join(root, 'bad'), log: () => {} };
    await expect(reflexion(engine, cfg, { ...base, window: 0 })).rejects.toThrow('--reflections must be a positive integer, got 0');
    await expect(reflexion(engine, cfg, { ...base, reflectionMaxTokens: 2.5 })).rejects.toThrow(
      '--reflection-max-tokens must be a positive integer, got 2.5',
    );
    await expect(reflexion(engine, cfg, { ...base, trials: 0 })).rejects.toThrow('--trials must be a positive integer, got 0');
    await expect(reflexion(engine, cfg, { ...base, task: 'nope' })).rejects.toThrow(/unknown task "nope".*clue/);
    engine.dispose();
  });
});

const SMOLLM2 = join(REPO_ROOT, 'models', 'smollm2-135m-instruct');
const installed = existsSync(join(SMOLLM2, 'tokenizer.json'));

describe.skipIf(!installed)(
  `with SmolLM2-135M-Instruct's tokenizer and chat template (model.path; the model is not run)${installed ? '' : ": SKIPPED, models/smollm2-135m-instruct is absent (run 'npm run setup')"}`,
  () => {
    // Read in beforeAll: a skipped describe's body still runs when vitest collects it, without the model.
    let real: ReturnType<typeof loadConfig>;
    let tokenizer: Tokenizer;
    beforeAll(() => {
      real = loadConfig(null, [`model.path=${SMOLLM2}`]);
      tokenizer = Tokenizer.fromFile(join(SMOLLM2, 'tokenizer.json'));
    });
    const plans: PastReflection[] = [
      { trial: 1, plan: 'I opened the wrong box. Next time I will read the note first, then open the box it names.' },
    ];

    it("shows the plans in the first user message of the model's own template, after the system prompt", () => {
      const s = promptSettings(real);
      expect(s.template).toBeDefined();
      const d = startDialogue(tokenizer, s, {
        task: 'Take the candle.',
        observation: 'You are in the attic.',
        validActions: ['read note', 'go to porch'],
        reflections: plans,
      });
      expect(tokenizer.decode(d.prompt().ids)).toBe(
        `<|im_start|>system\n${INSTRUCT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n${REFLECTIONS_HEADER}\nTrial 1:\n${plans[0].plan}\nHere is the task:\n` +
          'Task: Take the candle.\n\nYou are in the attic.\n\nValid actions: read note, go to porch<|im_end|>\n<|im_start|>assistant\n',
      );
    });

    it('asks for the plan as a user message in the same template, ending with "New plan:"', () => {
      const trajectory = {
        task: 'Take the candle.',
        steps: [{ observation: 'You are in the attic.', action: 'open blue box', score: 0 }],
        finalObservation: 'The boxes lock.',
        score: 0,
        success: false,
      };
      const text = reflectionRender(real)([{ role: 'user', content: reflexionQuery(trajectory, plans) }]);
      expect(text).toMatch(
        /^<\|im_start\|>system\n[^]*<\|im_end\|>\n<\|im_start\|>user\nYou will be given the history of a past experience/,
      );
      expect(text).toContain(
        'Task: Take the candle.\nYou are in the attic.\n> open blue box\nThe boxes lock.\n\nSTATUS: FAIL (score 0/100)\n\nPlans from past attempts:\nTrial #1: I opened the wrong box.',
      );
      expect(text.endsWith('New plan:<|im_end|>\n<|im_start|>assistant\n')).toBe(true);
      expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
    });
  },
);
