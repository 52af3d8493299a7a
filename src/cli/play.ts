/**
 * `empo2 play`: a person plays an environment in the terminal. Shows the task, the
 * observation, the score and the numbered valid actions; the person types an action (free
 * text) or its number; `quit` ends. Environments with long action lists (ScienceWorld offers
 * thousands of object combinations) show only the count; `actions WORD` lists the matching ones.
 */
import * as readline from 'node:readline';
import type { Env } from '../envs/types.ts';

export interface PlayOptions {
  env: Env;
  task: string;
  variation: number;
  seed?: number;
  input?: NodeJS.ReadableStream;
  output?: NodeJS.WritableStream;
  /** Lists longer than this are not printed after every step (default 60). */
  listLimit?: number;
}

export interface PlayResult {
  score: number;
  steps: number;
  /** The episode ended (success, failure or step limit), as opposed to quit or end of input. */
  done: boolean;
  quit: boolean;
  /** The actions sent to the environment, numbers resolved. */
  actions: string[];
}

const QUIT = new Set(['quit', 'exit', 'q']);
const LIST_COMMAND = /^actions(?:\s+(.*))?$/i;

export async function play(opts: PlayOptions): Promise<PlayResult> {
  const { env, task, variation, seed } = opts;
  const input = opts.input ?? process.stdin;
  const output = opts.output ?? process.stdout;
  const say = (s = '') => output.write(`${s}\n`);
  const maxSteps = env.maxSteps(task);

  const first = await env.reset(task, variation, seed);
  let actions = first.validActions;
  let score = 0;
  let steps = 0;
  let quit = false;
  const sent: string[] = [];

  const listLimit = opts.listLimit ?? 60;
  const listActions = (filter: string) => {
    const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
    const matching = actions.map((a, i) => [a, i] as const).filter(([a]) => words.every((w) => a.toLowerCase().includes(w)));
    if (matching.length === 0)
      say(words.length === 0 ? 'No valid actions.' : `No valid action contains ${words.map((w) => `"${w}"`).join(' and ')}.`);
    // Numbers stay those of the full list, so a filtered listing can be answered with a number.
    matching.forEach(([a, i]) => say(`  ${String(i + 1).padStart(2)}. ${a}`));
  };
  const showActions = () => {
    if (actions.length <= listLimit) {
      say(`Score ${score}/100, step ${steps}/${maxSteps}. Actions (type one, its number, or quit):`);
      listActions('');
    } else {
      say(
        `Score ${score}/100, step ${steps}/${maxSteps}. ${actions.length} valid actions: type one or its number, ` +
          `'actions WORD...' to list those containing the words ('actions' lists all), or quit.`,
      );
    }
  };

  say(`Task: ${first.task}`);
  say(first.observation);
  showActions();

  const rl = readline.createInterface({ input, output, terminal: false });
  rl.setPrompt('> ');
  rl.prompt();
  try {
    for await (const raw of rl) {
      const line = raw.trim();
      if (QUIT.has(line.toLowerCase())) {
        quit = true;
        break;
      }
      if (!line) {
        rl.prompt();
        continue;
      }
      const listing = LIST_COMMAND.exec(line);
      if (listing) {
        listActions(listing[1] ?? '');
        rl.prompt();
        continue;
      }
      let action = line;
      if (/^\d+$/.test(line)) {
        const n = Number(line);
        if (n < 1 || n > actions.length) {
          say(`There is no action ${n}; pick 1 to ${actions.length}.`);
          rl.prompt();
          continue;
        }
        action = actions[n - 1];
        say(`(${action})`);
      }
      const r = await env.step(action);
      sent.push(action);
      steps++;
      score = r.score;
      actions = r.validActions;
      say(r.observation);
      if (r.reward) say(`${r.reward > 0 ? '+' : ''}${r.reward} points.`);
      if (r.done) break;
      showActions();
      rl.prompt();
    }
  } finally {
    rl.close();
  }
  const done = env.done();
  say(done ? `Episode over: score ${score}/100 in ${steps} steps.` : `Stopped: score ${score}/100 after ${steps} steps.`);
  return { score, steps, done, quit, actions: sent };
}
