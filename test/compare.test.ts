/**
 * `empo2 compare` end to end, as a user runs it: two configs × two seeds of one tiny training
 * iteration each on the built-in environment, two at a time, then the skip, resume and
 * report-only paths on the same folder.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { runEmpo2 as run } from './support/empo2-cli.ts';
import { TINY_MODEL } from './support/tiny.ts';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const root = mkdtempSync(join(tmpdir(), 'empo2-compare-e2e-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const TINY = [
  ...TINY_MODEL,
  'env.tasks=[fetch]',
  'env.eval_variations=1',
  'env.max_steps=4',
  'rollout.tasks_per_batch=1',
  'rollout.group_size=2',
  'train.iterations=1',
  'train.eval_every=0',
].flatMap((s) => ['--set', s]);

const out = join(root, 'cmp');
/** The shipped GRPO config with its learning rate set (through extends:, as a user's variant would), so the two configs differ in a way the test can check. */
function grpoWithLr(lr: number): string {
  const file = join(root, `grpo-lr${lr}.yaml`);
  writeFileSync(file, stringifyYaml({ extends: join(repoRoot, 'configs', 'variants', 'builtin-grpo.yaml'), optim: { lr } }));
  return file;
}
const compareArgs = [
  'compare',
  '--config',
  grpoWithLr(0.001),
  '--config',
  grpoWithLr(0.003),
  '--label',
  'grpo',
  '--label',
  'grpo-fast',
  '--seeds',
  '0,1',
  '--out',
  out,
  '--jobs',
  '2',
  ...TINY,
];

const csvRows = (file: string) => {
  const [head, ...rows] = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.split(','));
  return rows.map((r) => Object.fromEntries(head.map((h, i) => [h, r[i]])));
};
const lastEval = (runDir: string) =>
  readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; iteration: number; mean_score: number; train_env_steps: number })
    .filter((l) => l.type === 'eval')
    .at(-1)!;

describe('empo2 compare', () => {
  it('trains 2 configs × 2 seeds in child processes and writes the table, CSVs and plot', async () => {
    const r = await run(compareArgs);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/\| grpo \| 2\/2 \|/);
    expect(r.stdout).toMatch(/\| grpo-fast \| 2\/2 \|/);

    for (const label of ['grpo', 'grpo-fast']) {
      for (const seed of [0, 1]) {
        const dir = join(out, label, `seed${seed}`);
        const cfg = parseYaml(readFileSync(join(dir, 'config.yaml'), 'utf8')) as {
          seed: number;
          optim: { lr: number };
          train: { iterations: number };
        };
        // The run keeps the resolved config, with no extends: left to follow.
        expect(cfg).not.toHaveProperty('extends');
        expect(cfg.seed).toBe(seed);
        expect(cfg.optim.lr).toBe(label === 'grpo' ? 0.001 : 0.003);
        expect(cfg.train.iterations).toBe(1);
        const attempts = JSON.parse(readFileSync(join(dir, 'compare-run.json'), 'utf8')).attempts;
        expect(attempts).toHaveLength(1);
        expect(attempts[0]).toMatchObject({ exit_code: 0, resumed: false });
        const log = readFileSync(join(dir, 'train.log'), 'utf8');
        expect(log).toContain('empo2 train | run');
        // Two runs at a time: each child is held to one BLAS thread.
        if (log.includes('OpenBLAS')) expect(log).toMatch(/\b1 thread\)/);
      }
    }

    // The table's per-run numbers are the runs' own final evaluations.
    const runs = csvRows(join(out, 'runs.csv'));
    expect(runs).toHaveLength(4);
    for (const row of runs) {
      const e = lastEval(row.dir);
      expect(row.status).toBe('finished');
      expect(Number(row.final_score)).toBe(e.mean_score);
      expect(Number(row.final_env_steps)).toBe(e.train_env_steps);
      expect(e.iteration).toBe(1);
    }
    const results = csvRows(join(out, 'results.csv'));
    expect(results.map((r) => [r.config, r.runs_counted])).toEqual([
      ['grpo', '2'],
      ['grpo-fast', '2'],
    ]);
    const grpoScores = runs.filter((r) => r.config === 'grpo').map((r) => Number(r.final_score));
    expect(Number(results[0].final_score_mean)).toBeCloseTo((grpoScores[0] + grpoScores[1]) / 2, 10);

    const png = readFileSync(join(out, 'learning_curve.png'));
    expect([...png.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    expect(png.readUInt32BE(16)).toBeGreaterThan(800);
    expect(readFileSync(join(out, 'learning_curve.svg'), 'utf8')).toContain('grpo-fast');
    expect(readFileSync(join(out, 'results.md'), 'utf8')).toContain('Learning curves: learning_curve.png');
  }, 90_000);

  it('skips finished runs; a run that stopped midway waits for --resume, then continues from its checkpoint', async () => {
    const again = await run(compareArgs);
    expect(again.code).toBe(0);
    expect(again.stdout.match(/already finished, skipped/g)).toHaveLength(4);

    // Drop the final evaluation: the run now looks stopped after its checkpoint at iteration 1.
    const dir = join(out, 'grpo-fast', 'seed1');
    const metrics = join(dir, 'metrics.jsonl');
    const lines = readFileSync(metrics, 'utf8').trim().split('\n');
    writeFileSync(metrics, lines.filter((l) => !(JSON.parse(l).type === 'eval' && JSON.parse(l).iteration === 1)).join('\n') + '\n');

    const blocked = await run(compareArgs);
    expect(blocked.code).toBe(1);
    expect(blocked.stdout).toContain('grpo-fast seed 1: stopped at the checkpoint iter-000001; add --resume to continue it');
    expect(blocked.stdout).toMatch(/\| grpo-fast \| 1\/2 \|/);

    const resumed = await run([...compareArgs, '--resume']);
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toContain('grpo-fast seed 1: resuming');
    expect(resumed.stdout).toMatch(/\| grpo-fast \| 2\/2 \|/);
    const attempts = JSON.parse(readFileSync(join(dir, 'compare-run.json'), 'utf8')).attempts;
    expect(attempts.map((a: { resumed: boolean }) => a.resumed)).toEqual([false, true]);
    expect(lastEval(dir).iteration).toBe(1);
  }, 90_000);

  it('--report-only re-aggregates what is there without training', async () => {
    rmSync(join(out, 'results.csv'));
    const r = await run(['compare', '--report-only', '--out', out]);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(/seed \d+: (starting|resuming)/);
    expect(existsSync(join(out, 'results.csv'))).toBe(true);
    expect(r.stdout).toMatch(/\| grpo \| 2\/2 \|/);
  });

  it('--final-eval evaluates finished runs once more on more variations, once, and the report shows it per seed', async () => {
    const r = await run([...compareArgs, '--final-eval', '3']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.match(/already finished; its final evaluation is still to do/g)).toHaveLength(4);
    const runs = csvRows(join(out, 'runs.csv'));
    for (const row of runs) {
      const record = JSON.parse(readFileSync(join(row.dir, 'final-eval.json'), 'utf8'));
      // One task (fetch) × 3 variations, on the run's last checkpoint.
      expect(record).toMatchObject({ checkpoint: 'iter-000001', eval_variations: 3, eval_split: 'test', episodes: 3 });
      expect(Number(row.final_eval_score)).toBe(record.mean_score);
      expect(row.final_eval_episodes).toBe('3');
      expect(readFileSync(join(row.dir, 'final-eval.log'), 'utf8')).toContain('score (checkpoint)');
    }
    const md = readFileSync(join(out, 'results.md'), 'utf8');
    expect(md).toContain('## Final checkpoints on 3 test variations per task');
    const grpo = runs.filter((x) => x.config === 'grpo').map((x) => Number(x.final_eval_score).toFixed(1));
    expect(md).toMatch(new RegExp(`\\| grpo \\| 2/2 \\| [0-9.]+ ± [0-9.]+ \\| [0-9.]+% ± [0-9.]+ \\| ${grpo[0]} \\| ${grpo[1]} \\|`));
    expect(Number(csvRows(join(out, 'results.csv'))[0].final_eval_variations)).toBe(3);

    const again = await run([...compareArgs, '--final-eval', '3']);
    expect(again.code).toBe(0);
    expect(again.stdout.match(/already finished, skipped/g)).toHaveLength(4);
    const bad = await run([...compareArgs, '--final-eval', '0']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--final-eval must be a positive integer');
  }, 90_000);

  it('a larger train.iterations with --resume extends finished runs; fewer than they ran is refused', async () => {
    // The earlier final evaluations are of iteration 1; --final-eval evaluates each run again right after it is extended.
    const longer = await run([...compareArgs, '--set', 'train.iterations=2', '--resume', '--final-eval', '2']);
    expect(longer.code).toBe(0);
    expect(longer.stdout.match(/: resuming/g)).toHaveLength(4);
    expect(longer.stdout.match(/final evaluation on 2 variations per task/g)).toHaveLength(4);
    for (const label of ['grpo', 'grpo-fast']) {
      for (const seed of [0, 1]) {
        const dir = join(out, label, `seed${seed}`);
        expect(lastEval(dir).iteration).toBe(2);
        expect(JSON.parse(readFileSync(join(dir, 'final-eval.json'), 'utf8'))).toMatchObject({
          checkpoint: 'iter-000002',
          eval_variations: 2,
          episodes: 2,
        });
      }
    }

    const shorter = await run(compareArgs);
    expect(shorter.code).not.toBe(0);
    expect(shorter.stderr).toContain('train.iterations: it already ran 2, 1 now');
    expect(shorter.stdout).not.toContain('starting');
  }, 90_000);

  it('--equal-steps-eval evaluates the kept checkpoints around the equal-steps point and reports the score between them', async () => {
    // The runs now hold checkpoints at iterations 1 and 2; 3 variations is a setting none has yet, so every checkpoint used is evaluated.
    const r = await run([...compareArgs, '--set', 'train.iterations=2', '--equal-steps-eval', '3']);
    expect(r.code, r.stderr).toBe(0);
    const runs = csvRows(join(out, 'runs.csv'));
    const [equalSteps] = Object.keys(runs[0])
      .filter((k) => k.startsWith('checkpoint_score_at_'))
      .map((k) => Number(/_at_(\d+)_steps/.exec(k)![1]));
    // The end of the common range: the smallest final step count of the four runs.
    expect(equalSteps).toBe(Math.min(...runs.map((x) => Number(x.final_env_steps))));
    let evaluated = 0;
    for (const row of runs) {
      const dir = row.dir;
      const checkpoints = ['iter-000001', 'iter-000002'].map((name) => {
        const envSteps = JSON.parse(readFileSync(join(dir, 'checkpoints', name, 'trainer_state.json'), 'utf8')).envSteps as number;
        const file = join(dir, 'checkpoint-evals', `${name}.json`);
        const record = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : null;
        if (record) {
          evaluated++;
          expect(record).toMatchObject({ checkpoint: name, train_env_steps: envSteps, eval_variations: 3, episodes: 3 });
        }
        return { envSteps, score: record?.mean_score as number | undefined };
      });
      // Worked out independently of the report: the checkpoint at the point, or linear between the two around it.
      const [c1, c2] = checkpoints;
      let expected: number | null = null;
      if (c2.envSteps === equalSteps) expected = c2.score!;
      else if (c1.envSteps === equalSteps) expected = c1.score!;
      else if (c1.envSteps < equalSteps && equalSteps < c2.envSteps)
        expected = c1.score! + ((c2.score! - c1.score!) * (equalSteps - c1.envSteps)) / (c2.envSteps - c1.envSteps);
      if (expected === null) {
        expect(row[`checkpoint_score_at_${equalSteps}_steps`]).toBe('');
        expect(r.stdout).toContain(`${row.config}/seed${row.seed}: no checkpoint score @`);
      } else expect(Number(row[`checkpoint_score_at_${equalSteps}_steps`])).toBeCloseTo(expected, 10);
    }
    expect(evaluated).toBeGreaterThan(0);
    expect(r.stdout).toContain('## Score at equal env steps from checkpoints on 3 test variations per task');
    // Everything needed is there now: nothing is evaluated a second time.
    const again = await run([...compareArgs, '--set', 'train.iterations=2', '--equal-steps-eval', '3']);
    expect(again.code).toBe(0);
    expect(again.stdout).not.toContain('evaluating ');
  }, 90_000);

  it('a bad option stops before any run starts, naming the option', async () => {
    const badOut = join(root, 'bad');
    const [typo, labels, seeds, own] = await Promise.all([
      run(['compare', '--config', 'configs/variants/builtin-grpo.yaml', '--seeds', '0', '--out', badOut, '--set', 'rollout.group_sise=3']),
      run(['compare', '--config', 'a.yaml', '--config', 'b.yaml', '--label', 'x', '--out', badOut]),
      run(['compare', '--config', 'configs/variants/builtin-grpo.yaml', '--seeds', '0,zero', '--out', badOut]),
      run(['compare', '--config', 'configs/variants/builtin-grpo.yaml', '--out', badOut, '--set', 'seed=3']),
    ]);
    expect(typo.code).not.toBe(0);
    expect(typo.stderr).toContain('rollout.group_sise');
    expect(existsSync(badOut)).toBe(false);
    expect(labels.stderr).toContain('1 --label for 2 --config');
    expect(seeds.stderr).toContain('"zero" is not a non-negative integer');
    expect(own.stderr).toContain('compare chooses seed itself');
  });
});
