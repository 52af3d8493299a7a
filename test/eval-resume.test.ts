/**
 * `empo2 eval --resume`, as a long evaluation meets it: the process is killed after its first lockstep
 * chunks, and the same command with --resume plays only the chunks after them, writing the --json and
 * trajectories an uninterrupted run writes (all but timing fields). A resume of a different evaluation
 * (another seed, another model, another critic) is refused, naming what differs; a plain re-run starts
 * again, saying so. The same for `--method retrospex` with a tiny critic learnt from the plain
 * evaluation's episodes.
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runEmpo2 as run } from './support/empo2-cli.ts';
import { saveTinyInstructModel } from './support/instruct-model.ts';

const REPO_ROOT = resolve(import.meta.dirname, '..');
const root = mkdtempSync(join(tmpdir(), 'empo2-eval-resume-'));
const model = join(root, 'model');
// Four test variations of two families, one environment at a time: 8 chunks of one episode, long
// enough (20 steps each) for the test to see the first chunks recorded before the last is played.
const SETTINGS = ['seed=5', 'env.tasks=[fetch, clue]', 'env.eval_variations=4', 'env.max_instances=1', 'env.max_steps=20'];
const settings = (extra: string[] = []) => [...SETTINGS, ...extra].flatMap((s) => ['--set', s]);

beforeAll(async () => {
  mkdirSync(model);
  await saveTinyInstructModel(model);
}, 120_000);

afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Starts `empo2 <args>`, kills it (SIGKILL: no clean-up of any kind) once `partial` holds a chunk, and says how many it held. */
function killedAfterFirstChunk(args: readonly string[], partial: string): Promise<{ chunks: number; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'empo2.js'), ...args], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    let chunks = 0;
    const poll = setInterval(() => {
      if (!existsSync(partial)) return;
      try {
        chunks = JSON.parse(readFileSync(partial, 'utf8')).chunks.length;
      } catch {
        return; // written by rename, so never half; but it may vanish between the two calls
      }
      if (chunks > 0) child.kill('SIGKILL');
    }, 5);
    child.on('error', fail);
    child.on('close', (code, signal) => {
      clearInterval(poll);
      if (signal !== 'SIGKILL') fail(new Error(`the evaluation ended (code ${code}) before it was killed: ${stderr}`));
      else done({ chunks, stderr });
    });
  });
}

/** The --json record without its timing, and the trajectory lines without theirs. */
function outputsOf(json: string, trajectories: string): { record: Record<string, unknown>; episodes: unknown[] } {
  const { seconds: _, ...record } = JSON.parse(readFileSync(json, 'utf8'));
  const episodes = readFileSync(trajectories, 'utf8')
    .trim()
    .split('\n')
    .map((l) => {
      const { time: __, ...episode } = JSON.parse(l);
      return episode;
    });
  return { record, episodes };
}

/** Runs `eval` uninterrupted into `name`, then killed after its first chunk and resumed into `name`-resumed; returns both outputs. */
async function uninterruptedAndResumed(name: string, extra: string[]) {
  const whole = { json: join(root, `${name}.json`), trajectories: join(root, `${name}.jsonl`) };
  const full = await run(['eval', model, ...settings(), ...extra, '--json', whole.json, '--trajectories', whole.trajectories]);
  expect(full.code, full.stderr).toBe(0);
  expect(existsSync(`${whole.json}.partial`), 'the partial file is removed once the outputs are written').toBe(false);

  const parts = { json: join(root, `${name}-resumed.json`), trajectories: join(root, `${name}-resumed.jsonl`) };
  const args = ['eval', model, ...settings(), ...extra, '--json', parts.json, '--trajectories', parts.trajectories];
  const killed = await killedAfterFirstChunk(args, `${parts.json}.partial`);
  expect(killed.chunks).toBeGreaterThan(0);
  expect(killed.chunks, 'killed before the last chunk').toBeLessThan(8);
  expect(existsSync(parts.json)).toBe(false);

  const resumed = await run([...args, '--resume']);
  expect(resumed.code, resumed.stderr).toBe(0);
  expect(resumed.stdout).toContain(`--resume: ${killed.chunks} episodes (${killed.chunks} chunks) read from ${parts.json}.partial`);
  expect(existsSync(`${parts.json}.partial`)).toBe(false);
  return { whole: outputsOf(whole.json, whole.trajectories), resumed: outputsOf(parts.json, parts.trajectories), args };
}

describe('empo2 eval --resume', () => {
  it('killed after its first chunks and resumed, writes what an uninterrupted evaluation writes', async () => {
    const { whole, resumed, args } = await uninterruptedAndResumed('plain', []);
    expect(whole.record.episodes).toBe(8);
    expect(whole.episodes).toHaveLength(8);
    expect(resumed.record).toEqual(whole.record);
    expect(resumed.episodes).toEqual(whole.episodes);

    // A partial file of this evaluation met by another: refused, naming the difference.
    const partial = join(root, 'plain-resumed.json.partial');
    const killed = await killedAfterFirstChunk(args, partial);
    expect(killed.chunks).toBeGreaterThan(0);
    const otherSeed = await run([...args.map((a) => (a === 'seed=5' ? 'seed=6' : a)), '--resume']);
    expect(otherSeed.code).not.toBe(0);
    expect(otherSeed.stderr).toContain(`--resume: ${partial} was left by a different evaluation`);
    expect(otherSeed.stderr).toContain('config.seed: 5 → 6');
    const otherModel = join(root, 'model-copy');
    cpSync(model, otherModel, { recursive: true });
    writeFileSync(join(otherModel, 'chat_template.jinja'), readFileSync(join(model, 'chat_template.jinja'), 'utf8') + ' ');
    const moved = await run([...args.map((a) => (a === model ? otherModel : a)), '--resume']);
    expect(moved.code).not.toBe(0);
    expect(moved.stderr).toContain(`model.path: "${model}" → "${otherModel}"`);
    expect(moved.stderr).toMatch(/model\.files\.chat_template\.jinja: "\d+ bytes, sha256 [0-9a-f]{64}" → "\d+ bytes, sha256 [0-9a-f]{64}"/);
    for (const r of [otherSeed, moved]) expect(r.stderr).not.toMatch(/\n\s+at /);
    // The refusals left it as it was.
    expect(JSON.parse(readFileSync(partial, 'utf8')).chunks).toHaveLength(killed.chunks);
    // Without --resume the evaluation starts again (as compare's re-runs expect), saying so, and replaces it.
    const again = await run(args);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain(`${partial} holds a partial evaluation; this run starts again from the first episode`);
    expect(again.stdout).not.toContain('--resume: ');
    expect(existsSync(partial)).toBe(false);
    expect(outputsOf(join(root, 'plain-resumed.json'), join(root, 'plain-resumed.jsonl'))).toEqual(whole);
  }, 300_000);

  it('refuses --resume without an output to keep the chunks beside', async () => {
    const r = await run(['eval', model, ...settings(), '--resume']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('--resume needs --json or --trajectories: the finished chunks are kept beside them');
  }, 60_000);

  it('resumes --method retrospex the same way, and refuses another critic', async () => {
    const critic = join(root, 'critic.json');
    const trained = await run(['critic', 'train', join(root, 'plain.jsonl'), '--encoder', 'hashed', '--epochs', '3', '--out', critic]);
    expect(trained.code, trained.stderr).toBe(0);
    const { whole, resumed, args } = await uninterruptedAndResumed('retrospex', [
      '--method',
      'retrospex',
      '--critic',
      critic,
      '--candidates',
      '3',
    ]);
    expect(whole.record.method).toBe('retrospex');
    expect(resumed.record).toEqual(whole.record);
    expect(resumed.episodes).toEqual(whole.episodes);
    const rescored = (whole.episodes as { steps: { rescored?: unknown }[] }[]).flatMap((e) => e.steps.map((s) => s.rescored));
    expect(rescored.every((r) => r !== undefined)).toBe(true);

    const partial = join(root, 'retrospex-resumed.json.partial');
    await killedAfterFirstChunk(args, partial);
    const other = join(root, 'critic-other.json');
    const retrained = await run([
      'critic',
      'train',
      join(root, 'plain.jsonl'),
      '--encoder',
      'hashed',
      '--epochs',
      '3',
      '--seed',
      '1',
      '--out',
      other,
    ]);
    expect(retrained.code, retrained.stderr).toBe(0);
    const r = await run([...args.map((a) => (a === critic ? other : a)), '--resume']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('critic_sha256');
    expect(r.stderr).toContain(`method.critic.file: "${critic}" → "${other}"`);
  }, 300_000);
});
