/**
 * Tip-reading warm-up for the tiny from-scratch model.
 *
 * EMPO² assumes a policy that reads its prompt: the paper's Qwen2.5-7B-Instruct acts on a retrieved
 * tip ("the action you took was X; you finally scored 100/100") without being trained to. A 0.25M
 * model built from scratch has no such skill, so in its hands tips are noise (results/builtin-explore,
 * results/builtin-explore-lr1e-3).
 * This warm-up gives it the skill, and only the skill, by supervised training on synthetic prompts:
 *
 *  - states come from random-action episodes on the configured train tasks (never the test split);
 *  - each prompt carries 0..top_k tips in the memory's own format, with synthetic actions and scores;
 *  - the target is the action of the best-scoring tip when that score is positive and the action is
 *    valid here, otherwise a random valid action that no tip names (a failed memory says "try
 *    something else").
 *
 * Targets never depend on the task's reward: the model learns to follow and avoid memories, not how
 * to solve a task, and without tips it stays close to uniform over valid actions. GRPO and EMPO²
 * comparisons start both arms from the same warmed-up weights.
 */
import type { Config } from '../config/schema.ts';
import type { Env } from '../envs/types.ts';
import { turnEventLoop } from '../util/event-loop.ts';
import { summarise, stepTipText, type StepCredit, type Trajectory } from '../memory/reflector.ts';
import type { PolicyEngine, TrainSequence } from '../policy/types.ts';
import { Rng } from '../util/rng.ts';
import { endTokenIds } from '../policy/index.ts';
import { encodePrompt, type PromptSettings, type Turn } from './prompt.ts';
import { promptSettings } from './prompt-style.ts';

export interface TipWarmupSettings {
  examples: number;
  epochs: number;
  batchSize: number;
  lr: number;
  /** Most tips in one prompt (the memory's top_k). */
  maxTips: number;
  /** Where the best tip is shown (experimental.tip_order). */
  bestLast: boolean;
  /** What a tip's score means (experimental.step_credit): the made-up tips are written the way the memory writes them. */
  credit: StepCredit;
  /** Whether a tip starts with an episode summary (experimental.step_tip_reflection): the made-up tips look like the memory's. */
  reflection: boolean;
  prompt: PromptSettings;
  seed: number;
}

interface RecordedState {
  task: string;
  description: string;
  turns: Turn[];
  valid: string[];
}

export interface WarmupExample {
  prompt: number[];
  response: number[];
  /** The target action, and whether it copies a tip (true) or avoids them (false) or no tips were shown (null). */
  action: string;
  followsTip: boolean | null;
  /** The valid actions of the state (what constrained decoding chooses among). */
  valid: string[];
}

/** Synthetic final scores: mostly failures, as a young memory holds, with some partial and full successes. */
const SCORES = [0, 0, 0, 0, 10, 20, 25, 33, 50, 67, 75, 100];

/** Random-action episodes over the train split: the states and trajectories the examples are built from. */
async function collectStates(
  env: Env,
  tasks: readonly string[],
  episodesPerTask: number,
  rng: Rng,
): Promise<{ states: RecordedState[]; trajectories: Map<string, Trajectory[]> }> {
  const states: RecordedState[] = [];
  const trajectories = new Map<string, Trajectory[]>();
  for (const task of tasks) {
    const variations = env.variations(task, 'train');
    if (variations.length === 0) throw new Error(`tip warm-up: task ${task} has no train variations`);
    const list: Trajectory[] = [];
    for (let e = 0; e < episodesPerTask; e++) {
      const first = await env.reset(task, variations[rng.int(variations.length)], rng.int(1_000_000));
      const turns: Turn[] = [{ observation: first.observation }];
      let valid = first.validActions;
      const steps: Trajectory['steps'] = [];
      let score = 0;
      for (let t = 0; t < env.maxSteps(task) && valid.length > 0; t++) {
        states.push({ task, description: first.task, turns: turns.map((x) => ({ ...x })), valid });
        const action = valid[rng.int(valid.length)];
        const r = await env.step(action);
        steps.push({ observation: turns[turns.length - 1].observation, action, score: r.score });
        turns[turns.length - 1].action = action;
        turns.push({ observation: r.observation });
        valid = r.validActions;
        score = r.score;
        if (r.done) break;
      }
      list.push({ task: first.task, steps, finalObservation: turns[turns.length - 1].observation, score, success: score >= 100 });
    }
    trajectories.set(task, list);
  }
  return { states, trajectories };
}

/** One training example: a state, its synthetic tips (best first, as retrieval orders them) and the target action. */
export function makeExample(
  state: RecordedState,
  s: Pick<TipWarmupSettings, 'maxTips' | 'prompt' | 'bestLast' | 'credit' | 'reflection'>,
  from: {
    /** Episode summaries of the state's task, which the made-up tips open with. */
    summaries: readonly string[];
    /** Actions of other states, which a made-up tip may name. */
    otherActions: readonly string[];
    tokenizer: { encode(text: string): number[]; tokenToId(t: string): number | undefined };
    rng: Rng;
  },
): WarmupExample {
  const { summaries, otherActions, tokenizer, rng } = from;
  const n = rng.next() < 0.25 ? 0 : 1 + rng.int(s.maxTips);
  const tips = Array.from({ length: n }, (_, j) => ({
    // Tip 0 names an action valid here (memories come from similar states); the others may not, and
    // when one of them outscores it the best tip cannot be followed here.
    action: j === 0 || rng.next() < 0.5 ? state.valid[rng.int(state.valid.length)] : otherActions[rng.int(otherActions.length)],
    score: SCORES[rng.int(SCORES.length)],
    summary: summaries[rng.int(summaries.length)],
  }));
  tips.sort((a, b) => b.score - a.score);
  let action: string;
  let followsTip: boolean | null = null;
  if (n > 0 && tips[0].score > 0 && state.valid.includes(tips[0].action)) {
    action = tips[0].action;
    followsTip = true;
  } else {
    const untried = state.valid.filter((a) => !tips.some((t) => t.action === a));
    const pool = untried.length ? untried : state.valid;
    action = pool[rng.int(pool.length)];
    if (n > 0) followsTip = false;
  }
  const texts = tips.map((t) => stepTipText(s.reflection ? t.summary : '', t.action, t.score, s.credit));
  if (s.bestLast) texts.reverse();
  const { ids } = encodePrompt(tokenizer, { task: state.description, turns: state.turns, validActions: state.valid }, s.prompt, texts);
  return { prompt: ids, response: [...tokenizer.encode(action), endTokenIds(tokenizer)[0]], action, followsTip, valid: state.valid };
}

export async function buildWarmupExamples(
  env: Env,
  tasks: readonly string[],
  tokenizer: PolicyEngine['tokenizer'],
  s: TipWarmupSettings,
): Promise<WarmupExample[]> {
  const rng = new Rng(s.seed * 7919 + 17);
  const { states, trajectories } = await collectStates(env, tasks, 40, rng);
  const summaries = new Map([...trajectories].map(([task, list]) => [task, list.map((t) => summarise(t))]));
  const actions = [...new Set(states.flatMap((x) => x.valid))];
  return Array.from({ length: s.examples }, () => {
    const state = states[rng.int(states.length)];
    return makeExample(state, s, { summaries: summaries.get(state.task)!, otherActions: actions, tokenizer, rng });
  });
}

export interface WarmupReport {
  examples: number;
  steps: number;
  seconds: number;
  /** Mean negative log-likelihood per target token, first and last epoch. */
  firstLoss: number;
  lastLoss: number;
}

/**
 * One supervised step on `batch` through the engine's own update: with the old log-probs set to the
 * current ones (ratio 1) and advantage 1 on every target token, the clipped objective's gradient is
 * exactly the log-likelihood gradient. Returns the batch's target NLL before the step.
 */
async function supervisedStep(engine: PolicyEngine, batch: readonly WarmupExample[], lr: number): Promise<{ nll: number; tokens: number }> {
  const old = await engine.logprobs([...batch]);
  const seqs: TrainSequence[] = batch.map((x, k) => ({
    prompt: x.prompt,
    response: x.response,
    oldLogprobs: old[k],
    advantages: x.response.map(() => 1),
    mask: x.response.map(() => 1),
  }));
  await engine.trainStep(seqs, SUPERVISED_OBJECTIVE, 1, lr);
  let nll = 0;
  for (const lp of old) for (const v of lp) nll -= v;
  return { nll, tokens: old.reduce((n, lp) => n + lp.length, 0) };
}

const SUPERVISED_OBJECTIVE = { clipLow: 0.2, clipHigh: 0.3, dualClip: null, klCoef: 0, lowProbDelta: null };

export async function runTipWarmup(
  engine: PolicyEngine,
  examples: readonly WarmupExample[],
  s: TipWarmupSettings,
  log: (line: string) => void = () => {},
): Promise<WarmupReport> {
  const rng = new Rng(s.seed * 104_729 + 3);
  const t0 = performance.now();
  let steps = 0;
  let firstLoss = NaN;
  let lastLoss = NaN;
  for (let epoch = 0; epoch < s.epochs; epoch++) {
    const order = examples.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [order[i], order[j]] = [order[j], order[i]];
    }
    let nll = 0;
    let tokens = 0;
    for (let start = 0; start < order.length; start += s.batchSize) {
      const step = await supervisedStep(
        engine,
        order.slice(start, start + s.batchSize).map((i) => examples[i]),
        s.lr,
      );
      await turnEventLoop();
      nll += step.nll;
      tokens += step.tokens;
      steps++;
    }
    const loss = nll / Math.max(1, tokens);
    if (epoch === 0) firstLoss = loss;
    lastLoss = loss;
    log(
      `tip warm-up: epoch ${epoch + 1}/${s.epochs}, target NLL ${loss.toFixed(3)} per token, ${((performance.now() - t0) / 1000).toFixed(0)} s`,
    );
  }
  return { examples: examples.length, steps, seconds: (performance.now() - t0) / 1000, firstLoss, lastLoss };
}

/**
 * Tip rehearsal (experimental.tip_rehearsal; not in the paper): the warm-up's kind of examples, replayed
 * one supervised step per RL iteration. Measured on the CPU proxy, RL erases the tip reading the
 * warm-up taught (results/builtin-explore-tipreader-gain/oracle-tips-32), in EMPO² because most of
 * its samples train tip-free prompts; the replay keeps the skill the memory relies on. Only prompts that show tips are replayed: the
 * warm-up's tip-free examples target a random valid action and would pull the tip-free policy,
 * which RL trains, towards uniform. Targets never depend on the task's reward, so the replay teaches
 * no task; its random-action episodes, like the warm-up's, are on the train split.
 */
export class TipRehearsal {
  private constructor(
    readonly pool: readonly WarmupExample[],
    private readonly batchSize: number,
    private readonly lr: number,
    private readonly seed: number,
  ) {}

  static readonly POOL_SIZE = 2000;

  static async build(env: Env, tasks: readonly string[], tokenizer: PolicyEngine['tokenizer'], cfg: Config): Promise<TipRehearsal> {
    // Its own seed: the examples differ from the ones a warm-up in the same run trained on.
    const settings = { ...tipWarmupSettings(cfg), examples: TipRehearsal.POOL_SIZE, seed: cfg.seed + 7_777 };
    const pool = (await buildWarmupExamples(env, tasks, tokenizer, settings)).filter((x) => x.followsTip !== null);
    return new TipRehearsal(pool, cfg.experimental.tip_rehearsal, cfg.experimental.tip_rehearsal_lr ?? cfg.optim.lr, cfg.seed);
  }

  /** The examples replayed after iteration `iteration`: a function of (seed, iteration), so a resumed run replays the same. */
  batchFor(iteration: number): WarmupExample[] {
    const rng = new Rng(this.seed * 1_000_003 + iteration * 92_821 + 11);
    const order = this.pool.map((_, i) => i);
    const n = Math.min(this.batchSize, order.length);
    for (let i = 0; i < n; i++) {
      const j = i + rng.int(order.length - i);
      [order[i], order[j]] = [order[j], order[i]];
    }
    return order.slice(0, n).map((i) => this.pool[i]);
  }

  /** One supervised step; returns the replayed targets' NLL per token before it (how much tip reading was lost). */
  async step(engine: PolicyEngine, iteration: number): Promise<number> {
    const { nll, tokens } = await supervisedStep(engine, this.batchFor(iteration), this.lr);
    return nll / Math.max(1, tokens);
  }
}

export function tipWarmupSettings(cfg: Config): TipWarmupSettings {
  return {
    examples: cfg.experimental.tip_warmup_examples,
    epochs: cfg.experimental.tip_warmup_epochs,
    batchSize: 32,
    lr: cfg.experimental.tip_warmup_lr,
    maxTips: cfg.memory.top_k,
    bestLast: cfg.experimental.tip_order === 'best_last',
    credit: cfg.experimental.step_credit,
    reflection: cfg.experimental.step_tip_reflection,
    prompt: promptSettings(cfg),
    seed: cfg.seed,
  };
}

export interface TipFollowing {
  /** Share of examples where the target is the most likely valid action, by kind of example. */
  follow: number;
  avoid: number;
  noTips: number;
  /** Mean probability of the target among the valid actions, for examples that follow a tip. */
  followProbability: number;
  /** The same for a uniform choice, for reference. */
  uniformProbability: number;
}

/** How well the policy follows (and avoids) tips, scored over every valid action of each example. */
export async function measureTipFollowing(engine: PolicyEngine, examples: readonly WarmupExample[]): Promise<TipFollowing> {
  const end = endTokenIds(engine.tokenizer)[0];
  const hits = { follow: [0, 0], avoid: [0, 0], noTips: [0, 0] };
  let followProbability = 0;
  let uniformProbability = 0;
  // Every (example, valid action) pair, scored in batches of about 256 sequences.
  const totals: number[][] = [];
  for (let start = 0; start < examples.length;) {
    const chunk: WarmupExample[] = [];
    for (let n = 0; start < examples.length && (chunk.length === 0 || n + examples[start].valid.length <= 256); start++) {
      chunk.push(examples[start]);
      n += examples[start].valid.length;
    }
    const batch = chunk.flatMap((x) => x.valid.map((a) => ({ prompt: x.prompt, response: [...engine.tokenizer.encode(a), end] })));
    const sums = (await engine.logprobs(batch)).map((lp) => lp.reduce((a, b) => a + b, 0));
    await turnEventLoop();
    let k = 0;
    for (const x of chunk) {
      totals.push(sums.slice(k, k + x.valid.length));
      k += x.valid.length;
    }
  }
  for (const [i, x] of examples.entries()) {
    const lps = totals[i];
    const max = Math.max(...lps);
    const z = lps.reduce((a, b) => a + Math.exp(b - max), 0);
    const target = x.valid.indexOf(x.action);
    const kind = x.followsTip === true ? 'follow' : x.followsTip === false ? 'avoid' : 'noTips';
    hits[kind][1]++;
    if (lps[target] === max) hits[kind][0]++;
    if (kind === 'follow') {
      followProbability += Math.exp(lps[target] - max) / z;
      uniformProbability += 1 / x.valid.length;
    }
  }
  const rate = ([h, n]: number[]) => (n ? h / n : NaN);
  return {
    follow: rate(hits.follow),
    avoid: rate(hits.avoid),
    noTips: rate(hits.noTips),
    followProbability: followProbability / Math.max(1, hits.follow[1]),
    uniformProbability: uniformProbability / Math.max(1, hits.follow[1]),
  };
}
