/**
 * An agent in any language: a command run once per episode (`empo2 train --agent "python my_agent.py"`),
 * in a shell, in a process group of its own. It is given its episode in the environment:
 *
 *   EMPO2_BASE_URL, OPENAI_BASE_URL   the episode's base URL ({gateway}/episodes/{id}/v1)
 *   EMPO2_API_KEY,  OPENAI_API_KEY    the episode's key
 *   EMPO2_MODEL                       the model name to send
 *   EMPO2_TASK                        the task: its text when it is a string, else its JSON
 *   EMPO2_TASK_JSON                   the task as JSON, always
 *   EMPO2_EPISODE_ID, EMPO2_SEED      the episode's id and rollout seed
 *
 * (the OPENAI_ names make an unmodified OpenAI client talk to the gateway). It reports its reward as
 * the last non-empty line of its standard output, `reward: 0.7` or a JSON object (`{"reward": 0.7}`,
 * `{"score": 70}`, with optional `steps` and `final_observation`), or by POST {baseURL}/empo2/reward.
 * When the episode is over for the trainer (a timeout, the run stopping) the whole process group is
 * sent SIGTERM, then SIGKILL 2 s later; and once the command exits, whatever it left running in its
 * group is killed too, so no process outlives its episode. Nor this process: when it exits (a second
 * Ctrl-C, an error, SIGTERM where the program has no handler of its own), the groups still running are
 * sent SIGKILL. Only a process the kernel ends (SIGKILL) runs no hook, and leaves them.
 */
import { spawn } from 'node:child_process';
import type { AgentInput, AgentOutcome } from './player.ts';

export interface AgentProcessOptions {
  /** A shell command line. */
  command: string;
  cwd?: string;
  /** Told each line the command writes to stderr, with the episode's id. */
  log?: (line: string) => void;
}

// nan and inf as Python prints them, so that the episode fails naming the value (./outcome.ts), not for want of a reward.
const REWARD_LINE = /^reward\s*[:=]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|[-+]?inf(?:inity)?|nan)\s*$/i;
const rewardValue = (text: string) =>
  /nan/i.test(text) ? Number.NaN : /inf/i.test(text) ? (text.startsWith('-') ? -Infinity : Infinity) : Number(text);

/** The outcome in the last non-empty line of `stdout`, or undefined when it states none. */
export function parseRewardLine(stdout: string): AgentOutcome {
  const last = stdout
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0)
    .at(-1);
  if (last === undefined) return undefined;
  const m = REWARD_LINE.exec(last);
  if (m) return rewardValue(m[1]);
  if (!last.startsWith('{')) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(last);
  } catch {
    return undefined;
  }
  const o = json as { reward?: unknown; score?: unknown; steps?: unknown; final_observation?: unknown; description?: unknown };
  if (typeof o.reward !== 'number' && typeof o.score !== 'number') return undefined;
  return {
    reward: typeof o.reward === 'number' ? o.reward : undefined,
    score: typeof o.score === 'number' ? o.score : undefined,
    steps: Array.isArray(o.steps) ? (o.steps as { reward: number; score: number }[]) : undefined,
    finalObservation: typeof o.final_observation === 'string' ? o.final_observation : undefined,
    description: typeof o.description === 'string' ? o.description : undefined,
  };
}

/** Process groups of agents still running, killed when this process exits. */
const running = new Set<number>();
let exitHook = false;

function killRunning(): void {
  for (const pid of running) killGroup(pid, 'SIGKILL');
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // The group is gone already.
  }
}

/** Runs the command for one episode and resolves with the reward its output states (undefined: none, look for a POSTed one). */
export function runAgentProcess(o: AgentProcessOptions, input: AgentInput): Promise<AgentOutcome> {
  const task = typeof input.task === 'string' ? input.task : JSON.stringify(input.task);
  const child = spawn('/bin/sh', ['-c', o.command], {
    cwd: o.cwd,
    detached: true, // its own process group, killed as one
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      EMPO2_BASE_URL: input.baseURL,
      OPENAI_BASE_URL: input.baseURL,
      EMPO2_API_KEY: input.apiKey,
      OPENAI_API_KEY: input.apiKey,
      EMPO2_MODEL: input.model,
      EMPO2_TASK: task,
      EMPO2_TASK_JSON: JSON.stringify(input.task) ?? 'null',
      EMPO2_EPISODE_ID: input.episode.id,
      EMPO2_SEED: String(input.episode.seed),
    },
  });
  if (child.pid === undefined)
    return new Promise<AgentOutcome>((_, reject) =>
      child.once('error', (e) => reject(new Error(`could not start the agent command ${JSON.stringify(o.command)}: ${e.message}`))),
    );
  const pid = child.pid;
  running.add(pid);
  if (!exitHook) {
    exitHook = true;
    process.on('exit', killRunning);
    // SIGTERM's default action ends the process without its exit hooks, which would leave the agents
    // running: with no handler of the program's own, exit as the default would (143), through them.
    if (process.listenerCount('SIGTERM') === 0) process.once('SIGTERM', () => process.exit(143));
  }
  let stdout = '';
  let stderrTail = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout = (stdout + d).slice(-65_536);
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderrTail = (stderrTail + d).slice(-2_000);
    for (const line of d.split('\n')) if (line.trim()) o.log?.(`[agent ${input.episode.id}] ${line}`);
  });
  let hardKill: NodeJS.Timeout | undefined;
  const stop = () => {
    killGroup(pid, 'SIGTERM');
    hardKill = setTimeout(() => killGroup(pid, 'SIGKILL'), 2_000);
  };
  if (input.signal.aborted) stop();
  else input.signal.addEventListener('abort', stop, { once: true });
  return new Promise<AgentOutcome>((resolve, reject) => {
    child.once('error', (e) => reject(new Error(`could not start the agent command ${JSON.stringify(o.command)}: ${e.message}`)));
    child.once('close', (code, signal) => {
      input.signal.removeEventListener('abort', stop);
      clearTimeout(hardKill);
      killGroup(pid, 'SIGKILL'); // what it left running in its group
      running.delete(pid);
      if (code === 0) return resolve(parseRewardLine(stdout));
      const why = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      reject(new Error(`the agent command ${why}${stderrTail.trim() ? `; its last stderr: ${stderrTail.trim().slice(-500)}` : ''}`));
    });
  });
}
