/**
 * `empo2 train` with env.name http: one iteration of the tiny default model against the test
 * server (./test-server.ts), once on a healthy server and once on a server that fails some of its
 * answers, which must cost episodes, not the run. Either way no instance stays open.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../config/load.ts';
import { initBackend } from '../../policy/tfjs/backend.ts';
import { train } from '../../trainer/trainer.ts';
import { TINY_MODEL } from '../../../test/support/tiny.ts';
import { Rng } from '../../util/rng.ts';
import { TestEnvServer, type Fault } from '../../../test/support/http-env-server.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-http-train-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function config(runDir: string, baseUrl: string, extra: string[] = []) {
  return loadConfig(null, [
    `run_dir=${runDir}`,
    'seed=1',
    ...TINY_MODEL,
    'env.name=http',
    `env.options={base_url: "${baseUrl}", tasks: [find], variations: {train: "0-19", test: "20-29"}, max_steps: 4, timeout_ms: 2000, retry_backoff_ms: 20}`,
    'env.eval_variations=2',
    'rollout.tasks_per_batch=2',
    'rollout.group_size=2',
    'train.iterations=1',
    'train.eval_every=0',
    ...extra,
  ]);
}

const lines = (runDir: string) =>
  readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map(
      (l) =>
        JSON.parse(l) as {
          type: string;
          iteration: number;
          env_steps?: number;
          episodes?: number;
          failed?: number;
          invalid?: string;
          mean_score?: number | null;
        },
    );

/** Every episode record of the run's trajectory files (train.jsonl, eval.jsonl), or of one. */
const records = (runDir: string, only?: string) =>
  readdirSync(join(runDir, 'trajectories'))
    .filter((f) => only === undefined || f === only)
    .flatMap((f) =>
      readFileSync(join(runDir, 'trajectories', f), 'utf8')
        .trim()
        .split('\n')
        .filter((l) => l.length > 0)
        .map((l) => JSON.parse(l) as { source?: string; outcome?: string; failure?: string; steps: unknown[] }),
    );

describe('training against an HTTP environment', () => {
  it('runs train.iterations=1 on the tiny default model', { timeout: 300_000 }, async () => {
    await initBackend();
    const server = await TestEnvServer.start();
    try {
      const runDir = join(root, 'healthy');
      const log: string[] = [];
      const result = await train(config(runDir, server.url), { resume: false, log: (l) => log.push(l) });
      expect(result.iterations).toBe(1);
      expect(log.join('\n')).toMatch(/env http: 1 tasks \(find\)/);
      const metrics = lines(runDir);
      expect(metrics.map((m) => [m.type, m.iteration])).toEqual([
        ['eval', 0],
        ['train', 1],
        ['eval', 1],
      ]);
      expect(metrics[1].env_steps).toBeGreaterThanOrEqual(4);
      expect(metrics[2].episodes).toBe(2);
      expect(server.requests.some((r) => r.path === '/step')).toBe(true);
      expect(server.created).toBeGreaterThan(0);
      expect(server.openInstances).toBe(0);
    } finally {
      await server.stop();
    }
  });

  it(
    'trains with free-text actions on a server that lists none (its corpus is short of model.vocab_size)',
    { timeout: 300_000 },
    async () => {
      await initBackend();
      const server = await TestEnvServer.start();
      try {
        const runDir = join(root, 'free-text');
        const log: string[] = [];
        // Observations alone cannot fill 2000 BPE tokens: the model must get the tokenizer's real vocabulary.
        const result = await train(config(runDir, server.url, ['env.options.actions_from=none', 'model.vocab_size=2000']), {
          resume: false,
          log: (l) => log.push(l),
        });
        expect(result.iterations).toBe(1);
        const vocab = Number(/vocab (\d+)/.exec(log.join('\n'))![1]);
        expect(vocab).toBeLessThan(2000);
        expect(server.openInstances).toBe(0);
      } finally {
        await server.stop();
      }
    },
  );

  it('survives a server that fails some answers: those episodes end, the run goes on', { timeout: 300_000 }, async () => {
    await initBackend();
    const rng = new Rng(7);
    const kinds: Fault[] = ['hang', 'drop', 'garbage', 'wrong_shape', 'status_500', 'error'];
    const server = await TestEnvServer.start({ faults: (_m, path) => (path === '/step' && rng.next() < 0.15 ? rng.pick(kinds) : null) });
    try {
      const runDir = join(root, 'faulty');
      const result = await train(config(runDir, server.url, ['train.iterations=2', 'env.options.timeout_ms=300']), {
        resume: false,
        log: () => {},
      });
      expect(result.iterations).toBe(2);
      expect([...server.faultCounts.values()].reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
      expect(lines(runDir).filter((m) => m.type === 'train')).toHaveLength(2);
      expect(server.openInstances).toBe(0);
    } finally {
      await server.stop();
    }
  });

  it(
    'a server that dies in iteration 1: its episodes are failed, counted, recorded and not trained on; the run says so; no instance stays open',
    { timeout: 300_000 },
    async () => {
      await initBackend();
      // The server dies at the first step after the evaluation before training, and is back 50 ms later.
      let evaluated = false;
      let died = false;
      const server = await TestEnvServer.start({
        faults: (_m, path) => (path === '/step' && evaluated && !died ? ((died = true), 'die') : null),
      });
      try {
        const runDir = join(root, 'dies');
        const log: string[] = [];
        const result = await train(config(runDir, server.url, ['train.iterations=2', 'env.eval_variations=4']), {
          resume: false,
          log: (l) => {
            log.push(l);
            if (l.startsWith('eval @ iter 0')) evaluated = true;
          },
        });
        expect(server.deaths).toBe(1);
        // Lockstep: the death cuts every episode of the iteration (those answered before it lose their instance).
        expect(result.failedIterations).toEqual([1]);
        const trains = lines(runDir).filter((m) => m.type === 'train');
        expect(trains.map((m) => [m.iteration, m.failed, m.mean_score === null])).toEqual([
          [1, 4, true],
          [2, 0, false],
        ]);
        expect(log.join('\n')).toMatch(/iter 1\/2 .*\| score none \| success none \| failed 4 of 4 episodes \|/);
        expect(log.join('\n')).toMatch(/every episode failed \(environment or engine failures\) in iteration 1: nothing was learned there/);
        const failed = records(runDir, 'train.jsonl').filter((r) => r.outcome === 'failed');
        expect(failed).toHaveLength(4);
        for (const r of failed) expect(r.failure).toMatch(/lost the connection|could not reach the server|is not valid/);
        expect(records(runDir).every((r) => ['success', 'ended', 'step_limit', 'failed'].includes(r.outcome!))).toBe(true);
        for (const m of lines(runDir).filter((m) => m.type === 'eval')) expect(m.failed).toBe(0);
        expect(readFileSync(join(runDir, 'eval.md'), 'utf8')).toMatch(
          /failed: 0 of 4 at iter 0, 0 of 4 at iter 2 \(episodes an environment or engine failure ended: not scored\)/,
        );
        expect(server.openInstances).toBe(0);
      } finally {
        await server.stop();
      }
    },
  );

  it(
    'observations over env.max_observation_bytes fail every episode: the iteration and the evaluation give no score, the run says so',
    { timeout: 300_000 },
    async () => {
      await initBackend();
      // After the evaluation before training, every reset answers 100 KB.
      let evaluated = false;
      const server = await TestEnvServer.start({
        hugeBytes: 100_000,
        faults: (_m, path) => (path === '/reset' && evaluated ? 'huge' : null),
      });
      try {
        const runDir = join(root, 'huge');
        const log: string[] = [];
        const result = await train(config(runDir, server.url), {
          resume: false,
          log: (l) => {
            log.push(l);
            if (l.startsWith('eval @ iter 0')) evaluated = true;
          },
        });
        expect(result.failedIterations).toEqual([1]);
        expect(result.finalEval?.invalid).toMatch(
          /^2 of 2 episodes failed, more than train\.eval_max_failed_share \(10%\) allows \(first: the observation of 100000 bytes is over env\.max_observation_bytes \(65536\)\)$/,
        );
        const metrics = lines(runDir);
        expect(metrics.find((m) => m.type === 'train')).toMatchObject({ failed: 4, mean_score: null });
        expect(
          metrics.filter((m) => m.type === 'eval').map((m) => [m.iteration, m.failed, m.mean_score === null, m.invalid !== undefined]),
        ).toEqual([
          [0, 0, false, false],
          [1, 2, true, true],
        ]);
        expect(log.join('\n')).toMatch(/every episode failed \(environment or engine failures\) in iteration 1: nothing was learned there/);
        expect(log.join('\n')).toMatch(/the final evaluation is invalid, it gives no score: 2 of 2 episodes failed/);
        expect(readFileSync(join(runDir, 'eval.md'), 'utf8')).toMatch(/\| \*\*all\*\* \| 2 \| [\d.]+ \| invalid \| [\d.]+% \| invalid \|/);
        expect(records(runDir, 'train.jsonl').map((r) => [r.outcome, r.steps.length])).toEqual(
          Array.from({ length: 4 }, () => ['failed', 0]),
        );
        expect(server.openInstances).toBe(0);
      } finally {
        await server.stop();
      }
    },
  );
});
