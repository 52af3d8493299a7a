/**
 * Retrospex from the command line, as a user runs it: a tiny run records its episodes, `empo2 critic
 * train` learns a critic from them, and `empo2 eval --method retrospex --critic` plays the run's
 * checkpoint with it, printing the usual table and recording each step's rescored candidates. Bad input
 * (no episodes, a bad option, a file that is not a critic) stops the command with a message naming it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TrajectoryFile } from '../src/trajectory/reader.ts';
import { runEmpo2 as run } from './support/empo2-cli.ts';
import { TINY_RUN } from './support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-retrospex-cli-'));
const runDir = join(root, 'run');
const critic = join(root, 'critic.json');

beforeAll(async () => {
  const trained = await run([
    'train',
    '--run-dir',
    runDir,
    ...[...TINY_RUN, 'train.iterations=2', 'train.eval_every=2'].flatMap((s) => ['--set', s]),
  ]);
  expect(trained.code, trained.stderr).toBe(0);
}, 300_000);

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('empo2 critic train', () => {
  it("learns from a run's recorded episodes and writes a critic file that says what it learnt from", async () => {
    const r = await run(['critic', 'train', runDir, '--encoder', 'hashed', '--epochs', '5', '--seed', '3', '--out', critic]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/logged episodes: .*trajectories\/eval\.jsonl \(\d+\), .*trajectories\/train\.jsonl \(8\)/);
    expect(r.stdout).toMatch(/critic written to .*critic\.json: \d+ episodes of clue, fetch, hashed-ngram-1024 vectors, 5 passes/);
    const saved = JSON.parse(readFileSync(critic, 'utf8'));
    expect(saved).toMatchObject({
      format: 'empo2-retrospex-critic',
      encoder: { kind: 'hashed', name: 'hashed-ngram-1024', dim: 1024 },
      iql: { expectile: 0.7, discount: 0.99, polyak: 0.005 },
      training: { epochs: 5, batch_size: 128, learning_rate: 1e-4, reward_scale: 0.01, seed: 3 },
      data: { tasks: ['clue', 'fetch'] },
    });
    expect(saved.training.losses).toHaveLength(5);
  });

  it('refuses a folder without episodes, an unknown encoder and a bad setting, naming them', async () => {
    const none = await run(['critic', 'train', root + '/missing', '--out', join(root, 'x.json')]);
    expect(none.code).not.toBe(0);
    expect(none.stderr).toContain(`${root}/missing does not exist`);
    const empty = await run(['critic', 'train', join(runDir, 'checkpoints'), '--out', join(root, 'x.json')]);
    expect(empty.stderr).toMatch(/checkpoints holds no trajectory records/);
    const encoder = await run(['critic', 'train', runDir, '--encoder', 'word2vec', '--out', join(root, 'x.json')]);
    expect(encoder.stderr).toContain('--encoder must be minilm or hashed, got "word2vec"');
    const epochs = await run(['critic', 'train', runDir, '--epochs', '0', '--out', join(root, 'x.json')]);
    expect(epochs.stderr).toContain('critic epochs must be a positive integer, got 0');
    const lr = await run(['critic', 'train', runDir, '--lr', 'fast', '--out', join(root, 'x.json')]);
    expect(lr.stderr).toContain('--lr must be a number, got "fast"');
    for (const r of [none, empty, encoder, epochs, lr]) expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describe('empo2 eval --method retrospex', () => {
  it('plays the checkpoint with its candidates rescored: the usual table, the method in --json, the candidates in the episodes', async () => {
    const json = join(root, 'retrospex.json');
    const episodes = join(root, 'retrospex.jsonl');
    const r = await run([
      'eval',
      runDir,
      '--method',
      'retrospex',
      '--critic',
      critic,
      '--candidates',
      '3',
      '--json',
      json,
      '--trajectories',
      episodes,
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`retrospex: critic ${critic} (hashed-ngram-1024), 3 proposals at temperature 1, λ = max(0.25, 0.95^t)`);
    expect(r.stdout).toContain('| task | episodes | score (retrospex) | success (retrospex) |');
    const record = JSON.parse(readFileSync(json, 'utf8'));
    expect(record).toMatchObject({
      method: 'retrospex',
      critic: {
        file: critic,
        encoder: 'hashed-ngram-1024',
        acting: { candidates: 3, temperature: 1, schedule: { decay: 0.95, floor: 0.25 } },
      },
    });
    expect(record.episodes).toBeGreaterThan(0);
    const file = new TrajectoryFile(episodes);
    file.refresh();
    const steps = file.episodes.flatMap((e) => file.episode(e.line).steps);
    expect(steps.length).toBeGreaterThan(0);
    for (const [t, s] of steps.entries()) {
      expect(s.rescored, `step ${t}`).toBeDefined();
      expect(s.rescored!.candidates.length).toBeGreaterThanOrEqual(1);
      expect(s.rescored!.candidates.length).toBeLessThanOrEqual(3);
      expect(s.rescored!.candidates.map((c) => c.action)).toContain(s.action);
    }
  });

  it('refuses retrospex options without the method, the method without a critic, and a file that is not a critic', async () => {
    const stray = await run(['eval', runDir, '--critic', critic, '--candidates', '2']);
    expect(stray.stderr).toContain('--critic, --candidates are for --method retrospex');
    const noCritic = await run(['eval', runDir, '--method', 'retrospex']);
    expect(noCritic.stderr).toContain('--method retrospex needs --critic <file>');
    const missing = await run(['eval', runDir, '--method', 'retrospex', '--critic', join(root, 'nope.json')]);
    expect(missing.stderr).toContain(`--critic ${join(root, 'nope.json')}: no such file`);
    const bad = join(root, 'bad.json');
    writeFileSync(
      bad,
      '{"format": "empo2-retrospex-critic", "version": 1, "encoder": {"kind": "hashed", "name": "hashed-ngram-1024", "dim": 1024}, "hidden": 8, "iql": {"expectile": 0.7, "discount": 0.99, "polyak": 0.005}, "weights": {}}',
    );
    const damaged = await run(['eval', runDir, '--method', 'retrospex', '--critic', bad]);
    expect(damaged.stderr).toContain(`${bad}: weight qt1.task.w is missing`);
    const floor = await run(['eval', runDir, '--method', 'retrospex', '--critic', critic, '--floor', '2']);
    expect(floor.stderr).toContain('rescoring floor b must be in [0, 1], got 2');
    for (const r of [stray, noCritic, missing, damaged, floor]) {
      expect(r.code).not.toBe(0);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  });
});
