/**
 * `empo2 train` with env.name http: one iteration of the tiny default model against the test
 * server (./test-server.ts), once on a healthy server and once on a server that fails some of its
 * answers, which must cost episodes, not the run. Either way no instance stays open.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
    .map((l) => JSON.parse(l) as { type: string; iteration: number; env_steps?: number; episodes?: number });

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
});
