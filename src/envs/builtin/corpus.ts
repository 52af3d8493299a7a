/**
 * Sample text of the built-in environment (task descriptions, observations, actions and
 * valid actions from oracle and random rollouts over train variations), for training the
 * policy's tokenizer. Deterministic.
 */
import { BUILTIN_TASKS, SPLIT_RANGES } from './env.ts';
import { Game, generateWorld } from './game.ts';
import { randomAct } from './oracle.ts';
import { Rng } from './rng.ts';

/** Free-text actions mixed into random rollouts so that refusals ("You don't see a key here.") appear too. */
const PROBES = [
  'take key',
  'open box',
  'go to kitchen',
  'turn on lamp',
  'read note',
  'fill kettle',
  'unlock door to attic',
  'put battery in lamp',
  'put pot on stove',
  'drop coin',
  'wait',
  'jump',
];

/**
 * Text lines of `maxEpisodes` episodes, alternating oracle and random rollouts and cycling
 * over tasks and train variations. Each episode gives its task, observations, actions and
 * the distinct valid actions it was offered.
 */
export function sampleCorpus(maxEpisodes = 600, tasks: readonly string[] = BUILTIN_TASKS): string[] {
  const rng = new Rng('builtin:corpus');
  const [lo, hi] = SPLIT_RANGES.train;
  const lines: string[] = [];
  for (let e = 0; e < maxEpisodes; e++) {
    const task = tasks[e % tasks.length];
    const round = Math.floor(e / tasks.length);
    const oracle = round % 2 === 0;
    const variation = lo + (Math.floor(round / 2) % (hi - lo));
    const g = new Game(generateWorld(task, variation));
    const offered = new Set<string>(g.validActions());
    lines.push(g.task, g.observe());
    while (!g.done) {
      const a = oracle ? g.oracleAction() : rng.chance(0.1) ? rng.pick(PROBES) : randomAct(g.validActions(), rng);
      if (a === null) break;
      lines.push(a, g.step(a).observation);
      for (const v of g.validActions()) offered.add(v);
    }
    lines.push(...offered);
  }
  return lines;
}
