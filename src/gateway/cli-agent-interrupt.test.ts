/**
 * Ctrl-C during an evaluation of `empo2 train --agent` (real processes, real signals). The evaluation
 * agents hold a call open (its body half sent), start a child in their process group and ignore
 * SIGTERM, so that only the trainer's SIGKILL of their groups ends them. The first Ctrl-C stops the
 * evaluation as an interruption: the held call is answered 503, no score is written, the agents' groups
 * are killed without waiting for their timeout, and a new start or `--resume` makes the evaluation again.
 * A second Ctrl-C exits with 130 and leaves no agent and no run.lock behind.
 *
 * Signals are sent in answer to lines the agents print once their call is open, never after a delay.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'empo2.js');
const root = mkdtempSync(join(tmpdir(), 'empo2-cli-agent-interrupt-'));

/**
 * Training tasks are answered at once. An evaluation task is too, unless the file `hang` in the agent's
 * folder says so: `always`, or `after-training` (once a training episode has run: the final evaluation).
 * A hanging agent records its pid and process group, starts `sleep` in its group, opens a call with
 * `Expect: 100-continue` and sends half its body once the gateway has taken the request, then says so
 * on stderr. On SIGTERM it sends the rest and records the answer, and stays.
 */
const AGENT = `
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
const dir = process.argv[2];
const task = JSON.parse(process.env.EMPO2_TASK_JSON);
const body = JSON.stringify({ model: process.env.EMPO2_MODEL, messages: [{ role: 'user', content: 'Say ' + task.word }], max_tokens: 4 });
const headers = { 'Content-Type': 'application/json', Authorization: 'Bearer ' + process.env.EMPO2_API_KEY, 'Content-Length': Buffer.byteLength(body) };
const hang = existsSync(join(dir, 'hang')) ? readFileSync(join(dir, 'hang'), 'utf8').trim() : 'never';
if (task.role === 'train') writeFileSync(join(dir, 'trained'), '');
if (task.role === 'train' || hang === 'never' || (hang === 'after-training' && !existsSync(join(dir, 'trained')))) {
  const res = await fetch(process.env.EMPO2_BASE_URL + '/chat/completions', { method: 'POST', headers, body });
  if (res.status !== 200) throw new Error('gateway answered ' + res.status);
  console.log('reward: 1');
} else {
  const sleeper = spawn('sleep', ['600'], { stdio: 'ignore' });
  const pgid = Number(readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ')[2]);
  writeFileSync(join(dir, 'agent-' + process.pid + '.json'), JSON.stringify({ pid: process.pid, pgid, sleeper: sleeper.pid }));
  const req = request(process.env.EMPO2_BASE_URL + '/chat/completions', { method: 'POST', headers: { ...headers, Expect: '100-continue' } });
  req.on('continue', () => {
    req.write(body.slice(0, 10));
    console.error('holding a call open');
  });
  req.on('response', (res) => {
    let text = '';
    res.setEncoding('utf8').on('data', (d) => (text += d));
    res.on('end', () => writeFileSync(join(dir, 'answer-' + process.pid + '.json'), JSON.stringify({ status: res.statusCode, body: text })));
  });
  req.on('error', (e) => writeFileSync(join(dir, 'answer-' + process.pid + '.json'), JSON.stringify({ error: e.message })));
  process.on('SIGTERM', () => req.end(body.slice(10)));
  setInterval(() => {}, 1000);
}
`;

const SETTINGS = [...TINY_MODEL, 'rollout.tasks_per_batch=1', 'rollout.group_size=2', 'rollout.max_tokens=4', 'env.eval_variations=2'];
const SECOND = 'second interrupt: exiting now (the last complete checkpoint is intact)';

/** Trainers this file started, and the agents' process groups they recorded: killed at the end whatever failed. */
const trainers = new Set<ChildProcess>();
const agentGroups = new Set<number>();
function endStarted(): void {
  for (const pgid of agentGroups) killGroup(pgid);
  for (const t of trainers) if (t.exitCode === null && t.signalCode === null) killGroup(t.pid!);
}
function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL');
  } catch {
    // gone
  }
}
process.once('exit', endStarted);
afterAll(() => {
  endStarted();
  rmSync(root, { recursive: true, force: true });
});

interface Trainer {
  lines: string[];
  waitFor(pattern: RegExp, count?: number): Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Ctrl-C in a terminal: SIGINT to the trainer's process group (the agents run in groups of their own). */
  ctrlC(): void;
  pid: number;
}

/** `empo2 train --agent` in a folder of its own (agent, tasks, run), in its own process group as a shell's foreground job. */
function startTrainer(dir: string, o: { iterations: number; resume?: boolean }): Trainer {
  const args = [
    BIN,
    'train',
    '--agent',
    `node ${join(dir, 'agent.mjs')} ${dir}`,
    '--tasks',
    join(dir, 'tasks.jsonl'),
    '--eval-tasks',
    join(dir, 'eval.jsonl'),
    '--agent-timeout',
    '60', // far above the stop's few seconds: a run that waits for it answers no held call 503
    '--run-dir',
    join(dir, 'run'),
    '--iterations',
    String(o.iterations),
    ...(o.resume ? ['--resume'] : []),
    ...SETTINGS.flatMap((s) => ['--set', s]),
  ];
  const child = spawn(process.execPath, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, OMP_NUM_THREADS: '1' },
  });
  trainers.add(child);
  const lines: string[] = [];
  const waiters: { pattern: RegExp; count: number; resolve: () => void }[] = [];
  const matches = (pattern: RegExp) => lines.filter((l) => pattern.test(l)).length;
  let buffer = '';
  const take = (d: Buffer) => {
    buffer += d.toString('utf8');
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      lines.push(buffer.slice(0, nl));
      buffer = buffer.slice(nl + 1);
      for (const w of waiters) if (matches(w.pattern) >= w.count) w.resolve();
    }
  };
  child.stdout.on('data', take);
  child.stderr.on('data', take);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal })),
  );
  return {
    lines,
    exited,
    pid: child.pid!,
    ctrlC: () => process.kill(-child.pid!, 'SIGINT'),
    waitFor: (pattern, count = 1) =>
      matches(pattern) >= count
        ? Promise.resolve()
        : Promise.race([
            new Promise<void>((r) => waiters.push({ pattern, count, resolve: r })),
            exited.then(({ code, signal }) => {
              throw new Error(`the trainer exited (${code ?? signal}) before printing ${pattern} ×${count}:\n${lines.join('\n')}`);
            }),
          ]),
  };
}

function agentFolder(name: string, hang: 'always' | 'after-training'): string {
  const dir = join(root, name);
  mkdirSync(dir);
  writeFileSync(join(dir, 'agent.mjs'), AGENT);
  writeFileSync(join(dir, 'tasks.jsonl'), '{"word": "apple", "role": "train"}\n{"word": "river", "role": "train"}\n');
  writeFileSync(join(dir, 'eval.jsonl'), '{"word": "stone", "role": "eval"}\n{"word": "pear", "role": "eval"}\n');
  writeFileSync(join(dir, 'hang'), hang);
  return dir;
}

/** The hanging agents' records, their groups remembered for the clean-up. */
function hungAgents(dir: string): { pid: number; pgid: number; sleeper: number }[] {
  const agents = readdirSync(dir)
    .filter((f) => /^agent-\d+\.json$/.test(f))
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as { pid: number; pgid: number; sleeper: number });
  for (const a of agents) agentGroups.add(a.pgid);
  return agents;
}

/** Processes of process group `pgid` that are not zombies (a zombie has ended; its parent may not reap it at once). */
function liveMembers(pgid: number): number[] {
  const live: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && state !== 'Z') live.push(Number(entry));
  }
  return live;
}

/**
 * Waits until no process of these groups is left. The trainer has exited: a group still there after the
 * wait is one nothing will end any more (the wait only covers the kernel's delivery of SIGKILL).
 */
async function expectGroupsGone(pgids: number[]): Promise<void> {
  const left = () => pgids.flatMap(liveMembers);
  for (let i = 0; i < 100 && left().length > 0; i++) await sleep(100);
  expect(left()).toEqual([]);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolves once no SIGINT is pending for `pid` (the kernel has handed it to Node's handler): a wait on a state, not a delay. */
async function sigintDelivered(pid: number): Promise<void> {
  for (;;) {
    let status: string;
    try {
      status = readFileSync(`/proc/${pid}/status`, 'utf8');
    } catch {
      return;
    }
    const pending = [...status.matchAll(/^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)].some((m) => (BigInt(`0x${m[1]}`) & 2n) !== 0n);
    if (!pending) return;
    await sleep(5);
  }
}

const metrics = (runDir: string) =>
  existsSync(join(runDir, 'metrics.jsonl'))
    ? readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .filter((l) => l)
        .map((l) => JSON.parse(l) as { type: string; iteration: number; mean_score?: number })
    : [];
const evalIterations = (runDir: string) =>
  metrics(runDir)
    .filter((m) => m.type === 'eval')
    .map((m) => m.iteration);

/** Both held calls were answered 503, saying that the run is stopping. */
function expectAnswered503(dir: string, agents: { pid: number }[]): void {
  for (const a of agents) {
    const answer = JSON.parse(readFileSync(join(dir, `answer-${a.pid}.json`), 'utf8')) as { status?: number; body?: string };
    expect(answer.status, JSON.stringify(answer)).toBe(503);
    expect((JSON.parse(answer.body!) as { error: { message: string } }).error.message).toMatch(/^the run is stopping \(Ctrl-C\)/);
  }
}

const HOLDING = /^\[agent ep\S+\] holding a call open$/;

describe('Ctrl-C during an evaluation of `empo2 train --agent`', () => {
  it('during the evaluation before training: stops it with nothing written, kills the agents at once; a new start makes it again', async () => {
    const dir = agentFolder('before', 'always');
    const runDir = join(dir, 'run');
    const t = startTrainer(dir, { iterations: 1 });
    await t.waitFor(HOLDING, 2);
    const agents = hungAgents(dir);
    expect(agents).toHaveLength(2);
    t.ctrlC();
    const { code } = await t.exited;
    const output = t.lines.join('\n');
    expect(code, output).toBe(130);
    expect(output).toContain('interrupt: stopping this evaluation');
    expect(output).toContain('stopped the evaluation at iteration 0; nothing of it was kept');
    expect(output).toContain(`stopped before iteration 1, with no checkpoint; start again with: empo2 train --run-dir ${runDir}`);
    expect(t.lines.filter((l) => /^iter 1\//.test(l))).toEqual([]);
    expect(output).not.toContain('gateway error');
    expect(metrics(runDir)).toEqual([]);
    expect(existsSync(join(runDir, 'eval.md'))).toBe(false);
    expect(existsSync(join(runDir, 'run.lock'))).toBe(false);
    expectAnswered503(dir, agents);
    await expectGroupsGone(agents.map((a) => a.pgid));

    writeFileSync(join(dir, 'hang'), 'never');
    const again = startTrainer(dir, { iterations: 1 });
    const done = await again.exited;
    expect(done.code, again.lines.join('\n')).toBe(0);
    expect(evalIterations(runDir)).toEqual([0, 1]);
    expect(existsSync(join(runDir, 'eval.md'))).toBe(true);
  }, 240_000);

  it('during the final evaluation: stops it with nothing written; --resume makes it again', async () => {
    const dir = agentFolder('final', 'after-training');
    const runDir = join(dir, 'run');
    const t = startTrainer(dir, { iterations: 1 });
    await t.waitFor(HOLDING, 2);
    const agents = hungAgents(dir);
    t.ctrlC();
    const { code } = await t.exited;
    const output = t.lines.join('\n');
    expect(code, output).toBe(130);
    expect(output).toContain('stopped the evaluation at iteration 1; nothing of it was kept');
    expect(output).toContain(`stopped at iteration 1; continue with: empo2 train --run-dir ${runDir} --resume`);
    expect(evalIterations(runDir)).toEqual([0]);
    expect(existsSync(join(runDir, 'eval.md'))).toBe(false);
    expect(existsSync(join(runDir, 'run.lock'))).toBe(false);
    expectAnswered503(dir, agents);
    await expectGroupsGone(agents.map((a) => a.pgid));

    writeFileSync(join(dir, 'hang'), 'never');
    const resumed = startTrainer(dir, { iterations: 1, resume: true });
    const done = await resumed.exited;
    expect(done.code, resumed.lines.join('\n')).toBe(0);
    expect(evalIterations(runDir)).toEqual([0, 1]);
    expect(readFileSync(join(runDir, 'eval.md'), 'utf8')).toContain('| **all** | 2 | 100.0 | 100.0 |');
  }, 240_000);

  it('a second Ctrl-C exits with 130 and leaves no agent process (nor its children) and no run.lock', async () => {
    const dir = agentFolder('twice', 'always');
    const runDir = join(dir, 'run');
    const t = startTrainer(dir, { iterations: 1 });
    await t.waitFor(HOLDING, 2);
    const agents = hungAgents(dir);
    t.ctrlC();
    await sigintDelivered(t.pid);
    t.ctrlC();
    const { code, signal } = await t.exited;
    const output = t.lines.join('\n');
    expect({ code, signal }, output).toEqual({ code: 130, signal: null });
    expect(t.lines).toContain(SECOND);
    expect(existsSync(join(runDir, 'run.lock'))).toBe(false);
    expect(metrics(runDir)).toEqual([]);
    await expectGroupsGone(agents.map((a) => a.pgid));
  }, 240_000);

  it('SIGTERM to the trainer exits with 143 and leaves no agent process (nor its children) and no run.lock', async () => {
    const dir = agentFolder('term', 'always');
    const runDir = join(dir, 'run');
    const t = startTrainer(dir, { iterations: 1 });
    await t.waitFor(HOLDING, 2);
    const agents = hungAgents(dir);
    process.kill(t.pid, 'SIGTERM');
    const { code, signal } = await t.exited;
    expect({ code, signal }, t.lines.join('\n')).toEqual({ code: 143, signal: null });
    expect(existsSync(join(runDir, 'run.lock'))).toBe(false);
    expect(metrics(runDir)).toEqual([]);
    await expectGroupsGone(agents.map((a) => a.pgid));
  }, 240_000);
});
