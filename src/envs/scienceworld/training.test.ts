/**
 * ScienceWorld under the trainer (real simulators, tiny default model): a simulator killed in
 * the middle of an episode ends that episode as failed and the next episode runs on a fresh
 * simulator; a whole `train()` run survives killed simulators and leaves no process behind.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pidtree from 'pidtree';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigSchema } from '../../config/schema.ts';
import { initBackend } from '../../policy/tfjs/backend.ts';
import { train } from '../../trainer/trainer.ts';
import { createEngine } from '../../policy/create-engine.ts';
import { rolloutSettings, runEpisodes } from '../../trainer/rollout.ts';
import type { Env, StepResult } from '../types.ts';
import { createScienceWorldEnv } from './factory.ts';
import type { ScienceWorldEnv } from './env.ts';
import { scienceWorldGate } from './liveSetup.ts';
import { environmentCorpus } from '../index.ts';

const gate = scienceWorldGate();

function config(runDir: string, iterations: number) {
  return ConfigSchema.parse({
    run_dir: runDir,
    env: { name: 'scienceworld', tasks: ['boil'], max_steps: 3, eval_variations: 1 },
    rollout: { group_size: 2, tasks_per_batch: 1, max_tokens: 16 },
    train: { iterations, eval_every: 0 },
  });
}

/** Delegates to a ScienceWorld env and SIGKILLs its JVM just before the chosen step. */
class KillBeforeStep implements Env {
  readonly name = 'scienceworld';
  outcomes: string[] = [];
  private steps = 0;
  /** Once: the episode after the kill must run undisturbed. */
  constructor(
    readonly inner: ScienceWorldEnv,
    private killAt: number | null,
  ) {}
  tasks = () => this.inner.tasks();
  variations: Env['variations'] = (task, split) => this.inner.variations(task, split);
  maxSteps = (task: string) => this.inner.maxSteps(task);
  validActions = () => this.inner.validActions();
  score = () => this.inner.score();
  done = () => this.inner.done();
  close = () => this.inner.close();
  reset: Env['reset'] = (task, variation, seed) => {
    this.steps = 0;
    return this.inner.reset(task, variation, seed);
  };
  async step(action: string): Promise<StepResult> {
    if (++this.steps === this.killAt) {
      this.killAt = null;
      process.kill(this.inner.simulatorPids!.java!, 'SIGKILL');
    }
    const result = await this.inner.step(action);
    if (result.done) this.outcomes.push(String(result.info?.outcome));
    return result;
  }
}

async function simulatorChildren(): Promise<number> {
  return (await pidtree(process.pid)).length;
}

describe.skipIf(!gate.available)(`ScienceWorld in training (${gate.label})`, () => {
  const dirs: string[] = [];
  const tempRun = () => {
    const dir = mkdtempSync(join(tmpdir(), 'empo2-sw-train-'));
    dirs.push(dir);
    return join(dir, 'run');
  };
  afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

  it('a simulator killed mid-episode fails that episode only; the env carries on with a fresh simulator', async () => {
    await initBackend();
    const cfg = config(tempRun(), 1);
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    const victim = new KillBeforeStep(createScienceWorldEnv({ tasks: ['boil'] }), 1);
    const bystander = new KillBeforeStep(createScienceWorldEnv({ tasks: ['boil'] }), null);
    try {
      const jobs = [0, 1].map((group) => ({ task: 'boil', variation: 0, group }));
      const first = await runEpisodes([victim, bystander], engine, jobs, { settings: rolloutSettings(cfg, false, 1) });
      expect(victim.outcomes).toEqual(['simulator_error']);
      expect(first.episodes[0].steps).toHaveLength(1);
      expect(first.episodes[0].success).toBe(false);
      expect(first.episodes[1].steps.length).toBeGreaterThanOrEqual(1);
      expect(bystander.outcomes).not.toContain('simulator_error');
      expect(victim.inner.restarts).toBe(1);
      expect(bystander.inner.restarts).toBe(0);

      const again = await runEpisodes([victim, bystander], engine, jobs, { settings: rolloutSettings(cfg, false, 2) });
      expect(again.episodes[0].steps.length).toBeGreaterThanOrEqual(1);
      expect(victim.outcomes.slice(1)).not.toContain('simulator_error');
      expect(victim.inner.restarts).toBe(1);
    } finally {
      await Promise.all([victim.close(), bystander.close()]);
      engine.dispose();
    }
  });

  it('train() on ScienceWorld survives killed simulators and closes every simulator it started', async () => {
    const childrenBefore = await simulatorChildren();
    const runDir = tempRun();
    const killed: number[] = [];
    const logs: string[] = [];
    const result = await train(config(runDir, 1), {
      resume: false,
      log: (line) => {
        logs.push(line);
        // Between evaluation and the first rollouts: the next resets find dead JVMs and must
        // start fresh ones instead of failing the run.
        if (line.startsWith('eval @ iter 0')) {
          for (const pid of javaChildren()) {
            process.kill(pid, 'SIGKILL');
            killed.push(pid);
          }
        }
      },
    });
    expect(killed.length).toBeGreaterThanOrEqual(1);
    expect(result.iterations).toBe(1);
    expect(result.finalEval!.summary.episodes).toBe(1);
    const metrics = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string });
    expect(metrics.filter((m) => m.type === 'train')).toHaveLength(1);
    expect(logs.some((l) => l.includes('env scienceworld: 1 tasks (boil)'))).toBe(true);
    const deadline = Date.now() + 10_000;
    while ((await simulatorChildren()) > childrenBefore && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(await simulatorChildren()).toBe(childrenBefore);
  });
});

/** JVMs started by this process's simulators (their bridges lead their own process groups). */
function javaChildren(): number[] {
  const pids: number[] = [];
  for (const entry of readdirProc()) {
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      const program = cmdline.split('\0')[0];
      if (!program.endsWith('java') || !cmdline.includes('scienceworld')) continue;
      if (descendsFrom(entry, process.pid)) pids.push(entry);
    } catch {
      // The process ended while being read.
    }
  }
  return pids;
}

function readdirProc(): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number);
}

function descendsFrom(pid: number, ancestor: number): boolean {
  for (let current = pid, hops = 0; current > 1 && hops < 16; hops++) {
    if (current === ancestor) return true;
    const stat = readFileSync(`/proc/${current}/stat`, 'utf8');
    current = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  }
  return false;
}
