/**
 * empo2 as a library (docs/API.md): a program registers an environment of its own, trains
 * on it through the public entry, reads the result and the metrics lines, stops a run with an
 * AbortSignal and resumes it; bad input is refused with an error that names it. (test/pack.test.ts
 * does the same through the packed package in a project of its own.)
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, createEnv, envNames, loadConfig, registerEnv, train, type Env, type Split, type TrainLine } from '../src/index.ts';
import { TINY_MODEL } from './support/tiny.ts';

const SPLITS: Record<Split, number[]> = { train: [0, 1, 2, 3, 4, 5], dev: [6, 7], test: [8, 9] };

/** Three buttons, one of which (by variation) lights the lamp. */
function buttons(): Env {
  let lit = false;
  let right = 0;
  const actions = ['press button 0', 'press button 1', 'press button 2'];
  return {
    name: 'buttons',
    tasks: () => ['lamp'],
    variations: (_task, split) => SPLITS[split],
    maxSteps: () => 3,
    reset: async (_task, variation) => {
      lit = false;
      right = variation % 3;
      return { observation: 'A dark room with three buttons.', task: 'Light the lamp.', validActions: actions };
    },
    step: async (action) => {
      lit ||= action === `press button ${right}`;
      return {
        observation: lit ? 'The lamp is on.' : 'Nothing happens.',
        reward: lit ? 100 : 0,
        done: lit,
        score: lit ? 100 : 0,
        validActions: actions,
      };
    },
    validActions: () => actions,
    score: () => (lit ? 100 : 0),
    done: () => lit,
    close: async () => {},
  };
}

registerEnv('buttons', {
  create: buttons,
  corpus: () => ['A dark room with three buttons.', 'Light the lamp.', 'The lamp is on.', 'Nothing happens.', 'press button 0 1 2'],
});

const dirs: string[] = [];
const runDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'empo2-library-'));
  dirs.push(dir);
  return join(dir, 'run');
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const quiet = () => {};
const tiny = (run_dir: string, iterations: number) => ({
  config: {
    run_dir,
    seed: 2,
    env: { name: 'buttons', eval_variations: 1 },
    rollout: { tasks_per_batch: 1, group_size: 2 },
    train: { iterations },
  },
  set: TINY_MODEL,
  log: quiet,
});
const trainLines = (dir: string) =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((l) => l.type === 'train');

describe('train() from the public entry', () => {
  it('trains on an environment the program registered, tells each metrics line, and returns the evaluation and the run folder', async () => {
    const dir = runDir();
    const lines: TrainLine[] = [];
    const result = await train({ ...tiny(dir, 2), onIteration: (line) => lines.push(line) });
    expect(result.runDir).toBe(dir);
    expect(result.iterations).toBe(2);
    expect(result.interrupted).toBe(false);
    expect(result.config.env.name).toBe('buttons');
    expect(result.initialEval?.iteration).toBe(0);
    expect(result.finalEval?.iteration).toBe(2);
    expect(result.finalEval?.perTask.map((t) => t.task)).toEqual(['lamp']);
    expect(result.evalTable).toContain('| lamp | 1 |');
    expect(readFileSync(join(dir, 'eval.md'), 'utf8')).toBe(result.evalTable + '\n');
    expect(existsSync(join(dir, 'checkpoints', 'iter-000002'))).toBe(true);
    expect(lines.map((l) => l.iteration)).toEqual([1, 2]);
    expect(JSON.parse(JSON.stringify(lines))).toEqual(trainLines(dir));
    expect(lines[1].env_steps).toBeGreaterThan(lines[0].env_steps);
  });

  it('an abort stops the run as Ctrl-C does: the iteration checkpointed, interrupted; resume goes on to the end', async () => {
    const dir = runDir();
    const stop = new AbortController();
    const logged: string[] = [];
    const first = await train({
      ...tiny(dir, 3),
      signal: stop.signal,
      log: (l) => logged.push(l),
      onIteration: (line) => line.iteration === 1 && stop.abort(),
    });
    expect(first).toMatchObject({ iterations: 1, interrupted: true, evalTable: null });
    expect(first.finalEval?.iteration).toBe(0); // the last evaluation made
    expect(logged).toContain(`checkpoint ${join(dir, 'checkpoints', 'iter-000001')}`);
    expect(logged.some((l) => l.startsWith('aborted: finishing this iteration'))).toBe(true);
    expect(existsSync(join(dir, 'eval.md'))).toBe(false);
    const resumed = await train({ ...tiny(dir, 3), resume: true });
    expect(resumed).toMatchObject({ iterations: 3, interrupted: false });
    expect(resumed.evalTable).toContain('score (iter 0)');
    expect(trainLines(dir).map((l) => l.iteration)).toEqual([1, 2, 3]);
  });

  it('a signal aborted already stops at the first evaluation, with no checkpoint', async () => {
    const dir = runDir();
    const result = await train({ ...tiny(dir, 2), signal: AbortSignal.abort() });
    expect(result).toMatchObject({ iterations: 0, interrupted: true, initialEval: null, finalEval: null, evalTable: null });
    expect(existsSync(join(dir, 'checkpoints'))).toBe(false);
  });
});

describe('bad input is named', () => {
  it('an unknown env.name lists the registered ones, before the run folder is made', async () => {
    const dir = runDir();
    const error = await train({ config: { run_dir: dir, env: { name: 'buttonz' } }, log: quiet }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toBe(
      'env.name: no environment is registered as "buttonz" (known: builtin, scienceworld, webshop, http, buttons)',
    );
    expect(existsSync(dir)).toBe(false);
    expect(envNames()).toEqual(['builtin', 'scienceworld', 'webshop', 'http', 'buttons']);
  });

  it('a bad config object names the key', async () => {
    await expect(train({ config: { train: { iterations: -1 } }, log: quiet })).rejects.toThrow(/train\.iterations: /);
    await expect(train({ config: { trian: {} } as never, log: quiet })).rejects.toThrow(/trian: unknown option \(did you mean "train"\?\)/);
    expect(() => loadConfig(42 as never)).toThrow(ConfigError);
    const given = { train: { iterations: 5 } };
    expect(loadConfig(given, { set: ['train.iterations=7'] }).train.iterations).toBe(7);
    expect(given.train.iterations).toBe(5);
  });

  it('a factory that throws, or returns something that is not an Env, is named with the environment', async () => {
    // With a corpus, so that the run gets as far as opening the environment.
    registerEnv('throws', {
      create: () => {
        throw new Error('the maze file is missing');
      },
      corpus: () => ['a maze'],
    });
    registerEnv('half', () => ({ tasks: () => ['a'] }) as unknown as Env);
    const thrown = (await createEnv({ name: 'throws' }).catch((e: unknown) => e)) as Error;
    expect(thrown).toBeInstanceOf(Error);
    expect(thrown.message).toBe('environment "throws": the maze file is missing');
    expect((thrown.cause as Error).message).toBe('the maze file is missing');
    await expect(createEnv({ name: 'half' })).rejects.toThrow(
      'environment "half": its factory returned an object without variations(), maxSteps(), reset(), step(), validActions(), score(), done(), close()',
    );
    await expect(
      train({ ...tiny(runDir(), 1), config: { ...tiny('', 1).config, run_dir: runDir(), env: { name: 'throws' } } }),
    ).rejects.toThrow('environment "throws": the maze file is missing');
  });

  it('an environment without a corpus asks for a model with a tokenizer', async () => {
    registerEnv('no-corpus', buttons);
    await expect(
      train({ ...tiny(runDir(), 1), config: { ...tiny('', 1).config, run_dir: runDir(), env: { name: 'no-corpus' } } }),
    ).rejects.toThrow(
      'no text corpus for environment "no-corpus": give model.path with a tokenizer.json, or register the environment with a corpus (docs/API.md)',
    );
  });

  it('registerEnv refuses a taken name, a name a config cannot hold, and a definition without a factory', () => {
    expect(() => registerEnv('buttons', buttons)).toThrow('registerEnv: an environment named "buttons" is registered already');
    expect(() => registerEnv('builtin', buttons)).toThrow(/registered already/);
    expect(() => registerEnv('my env', buttons)).toThrow(/the name must be letters, digits/);
    expect(() => registerEnv('nothing', {} as never)).toThrow(
      'registerEnv("nothing"): give a factory function, or an object with a create(settings) function',
    );
    expect(() => registerEnv('bad-corpus', { create: buttons, corpus: ['text'] as never })).toThrow(/corpus must be a function/);
  });
});
