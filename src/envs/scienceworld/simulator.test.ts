/**
 * Tests against the real simulator (JVM + official Python API). They need scripts/setup-python.sh:
 * without it they fail in CI and are skipped, with the reason shown, elsewhere.
 * JVM starts are slow, so one env and one raw simulator serve most tests.
 */
import { readFileSync } from 'node:fs';
import pidtree from 'pidtree';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCatalog, splitVariations } from './catalog.ts';
import { ScienceWorldEnv } from './env.ts';
import { readCatalogFromSimulator } from './generate-catalog.ts';
import { goldReplayOptions, replayGold } from './gold.ts';
import { GOLD_SAMPLE } from './goldSample.ts';
import { scienceWorldGate } from './liveSetup.ts';
import { ScienceWorldPool } from './pool.ts';
import { Simulator } from './simulator.ts';

const gate = scienceWorldGate();

interface RawReset {
  observation: string;
  task: string;
  validActions: string[];
  score: number;
  goldActions: string[] | null;
}

interface RawStep {
  observation: string;
  score: number;
  reward: number;
  done: boolean;
}

function rawReset(simulator: Simulator, task: string, variation: number, official = false): Promise<RawReset> {
  return simulator.call<RawReset>('reset', { task, variation, simplification: 'easy', goldPath: false, moveLimit: 100, official }, 120_000);
}

/** A process counts as gone once /proc has no entry or only a zombie awaiting collection. */
function processGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe.skipIf(!gate.available)(`ScienceWorld simulator (${gate.label})`, () => {
  let env: ScienceWorldEnv;
  let deterministicEnv: ScienceWorldEnv;
  let raw: Simulator;

  beforeAll(async () => {
    env = new ScienceWorldEnv(goldReplayOptions());
    deterministicEnv = new ScienceWorldEnv(goldReplayOptions({ goldPath: false, deterministic: true }));
    [raw] = await Promise.all([Simulator.start(), env.start(), deterministicEnv.start()]);
  });

  afterAll(async () => {
    await env?.close();
    await deterministicEnv?.close();
    await raw?.close();
  });

  it('catalog.json matches the splits the running simulator computes', async () => {
    expect(await readCatalogFromSimulator(raw)).toEqual(loadCatalog());
  });

  it.each(GOLD_SAMPLE)('gold sequence of %s, test variation %i, reaches score 100 and done', async (task, variation) => {
    const replay = await replayGold(env, task, variation);
    expect(replay).toMatchObject({ score: 100, done: true, outcome: 'success' });
    expect(replay.steps).toBeGreaterThan(0);
  });

  it("returns the simulator's own message for an invalid action and changes nothing", async () => {
    const reset = await env.reset('boil', 23);
    const before = env.score();
    const result = await env.step('fly to the moon');
    const official = await rawReset(raw, 'boil', 23).then(() => raw.call<RawStep>('step', { action: 'fly to the moon' }, 30_000));
    expect(result.observation).toBe(official.observation);
    expect(result.observation).toMatch(/No known action matches that input/);
    expect(result).toMatchObject({ reward: 0, done: false, score: before });
    expect(result.validActions).toEqual(reset.validActions);
  });

  it('reports a failed task as score -100, reward down to -100, done and outcome failure', async () => {
    await env.reset('find-living-thing', 225);
    const before = env.score();
    const result = await env.step('focus on air');
    expect(result).toMatchObject({ score: -100, reward: -100 - before, done: true });
    expect(result.info?.outcome).toBe('failure');
    expect(env.done()).toBe(true);
    await expect(env.step('look around')).rejects.toThrow(/after the episode of 'find-living-thing' variation 225 ended/);
  });

  it('gives the same first observation for the same (task, variation, seed), in this and in another process', async () => {
    const first = await env.reset('grow-plant', 93, 7);
    await env.reset('chemistry-mix', 24, 7);
    const again = await env.reset('grow-plant', 93, 7);
    const elsewhere = await rawReset(raw, 'grow-plant', 93);
    expect(again.observation).toBe(first.observation);
    expect(again.validActions).toEqual(first.validActions);
    expect(elsewhere.observation).toBe(first.observation);
    expect(elsewhere.validActions).toEqual(first.validActions);
    expect(first.task).toMatch(/^Your task is to grow/);
  });

  it('with deterministic: true, the same actions give the same observations whatever ran before', async () => {
    // power-component is one of the tasks whose circuit can power up a tick apart between runs
    // under the JVM's default identity hashes.
    await env.reset('power-component', 15);
    const actions = env.goldActions();
    await env.reset('chemistry-mix', 24);
    const distraction = env.goldActions();
    const play = async (task: string, variation: number, moves: string[]) => {
      await deterministicEnv.reset(task, variation);
      const seen: string[] = [];
      for (const action of moves) {
        const result = await deterministicEnv.step(action);
        seen.push(`${result.observation} | ${result.score}`);
        if (result.done) break;
      }
      return seen;
    };
    const first = await play('power-component', 15, actions);
    await play('chemistry-mix', 24, distraction);
    const second = await play('power-component', 15, actions);
    expect(second).toEqual(first);
    expect(deterministicEnv.score()).toBe(100);
  });

  it("skips only the simulator's redundant second load: the fast reset equals ScienceWorldEnv.reset()", async () => {
    for (const [task, variation] of [
      ['boil', 25],
      ['find-animal', 230],
    ] as const) {
      const official = await rawReset(raw, task, variation, true);
      const fast = await rawReset(raw, task, variation, false);
      expect(fast).toEqual(official);
    }
  });
});

describe.skipIf(!gate.available)(`ScienceWorld pool (${gate.label})`, () => {
  it('runs episodes on K=2 simulators, survives killed and hung simulators, and leaks no process', async () => {
    const baseline = (await pidtree(process.pid)).length;
    const pool = new ScienceWorldPool(2, {
      stepTimeoutMs: 4_000,
      jvmOptions: ['-Xmx1g'],
      stepLimits: { 'find-animal': 3, 'lifespan-longest-lived': 3, 'use-thermometer': 3, 'chemistry-mix': 3 },
      actionCorrection: { enabled: true, history: 'corrected' },
    });
    const seenPids = new Set<number>();
    const outcomes: string[] = [];
    const faults: Record<number, 'kill-java' | 'kill-bridge' | 'hang' | 'kill-idle'> = {
      3: 'kill-java',
      8: 'kill-bridge',
      13: 'hang',
      18: 'kill-idle',
    };
    const tasks = ['find-animal', 'lifespan-longest-lived', 'use-thermometer', 'chemistry-mix'];
    const episodes = Array.from({ length: 24 }, (_, index) => index);
    try {
      await pool.start();
      await Promise.all(
        [0, 1].map(async () => {
          for (let episode = episodes.shift(); episode !== undefined; episode = episodes.shift()) {
            const index = episode;
            await pool.use(async (env) => {
              const task = tasks[index % tasks.length];
              const variation = env.variations(task, 'train')[index % 5];
              const fault = faults[index];
              if (fault === 'kill-idle') {
                // An env replaces a failed simulator lazily; make sure there is one to kill.
                await env.start();
                seenPids.add(env.simulatorPids!.bridge).add(env.simulatorPids!.java!);
                process.kill(env.simulatorPids!.java!, 'SIGKILL');
              }
              const reset = await env.reset(task, variation, index);
              expect(reset.observation.length).toBeGreaterThan(0);
              const pids = env.simulatorPids!;
              seenPids.add(pids.bridge).add(pids.java!);
              expect(readFileSync(`/proc/${pids.java}/environ`, 'utf8')).toContain('JAVA_TOOL_OPTIONS=-Xmx1g');
              if (fault === 'kill-java') process.kill(pids.java!, 'SIGKILL');
              if (fault === 'kill-bridge') process.kill(pids.bridge, 'SIGKILL');
              if (fault === 'hang') process.kill(pids.bridge, 'SIGSTOP');
              let result;
              for (const action of ['Look around.', 'look at the door please', 'inventory', 'wait']) {
                result = await env.step(action);
                if (!result.done) {
                  expect(result.info?.corrected === true || result.validActions.includes(String(result.info?.action))).toBe(true);
                  expect(result.info?.historyAction).toBe(result.info?.action);
                }
                if (result.done) break;
              }
              expect(result?.done).toBe(true);
              outcomes[index] = String(result?.info?.outcome);
            });
          }
        }),
      );
    } finally {
      await pool.close();
    }
    const injected = [3, 8, 13];
    for (const [index, outcome] of outcomes.entries()) {
      expect(outcome, `episode ${index}`).toBe(injected.includes(index) ? 'simulator_error' : 'step_limit');
    }
    expect(outcomes).toHaveLength(24);
    expect(pool.restarts).toBe(4);
    // The 2 first simulators, the killed idle one and the replacements that ran later episodes.
    expect(seenPids.size).toBeGreaterThanOrEqual(2 * 5);
    expect(await eventually(() => [...seenPids].every(processGone))).toBe(true);
    expect(await eventually(async () => (await pidtree(process.pid)).length <= baseline)).toBe(true);
  });
});
