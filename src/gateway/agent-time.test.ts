/**
 * The timeout measures the agent's own time (./agent-clock.ts): with a 2 s timeout and a model that takes
 * 700 ms a step, an agent whose calls wait in the gateway longer than 2 s in all succeeds, one that idles
 * (no call, no reward) fails at 2 s with the reason, and one that thinks 800 ms before each call fails once
 * its thinking adds up to 2 s, though no single pause is that long. With a model that blocks the trainer's
 * thread (TensorFlow.js computes synchronously), a call that reaches the HTTP front during a step waits
 * there, and that wait is not counted either (the front's stamp): with a 3 s timeout, an agent in another
 * process that calls 400 ms late each time (its calls each waiting ~1.1 s in the front, then a 1.5 s step)
 * plays to the end.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { loadConfig } from '../config/load.ts';
import { environmentCorpus } from '../envs/index.ts';
import { createEngine, initBackend } from '../policy/index.ts';
import type { PolicyEngine } from '../policy/types.ts';
import type { Episode } from '../run/records.ts';
import { rolloutSettings } from '../trainer/rollout.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { AgentClock } from './agent-clock.ts';
import { openAgentPlay, type AgentInput } from './index.ts';
import { timeoutReason } from './player.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=5', 'rollout.max_tokens=3', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

const TIMEOUT_S = 2;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `inner`, each generate call taking `ms` longer: waiting (`block` false) or blocking this thread as TensorFlow.js does. */
function slow(inner: PolicyEngine, ms: number, block: boolean): PolicyEngine {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'generate')
        return async (...args: Parameters<PolicyEngine['generate']>) => {
          if (block) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
          else await sleep(ms);
          return target.generate(...args);
        };
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

async function ask(input: AgentInput, content: string): Promise<void> {
  const res = await fetch(`${input.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${input.apiKey}` },
    body: JSON.stringify({ model: input.model, messages: [{ role: 'user', content }] }),
    signal: input.signal,
  });
  const json = (await res.json()) as { error?: { message: string } };
  if (!res.ok) throw new Error(`gateway ${res.status}: ${json.error?.message}`);
}

/** Plays one lockstep batch of `agents` (one episode each; a step waits 50 ms for those that have not called). */
async function playBatch(
  inner: PolicyEngine,
  agents: ((input: AgentInput) => Promise<number>)[],
  timeoutSeconds = TIMEOUT_S,
): Promise<Episode[]> {
  const play = await openAgentPlay(cfg, {
    agent: (input) => agents[input.task as number](input),
    taskOf: (job) => job.variation,
    timeoutSeconds,
    batchWaitMs: 50,
    log: () => {},
  });
  try {
    const settings = rolloutSettings(cfg, false, 77);
    const jobs = agents.map((_, k) => ({ task: 'agent', variation: k, group: k }));
    const { episodes } = await play.player(inner, jobs, { settingsFor: () => settings, evaluation: false });
    expect(play.gateway.openRequests()).toBe(0);
    return episodes;
  } finally {
    await play.close();
  }
}

describe("the timeout: the agent's own time", () => {
  it('does not count calls waiting for the model; counts an idle agent and one that thinks too long in all', async () => {
    const STEP_MS = 700;
    // Wall time from each episode's start to its agent's return, or to its signal's abort (the timeout).
    const walls: Record<string, number> = {};
    const timed = (name: string, agent: (input: AgentInput) => Promise<number>) => async (input: AgentInput) => {
      const t0 = Date.now();
      input.signal.addEventListener('abort', () => (walls[name] ??= Date.now() - t0));
      const r = await agent(input);
      walls[name] ??= Date.now() - t0;
      return r;
    };
    const episodes = await playBatch(slow(engine, STEP_MS, false), [
      timed('patient', async (input) => {
        for (let k = 0; k < 4; k++) await ask(input, `step ${k}`);
        return 1;
      }),
      timed('idle', async (input) => {
        await new Promise((r) => input.signal.addEventListener('abort', r));
        return 1;
      }),
      timed('thinker', async (input) => {
        for (let k = 0; k < 4; k++) {
          await sleep(800);
          if (input.signal.aborted) break;
          await ask(input, `step ${k}`);
        }
        await new Promise((r) => (input.signal.aborted ? r(null) : input.signal.addEventListener('abort', r)));
        return 1;
      }),
    ]);
    const [patient, idle, thinker] = episodes;
    // 4 calls, each at least a 700 ms step inside the gateway: longer than the timeout, and it succeeds.
    expect([patient.outcome, patient.steps.length, patient.failure]).toEqual(['success', 4, undefined]);
    expect(walls.patient).toBeGreaterThan(4 * STEP_MS);
    expect(walls.patient).toBeGreaterThan(TIMEOUT_S * 1000);

    expect(idle.outcome).toBe('failed');
    expect(idle.failure).toBe(timeoutReason(TIMEOUT_S * 1000));
    expect(idle.failure).toBe(
      "no reward within 2 s of the agent's own time (time its calls waited in the gateway for the model not counted)",
    );
    // The episode's clock starts as its batch does, a little before this agent does (the first agent's first
    // fetch loads undici on this thread); the 100 ms of grace at the deadline is about as much.
    expect(walls.idle).toBeGreaterThanOrEqual(TIMEOUT_S * 1000 - 250);
    expect(walls.idle).toBeLessThan(TIMEOUT_S * 1000 + 1500);

    // 800 ms of its own before each call: out of time during its third pause (its second where the machine is
    // loaded), after calls of 700 ms or more each in the gateway, none of them counted.
    expect([thinker.outcome, thinker.failure]).toEqual(['failed', timeoutReason(TIMEOUT_S * 1000)]);
    expect(thinker.steps.length).toBeGreaterThanOrEqual(1);
    expect(thinker.steps.length).toBeLessThanOrEqual(2);
    expect(walls.thinker).toBeGreaterThanOrEqual(TIMEOUT_S * 1000 - 250 + thinker.steps.length * STEP_MS);
  }, 60_000);

  it("does not count a call's wait in the HTTP front while the trainer's thread is blocked sampling", async () => {
    // The agents in another process (their timers run while this thread blocks): test/support/openai-agent-host.mjs.
    const host = spawn(process.execPath, ['test/support/openai-agent-host.mjs'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const waiting = new Map<number, (r: { ok: boolean; error?: string }) => void>();
    createInterface({ input: host.stdout }).on('line', (line) => {
      const r = JSON.parse(line) as { id: number; ok: boolean; error?: string };
      waiting.get(r.id)?.(r);
    });
    const walls: number[] = [];
    const viaHost = (id: number, pauseMs: number[]) => async (input: AgentInput) => {
      const t0 = Date.now();
      const done = new Promise<{ ok: boolean; error?: string }>((resolve) => waiting.set(id, resolve));
      const { baseURL, apiKey, model } = input;
      host.stdin.write(JSON.stringify({ id, baseURL, apiKey, model, task: `agent ${id}`, calls: pauseMs.length, pauseMs }) + '\n');
      const r = await done;
      walls[id] = Date.now() - t0;
      if (!r.ok) throw new Error(r.error);
      return 1;
    };
    try {
      // Each step blocks this thread 1.5 s, 50 ms after the punctual agent's call; the late one's call comes 400 ms
      // after its last answer, so ~350 ms into the block, and waits in the front for the rest of it, then for its own
      // step. Its own time is ~1.2 s; counting the waits in the front would make it ~4.5 s, past the 3 s timeout.
      const episodes = await playBatch(slow(engine, 1500, true), [viaHost(0, [0, 0, 0, 0]), viaHost(1, [400, 400, 400])], 3);
      expect(episodes.map((e) => [e.outcome, e.steps.length, e.failure])).toEqual([
        ['success', 4, undefined],
        ['success', 3, undefined],
      ]);
      expect(walls[1]).toBeGreaterThan(3 * (400 + 1500));
    } finally {
      host.kill();
    }
  }, 60_000);
});

describe('AgentClock', () => {
  it('stands still while any call is inside the gateway, from when the front received it', () => {
    let t = 1_000;
    const clock = new AgentClock(() => t);
    t += 300; // the agent's own 300 ms
    const a = clock.arrived(1_200); // received by the front 100 ms ago (the thread was busy): those 100 ms are the model's
    expect(clock.ownMs()).toBe(200);
    t += 500;
    const b = clock.arrived(); // a second call at once: overlapping waits count once
    t += 400;
    a();
    expect(clock.ownMs()).toBe(200);
    t += 100;
    b();
    b(); // a call answered twice (its end and its close) ends once
    expect(clock.ownMs()).toBe(200);
    t += 250;
    expect(clock.ownMs()).toBe(450);
    clock.arrived(t + 10_000); // a stamp in the future is taken as now
    t += 1_000;
    expect(clock.ownMs()).toBe(450);
  });
});
