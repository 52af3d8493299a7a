/**
 * An action the simulator cannot take is not a lost simulator: tests against the real simulator
 * (JVM + official Python API), gated like simulator.test.ts.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ScienceWorldEnv } from './env.ts';
import { scienceWorldGate } from './liveSetup.ts';
import { Simulator, SimulatorError, SimulatorRequestError } from './simulator.ts';

const gate = scienceWorldGate();
// What a sampled byte-level token can leave behind: the first half of a surrogate pair.
const UNPAIRED = 'open \ud800 door';

function processGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

async function eventually(check: () => boolean, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return true;
}

describe.skipIf(!gate.available)(`ScienceWorld refused actions and lost simulators (${gate.label})`, () => {
  let env: ScienceWorldEnv;
  let raw: Simulator;

  beforeAll(async () => {
    env = new ScienceWorldEnv();
    [raw] = await Promise.all([Simulator.start(), env.start()]);
  }, 180_000);

  afterAll(async () => {
    await env?.close();
    await raw?.close();
  });

  it('an unpaired surrogate is made well-formed: an ordinary unknown action, same simulator', async () => {
    await env.reset('boil', 23);
    const pids = env.simulatorPids;
    const result = await env.step(UNPAIRED);
    expect(result.info?.outcome).toBe('running');
    expect(result.observation).toMatch(/No known action matches that input/);
    expect(result).toMatchObject({ reward: 0, done: false });
    expect(result.info).toMatchObject({ action: 'open \ufffd door', originalAction: UNPAIRED });
    expect(env.restarts).toBe(0);
    expect(env.simulatorPids).toEqual(pids);
    expect((await env.step('look around')).observation).toMatch(/This room is called/);
  });

  it('the bridge reports a request a live JVM could not take as refused, and keeps serving', async () => {
    await raw.call('reset', { task: 'boil', variation: 23, simplification: 'easy', goldPath: false, moveLimit: 100 }, 120_000);
    const refused = await raw.call('step', { action: UNPAIRED }, 30_000).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SimulatorRequestError);
    expect((refused as SimulatorRequestError).errorType).toBe('SimulatorRefused');
    expect((refused as Error).message).toMatch(/could not take this request, but its JVM still answers/);
    expect(raw.alive).toBe(true);
    const after = await raw.call<{ observation: string }>('step', { action: 'look around' }, 30_000);
    expect(after.observation).toMatch(/This room is called/);
  });

  it('the env goes on after a refused step (the first defence bypassed), without a restart', async () => {
    await env.reset('boil', 23);
    const pids = env.simulatorPids;
    const before = env.validActions();
    // Let the surrogate through to the bridge, as a text the sanitiser missed would be.
    const spy = vi.spyOn(String.prototype as unknown as { toWellFormed(): string }, 'toWellFormed').mockImplementation(function (
      this: string,
    ) {
      return String(this);
    });
    let result;
    try {
      result = await env.step(UNPAIRED);
    } finally {
      spy.mockRestore();
    }
    expect(result.info?.outcome).toBe('running');
    expect(String(result.info?.refused)).toMatch(/JVM still answers/);
    expect(result).toMatchObject({ reward: 0, done: false, validActions: before });
    expect(env.restarts).toBe(0);
    expect(env.simulatorPids).toEqual(pids);
    expect((await env.step('look around')).observation).toMatch(/This room is called/);
  });

  it('a lost simulator is still fatal: the bridge says so and the env ends the episode as simulator_error', async () => {
    const javaPid = raw.javaPid!;
    process.kill(javaPid, 'SIGKILL');
    expect(await eventually(() => processGone(javaPid))).toBe(true);
    const lost = await raw.call('step', { action: 'look around' }, 30_000).catch((error: unknown) => error);
    expect(lost).toBeInstanceOf(SimulatorError);
    expect((lost as SimulatorError).kind).toBe('died');
    expect(await eventually(() => !raw.alive)).toBe(true);

    await env.reset('boil', 23);
    process.kill(env.simulatorPids!.java!, 'SIGKILL');
    const result = await env.step('look around');
    expect(result.info?.outcome).toBe('simulator_error');
    expect(result.done).toBe(true);
    expect(env.restarts).toBe(1);
  });
});
