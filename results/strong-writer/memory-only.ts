/**
 * ISSUE #89'S MEMORY-ONLY RESULT (results/strong-writer/PROTOCOL.md, "Memory-only result"): a frozen model
 * (SmolLM2-135M-Instruct) plays the held-out episodes of the built-in environment through `empo2
 * memory-proxy` with the STAND-IN tip writer (./oracle-writer.ts: stand-in (the environment's solver, not a
 * model)), trials 1..K over the same episodes, against the same episodes played with no memory.
 *
 * What runs, all in this process:
 *   - the upstream: `empo2 serve`'s server (src/serve) on `model.path`, or `--upstream URL` already running;
 *   - the stand-in writer (./oracle-writer.ts);
 *   - two memory proxies (src/memory-proxy, `withMemory`), both in front of the upstream: "memory", whose
 *     tips the stand-in writes at each episode's end, and "no-memory", the pass-through: its database stays
 *     empty (no episode of it reports a reward, so no tip is ever written or shown);
 *   - the agent: the built-in environment played over plain OpenAI chat (the official `openai` client),
 *     each episode with its own base URL from `POST /episodes`, the instruct prompt
 *     (src/trainer/prompt.ts instructMessages, what the trainer renders), decoding as the config's
 *     evaluation: `rollout.eval_temperature`, `rollout.max_tokens`, constrained to the valid actions by
 *     `allowed_texts` (which the proxy passes on and `empo2 serve` honours), a seed per (episode, trial,
 *     step) shared by both arms, so that where no tip is shown the two arms sample alike; and a
 *     `prompt_cache_key` per episode, under which `empo2 serve` prefills only each call's new tokens.
 *
 * The memory is one slot per episode (`task` of `POST /episodes` = family#variation, the reference's
 * `memory.slot: variation`): an episode is shown only the tips its own earlier trials left, so trial k
 * is shown exactly what trials 1..k-1 wrote, and trial 1 nothing (it must equal the no-memory arm's trial
 * 1). Each episode's description is its task and first observation, which lets the stand-in place it (no
 * task text of power, clue or unlock is unique, and the writer's prompt shows only the last 12 steps).
 *
 * Order: memory trial 1, then trial k of each arm for k = 2..K, then the no-memory arm's trial 1 (the
 * check). Every finished episode is written to <out>/state.json at once (atomically), so a stopped run
 * goes on from the next episode: `npx tsx results/strong-writer/memory-only.ts` again with the same
 * options. A memory episode is recorded before its reward is reported, with its proxy episode id; on
 * resume, one whose report did not reach the database (tips are stored before the report is answered)
 * is played again, so the memory holds each (episode, trial) once.
 *
 *   nice -n 10 env OMP_NUM_THREADS=1 npx tsx results/strong-writer/memory-only.ts \
 *     [-c configs/real-empo2.yaml] [--set key=value ...] [--trials 5] [--out runs/strong-writer/memory-only] \
 *     [--upstream http://127.0.0.1:8000/v1 --upstream-model NAME] [--episodes N] [--stop-after N] [--restarts 5]
 *
 * The report: ./memory-only-report.ts.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { createEnv, loadConfig, withMemory, type Config, type Env, type MemoryProxy } from '../../src/index.ts';
import { HashedNgramEmbedder, promptSettings } from '../../src/internals.ts';
// Deep on purpose: the proxy's own retrieval key, to tell which tips the proxy put into a call.
import { sparseKey } from '../../src/memory-proxy/tip-index.ts';
// Deep on purpose: `empo2 serve` started in this process as the study's upstream (the CLI's own loader).
import { loadServedModel } from '../../src/serve/load.ts';
// Deep on purpose: `empo2 serve` started in this process as the study's upstream (the CLI's own server).
import { startServer, type RunningServer } from '../../src/serve/server.ts';
// Deep on purpose: the trainer's own instruct prompt and action parsing, so the agent reads what the study's policy read.
import { instructMessages, parseAction, type InstructTurn } from '../../src/trainer/prompt.ts';
// Deep on purpose: the trainer's own rule for which valid actions decoding is constrained to.
import { constrainedTo } from '../../src/trainer/rollout.ts';
// Deep on purpose: the state file written as the trainer writes its own (never half-written).
import { writeJsonAtomic } from '../../src/util/atomic-write.ts';
import { startOracleWriter, type OracleWriter } from './oracle-writer.ts';

export const WRITER_LABEL = "stand-in (the environment's solver, not a model)";
export type Arm = 'memory' | 'no-memory';

export interface EpisodeRef {
  task: string;
  variation: number;
}

/** One episode played in one trial of one arm. */
export interface Play {
  arm: Arm;
  trial: number;
  /** Index into the state's episodes. */
  episode: number;
  score: number;
  success: boolean;
  steps: number;
  actions: string[];
  /** Steps whose call the proxy put tips into, and the tips it put in over all steps. */
  steps_with_tips: number;
  tips_shown: number;
  /** Of the steps shown tips that name an action: how many, and how many took one of those actions (adapt's tips_followed). */
  steps_tip_named_action: number;
  steps_took_tip_action: number;
  /** The solver's next action taken, on steps with tips and on steps without. */
  solver_taken_with_tips: number;
  solver_taken_without_tips: number;
  /** memory arm: the proxy's episode id, whether its reward report was answered, the tips it added, why none. */
  proxy_episode: string | null;
  reported: boolean;
  tips_added: number | null;
  tip_skipped: string | null;
  seconds: number;
}

export interface MemoryOnlyState {
  version: 1;
  writer: typeof WRITER_LABEL;
  /** What must not change between a run and its resumption. */
  settings: Record<string, unknown>;
  episodes: EpisodeRef[];
  /** Keyed `${arm}:${trial}:${episode}`. */
  plays: Record<string, Play>;
}

export const playKey = (arm: Arm, trial: number, episode: number) => `${arm}:${trial}:${episode}`;

/** The order the (arm, trial) passes are played in. */
export function passes(trials: number): [Arm, number][] {
  const out: [Arm, number][] = [['memory', 1]];
  for (let t = 2; t <= trials; t++) out.push(['memory', t], ['no-memory', t]);
  out.push(['no-memory', 1]);
  return out;
}

export interface MemoryOnlyOptions {
  /** Config file for the env, prompt and decoding settings (null: the defaults plus `sets`). */
  config: string | null;
  sets: string[];
  out: string;
  trials: number;
  /** An upstream already running (else `empo2 serve`'s server on model.path, in this process). */
  upstream?: { baseURL: string; model: string };
  /** Only the first N held-out episodes (smoke runs, tests). */
  episodes?: number;
  /** Return after playing this many episodes (tests of resumption). */
  stopAfter?: number;
  log?: (line: string) => void;
  signal?: AbortSignal;
}

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim();

/** The sampling seed of one call: the same in both arms for the same (episode, trial, step). */
export function callSeed(base: number, trial: number, episode: number, step: number): number {
  return 1 + ((((base * 7919 + trial * 1_000_003 + episode * 10_007 + step * 101) % 2_147_483_000) + 2_147_483_000) % 2_147_483_000);
}

function heldOut(env: Env, cfg: Config, limit: number | undefined): EpisodeRef[] {
  const list = (cfg.env.tasks ?? env.tasks()).flatMap((task) =>
    env
      .variations(task, cfg.env.eval_split)
      .slice(0, cfg.env.eval_variations)
      .map((variation) => ({ task, variation })),
  );
  return limit === undefined ? list : list.slice(0, limit);
}

function loadState(file: string, fresh: MemoryOnlyState): MemoryOnlyState {
  if (!existsSync(file)) return fresh;
  const saved = JSON.parse(readFileSync(file, 'utf8')) as MemoryOnlyState;
  const a = JSON.stringify({ settings: saved.settings, episodes: saved.episodes });
  const b = JSON.stringify({ settings: fresh.settings, episodes: fresh.episodes });
  if (a !== b)
    throw new Error(
      `${file} was written with other settings or episodes; use another --out, or the same options.\n  saved: ${a}\n  now:   ${b}`,
    );
  return saved;
}

/** The proxy's episode ids whose report reached its database. */
function reportedEpisode(proxy: MemoryProxy, id: string): boolean {
  return proxy.store.db.prepare('SELECT 1 AS found FROM episodes WHERE id = ?').get(id) !== undefined;
}

export async function runMemoryOnly(o: MemoryOnlyOptions): Promise<MemoryOnlyState> {
  const log = o.log ?? ((line: string) => console.log(line));
  const cfg = loadConfig(o.config, { set: o.sets });
  const prompt = promptSettings(cfg);
  mkdirSync(o.out, { recursive: true });
  const env = await createEnv({ ...cfg.env, options: cfg.env.options ?? {} });
  const closers: (() => Promise<void> | void)[] = [() => env.close()];
  const close = async () => {
    for (const c of closers.reverse()) await c();
  };
  try {
    const episodes = heldOut(env, cfg, o.episodes);
    const stateFile = join(o.out, 'state.json');
    const settings = {
      model: o.upstream?.model ?? cfg.model.path,
      config: o.config,
      sets: o.sets,
      tasks: cfg.env.tasks,
      eval_split: cfg.env.eval_split,
      max_steps: cfg.env.max_steps,
      temperature: cfg.rollout.eval_temperature,
      max_tokens: cfg.rollout.max_tokens,
      constrained: cfg.rollout.constrained,
      seed: cfg.seed,
      prompt: { history: prompt.history, showValidActions: prompt.showValidActions, system: prompt.system },
      memory: { slot: 'variation', embedder: "hashed n-gram, 1024 dims (the proxy's)", per_step_entries: true },
      trials: o.trials,
    };
    const state = loadState(stateFile, { version: 1, writer: WRITER_LABEL, settings, episodes, plays: {} });
    const save = () => writeJsonAtomic(stateFile, state);

    // The upstream: `empo2 serve`'s server on the model, unless one is given.
    let upstream = o.upstream;
    /** Drops an episode's prompt cache in the server this process runs (an upstream given runs its own). */
    let releaseCache = (_key: string) => {};
    if (!upstream) {
      if (!cfg.model.path) throw new Error('model.path is not set: give a model to serve, or --upstream');
      const served = await loadServedModel(cfg.model.path);
      const model = basename(resolve(cfg.model.path));
      const server: RunningServer = await startServer({
        engine: served.engine,
        modelName: model,
        port: 0,
        vocabSize: served.vocabSize,
        maxModelLen: served.maxModelLen,
        log: (l) => log(`[serve] ${l}`),
      });
      closers.push(async () => {
        await server.close();
        served.engine.dispose();
      });
      upstream = { baseURL: `${server.url}/v1`, model };
      releaseCache = (key) => served.engine.releaseCache([key]);
    }
    const writer: OracleWriter = await startOracleWriter({ port: 0, tasks: cfg.env.tasks });
    closers.push(() => writer.close());
    const proxyLog = (l: string) => log(`[proxy] ${l}`);
    const proxies: Record<Arm, MemoryProxy> = {
      memory: await withMemory({
        upstream,
        memory: join(o.out, 'memory.sqlite'),
        reflector: { baseURL: writer.url, model: 'oracle-writer' },
        log: proxyLog,
      }),
      // The pass-through: no episode reports to it, so its memory stays empty.
      'no-memory': await withMemory({ upstream, memory: join(o.out, 'no-memory.sqlite'), reflector: 'summary', log: proxyLog }),
    };
    closers.push(
      () => proxies.memory.close(),
      () => proxies['no-memory'].close(),
    );
    const embedder = new HashedNgramEmbedder({ dim: 1024 });

    // A memory episode recorded but not reported: kept if its report reached the database, else played again.
    for (const [key, p] of Object.entries(state.plays))
      if (p.arm === 'memory' && !p.reported) {
        if (p.proxy_episode && reportedEpisode(proxies.memory, p.proxy_episode)) p.reported = true;
        else delete state.plays[key];
      }
    save();

    let played = 0;
    /** Calls of this session that the driver counted as shown tips: the proxy's own count must agree. */
    const counted: Record<Arm, number> = { memory: 0, 'no-memory': 0 };
    for (const [arm, trial] of passes(o.trials)) {
      const proxy = proxies[arm];
      for (let i = 0; i < episodes.length; i++) {
        if (state.plays[playKey(arm, trial, i)]) continue;
        if (o.signal?.aborted || (o.stopAfter !== undefined && played >= o.stopAfter)) return state;
        const t0 = performance.now();
        const { task, variation } = episodes[i];
        const first = await env.reset(task, variation);
        const slot = `${task}#${variation}`;
        const handle = proxy.startEpisode({ task: slot, description: `${first.task}\n${oneLine(first.observation)}` });
        // The episode's calls extend each other: under one prompt_cache_key `empo2 serve` prefills only each turn's new tokens.
        const cacheKey = `${arm}:${trial}:${i}:${handle.id}`;
        const client = new OpenAI({ baseURL: handle.baseURL, apiKey: handle.apiKey, maxRetries: 3, timeout: 20 * 60_000 });
        const turns: InstructTurn[] = [{ observation: first.observation, validActions: first.validActions }];
        const p: Play = {
          arm,
          trial,
          episode: i,
          score: 0,
          success: false,
          steps: 0,
          actions: [],
          steps_with_tips: 0,
          tips_shown: 0,
          steps_tip_named_action: 0,
          steps_took_tip_action: 0,
          solver_taken_with_tips: 0,
          solver_taken_without_tips: 0,
          proxy_episode: arm === 'memory' ? handle.id : null,
          reported: false,
          tips_added: null,
          tip_skipped: null,
          seconds: 0,
        };
        const stepScores: { reward: number; score: number }[] = [];
        let last = first.observation;
        const limit = cfg.env.max_steps ?? env.maxSteps(task);
        for (let t = 0; t < limit && !env.done(); t++) {
          // Stopped between calls (the signal is not given to each call: a listener per call would pile up on it).
          if (o.signal?.aborted) throw o.signal.reason;
          const turn = turns.at(-1)!;
          const messages = instructMessages(prompt, { task: first.task }, turns);
          // What the proxy puts into this call: the tips its memory holds for the last user message (the same index and keys).
          const [key] = await embedder.embed([messages.at(-1)!.content as string]);
          const shown = proxy.store.index.retrieve(slot, sparseKey(key));
          const allowed = cfg.rollout.constrained ? constrainedTo(turn.validActions) : null;
          const body = {
            model: upstream.model,
            messages,
            temperature: cfg.rollout.eval_temperature,
            max_tokens: cfg.rollout.max_tokens,
            seed: callSeed(cfg.seed, trial, i, t),
            prompt_cache_key: cacheKey,
            ...(allowed ? { allowed_texts: allowed } : {}),
          } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming;
          const r = await client.chat.completions.create(body);
          const answer = r.choices[0]?.message.content ?? '';
          const action = parseAction(answer, turn.validActions);
          const solver = env.oracleAction?.() ?? null;
          const tipActions = shown.map((h) => h.action).filter((a): a is string => a !== null);
          if (shown.length) {
            p.steps_with_tips++;
            p.tips_shown += shown.length;
            if (action === solver) p.solver_taken_with_tips++;
          } else if (action === solver) p.solver_taken_without_tips++;
          if (tipActions.length) {
            p.steps_tip_named_action++;
            if (tipActions.includes(action)) p.steps_took_tip_action++;
          }
          const step = await env.step(action);
          turn.response = answer;
          p.actions.push(action);
          stepScores.push({ reward: step.reward, score: step.score });
          last = step.observation;
          turns.push({ observation: step.observation, validActions: step.validActions });
          if (step.done) break;
        }
        releaseCache(cacheKey);
        counted[arm] += p.steps_with_tips;
        if (proxy.stats().calls_with_tips !== counted[arm])
          throw new Error(`the ${arm} proxy put tips into ${proxy.stats().calls_with_tips} calls, the driver counted ${counted[arm]}`);
        p.steps = p.actions.length;
        p.score = env.score();
        p.success = p.score >= 100;
        p.seconds = (performance.now() - t0) / 1000;
        state.plays[playKey(arm, trial, i)] = p;
        save();
        if (arm === 'memory') {
          const res = await fetch(`${handle.baseURL}/empo2/reward`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${handle.apiKey}` },
            body: JSON.stringify({ score: p.score, steps: stepScores, final_observation: last }),
          });
          const end = (await res.json()) as { tips_added?: number; skipped?: string | null };
          if (res.status !== 200) throw new Error(`the memory proxy refused the reward report: ${res.status} ${JSON.stringify(end)}`);
          p.reported = true;
          p.tips_added = end.tips_added ?? 0;
          p.tip_skipped = end.skipped ?? null;
          save();
        }
        played++;
        log(
          `[${arm} trial ${trial}] ${i + 1}/${episodes.length} ${slot}: score ${p.score}, ${p.steps} steps, ` +
            `tips on ${p.steps_with_tips}, solver's action ${p.solver_taken_with_tips + p.solver_taken_without_tips}` +
            `${arm === 'memory' ? `, tips added ${p.tips_added}${p.tip_skipped ? ` (skipped: ${p.tip_skipped})` : ''}` : ''}, ${p.seconds.toFixed(0)} s`,
        );
      }
    }
    const s = proxies['no-memory'].stats();
    if (s.calls_with_tips !== 0 || s.tips !== 0) throw new Error(`the no-memory proxy showed tips: ${JSON.stringify(s)}`);
    return state;
  } finally {
    await close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: {
      config: { type: 'string', short: 'c', default: 'configs/real-empo2.yaml' },
      set: { type: 'string', short: 's', multiple: true, default: [] },
      trials: { type: 'string', default: '5' },
      out: { type: 'string', default: 'runs/strong-writer/memory-only' },
      upstream: { type: 'string' },
      'upstream-model': { type: 'string' },
      episodes: { type: 'string' },
      'stop-after': { type: 'string' },
      restarts: { type: 'string', default: '5' },
    },
  });
  if (values.upstream && !values['upstream-model']) throw new Error('--upstream needs --upstream-model');
  const ctrl = new AbortController();
  // Stopped between calls: the episode under way is dropped (played again on resume), every finished one is kept.
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.on(sig, () => {
      if (ctrl.signal.aborted) process.exit(1);
      console.log(`${sig}: stopping (finished episodes are in the state file)`);
      ctrl.abort(new Error(sig));
    });
  console.log(`memory-only result (#89), tip writer: ${WRITER_LABEL}`);
  const options: MemoryOnlyOptions = {
    config: values.config || null,
    sets: values.set,
    out: values.out,
    trials: Number(values.trials),
    upstream: values.upstream ? { baseURL: values.upstream, model: values['upstream-model']! } : undefined,
    episodes: values.episodes ? Number(values.episodes) : undefined,
    stopAfter: values['stop-after'] ? Number(values['stop-after']) : undefined,
    signal: ctrl.signal,
  };
  // An unattended run of a day or more: a failure (an upstream that gave up after its retries) starts the
  // servers again and goes on from the state file, up to --restarts times in a row without a new episode.
  let state: MemoryOnlyState | null = null;
  for (let failures = 0; state === null;) {
    const before = existsSync(join(values.out, 'state.json'))
      ? Object.keys((JSON.parse(readFileSync(join(values.out, 'state.json'), 'utf8')) as MemoryOnlyState).plays).length
      : 0;
    try {
      state = await runMemoryOnly(options);
    } catch (e) {
      if (ctrl.signal.aborted) {
        console.log('stopped');
        process.exit(0);
      }
      const after = existsSync(join(values.out, 'state.json'))
        ? Object.keys((JSON.parse(readFileSync(join(values.out, 'state.json'), 'utf8')) as MemoryOnlyState).plays).length
        : 0;
      failures = after > before ? 1 : failures + 1;
      if (failures > Number(values.restarts)) throw e;
      console.log(`failed (${(e as Error).stack ?? String(e)}); starting again in 60 s (${failures} of ${values.restarts})`);
      await new Promise((r) => setTimeout(r, 60_000));
    }
  }
  const total = passes(Number(values.trials)).length * state.episodes.length;
  console.log(`${Object.keys(state.plays).length} of ${total} plays recorded in ${join(values.out, 'state.json')}`);
  process.exit(0);
}
