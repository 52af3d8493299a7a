/**
 * ScienceWorld (AllenAI) behind the project's Env interface, driving the real simulator
 * through the official Python API (see bridge.py for why a bridge process).
 *
 * What the trainer sees, and how it maps to the simulator:
 * - tasks / variations: the 30 official tasks and the simulator's own train/dev/test splits.
 * - reset(): loads (task, variation) with the simplification preset ("easy" by default, as in
 *   the reference) and returns the observation of the first 'look around'. The simulator seeds
 *   its world with the variation index, so an episode is fully determined by (task, variation,
 *   simplification); ScienceWorld has no other seed, and `seed` is only recorded in info.
 *   The first observation is always the same; later ones can drift by a tick in a few tasks
 *   unless `deterministic` is set (see that option).
 * - step(): score and reward are exactly the Python API's: score is the simulator's 0-100
 *   progress, reward the change in score. A failed task (e.g. focusing on the wrong object)
 *   gives score -100, a reward of (-100 - previous score), done = true and
 *   info.outcome = 'failure'. Other endings: 'success' (the simulator completed the task),
 *   'move_limit' (the API's envStepLimit on simulator moves), 'step_limit' (this adapter's
 *   per-task limit on agent actions), 'simulator_error' (see below).
 * - a simulator that dies or stops answering within the per-call deadline is killed; the step
 *   returns done = true, reward 0, the last score, info.outcome = 'simulator_error' and
 *   info.simulatorError, and the next reset() starts a fresh simulator. Nothing is thrown,
 *   so one bad simulator cannot stop a training run.
 * - an action a live simulator could not carry out (the bridge saw a py4j error but the JVM
 *   still answers) is a refused step: reward 0, nothing changes, info.refused says why, and
 *   the episode goes on. Unpaired UTF-16 surrogates, which py4j cannot send, are replaced by
 *   U+FFFD before an action leaves this adapter, so they never get that far.
 * - Calling step() before reset() or after done is a programming error and throws.
 */
import type { Env, ResetResult, Split, StepResult } from '../types.ts';
import { DEFAULT_ACTION_CORRECTION, correctAction, type ActionCorrectionOptions } from './actionCorrection.ts';
import { getTask, loadCatalog, splitVariations, taskNames, type ScienceWorldCatalog } from './catalog.ts';
import { Simulator, SimulatorError, SimulatorRequestError } from './simulator.ts';
import { REFERENCE_DEFAULT_STEP_LIMIT, REFERENCE_MOVE_LIMIT, resolveStepLimit, validateStepLimit } from './stepLimits.ts';

/** The simulator's simplification names; "easy" is its preset of all but openContainers. */
export const SIMPLIFICATIONS = ['teleportAction', 'selfWateringFlowerPots', 'openContainers', 'openDoors', 'noElectricalAction'] as const;
const ELECTRICAL_TASKS = /power-component|conductivity/;

export interface ScienceWorldEnvOptions {
  /** Restrict tasks() to these task names (default: all 30). */
  tasks?: string[];
  /** "easy" (the reference's preset), "" for none, or a comma-separated list of SIMPLIFICATIONS. */
  simplification?: string;
  /** Generate the simulator's gold action sequence at each reset (costs 0.1-6 s per reset). */
  goldPath?: boolean;
  /** Per-task step limits (agent actions), overriding the reference table. */
  stepLimits?: Record<string, number>;
  /** Step limit of tasks that neither stepLimits nor the reference table name. */
  defaultStepLimit?: number;
  /** The Python API's envStepLimit: the episode ends once the simulator's move counter passes it. */
  moveLimit?: number;
  actionCorrection?: Partial<ActionCorrectionOptions>;
  /** Python interpreter with the scienceworld package (default: $EMPO2_PYTHON or .venv/bin/python). */
  python?: string;
  /** Deadline for a simulator to start (JVM launch), ms. */
  startTimeoutMs?: number;
  /** Deadline for one reset, gold-path generation included, ms. */
  resetTimeoutMs?: number;
  /** Deadline for one step, ms. A simulator that misses it is killed and the episode fails. */
  stepTimeoutMs?: number;
  /** How many fresh simulators a reset may try when the simulator dies under it. */
  resetAttempts?: number;
  /**
   * Make replays exactly repeatable. With the official runtime, the same actions from the same
   * (task, variation) can end a tick apart in a different run or after other episodes (the JVM's
   * identity hashes order some of the simulator's sets). true runs the JVM with constant identity
   * hashes: same actions, same observations, always; steps are about a third slower. Default
   * false, the runtime the official API and the reference use.
   */
  deterministic?: boolean;
  /** Extra JVM options, e.g. ['-Xmx2g']: a simulator's JVM takes 1-2 GB RSS with default settings. */
  jvmOptions?: string[];
}

export type EpisodeOutcome = 'running' | 'success' | 'failure' | 'move_limit' | 'step_limit' | 'simulator_error';

interface BridgeObservation {
  observation: string;
  score: number;
  moves: number;
  validActions: string[];
  look: string;
  inventory: string;
  simulatorCompleted: boolean;
}

interface BridgeReset extends BridgeObservation {
  task: string;
  simplificationsUsed: string;
  goldActions: string[] | null;
}

interface BridgeStep extends BridgeObservation {
  reward: number;
  done: boolean;
}

interface Episode {
  task: string;
  variation: number;
  seed: number;
  maxSteps: number;
  stepsTaken: number;
  score: number;
  done: boolean;
  validActions: string[];
  goldActions: string[] | null;
}

export function validateSimplification(value: string): void {
  if (typeof value !== 'string') throw new Error(`ScienceWorld simplification must be a string, got ${typeof value}`);
  if (value === 'easy' || value === '') return;
  for (const part of value.split(',')) {
    if (!(SIMPLIFICATIONS as readonly string[]).includes(part)) {
      throw new Error(
        `unknown ScienceWorld simplification '${part}' in '${value}'; use "easy", "" or a comma-separated list of: ${SIMPLIFICATIONS.join(', ')}`,
      );
    }
  }
}

export class ScienceWorldEnv implements Env {
  readonly name = 'scienceworld';
  /** Simulators replaced after they died or hung while this env owned them. */
  restarts = 0;
  private readonly catalog: ScienceWorldCatalog;
  private readonly taskList: string[];
  private readonly simplification: string;
  private readonly goldPath: boolean;
  private readonly stepLimits: Record<string, number>;
  private readonly defaultStepLimit: number;
  private readonly moveLimit: number;
  private readonly correction: ActionCorrectionOptions;
  private readonly python: string | undefined;
  private readonly startTimeoutMs: number;
  private readonly resetTimeoutMs: number;
  private readonly stepTimeoutMs: number;
  private readonly resetAttempts: number;
  private readonly deterministic: boolean;
  private readonly jvmOptions: string[];
  private simulator: Simulator | undefined;
  private starting: Promise<Simulator> | undefined;
  private episode: Episode | undefined;
  private inCall = false;
  private closed = false;

  constructor(options: ScienceWorldEnvOptions = {}) {
    this.catalog = loadCatalog();
    if (options.tasks !== undefined && (!Array.isArray(options.tasks) || options.tasks.length === 0)) {
      throw new Error('ScienceWorld tasks must be a non-empty list of task names');
    }
    for (const task of options.tasks ?? []) getTask(task, this.catalog);
    this.taskList = options.tasks ? [...new Set(options.tasks)] : taskNames(this.catalog);
    this.simplification = options.simplification ?? 'easy';
    validateSimplification(this.simplification);
    this.goldPath = options.goldPath ?? false;
    this.stepLimits = { ...(options.stepLimits ?? {}) };
    for (const [task, limit] of Object.entries(this.stepLimits)) {
      getTask(task, this.catalog);
      validateStepLimit(limit, `stepLimits['${task}']`);
    }
    this.defaultStepLimit = options.defaultStepLimit ?? REFERENCE_DEFAULT_STEP_LIMIT;
    validateStepLimit(this.defaultStepLimit, 'defaultStepLimit');
    this.moveLimit = options.moveLimit ?? REFERENCE_MOVE_LIMIT;
    validateStepLimit(this.moveLimit, 'moveLimit');
    this.correction = { ...DEFAULT_ACTION_CORRECTION, ...(options.actionCorrection ?? {}) };
    if (this.correction.history !== 'original' && this.correction.history !== 'corrected') {
      throw new Error(`actionCorrection.history must be 'original' or 'corrected', got '${String(this.correction.history)}'`);
    }
    this.python = options.python;
    this.startTimeoutMs = positiveMs(options.startTimeoutMs ?? 120_000, 'startTimeoutMs');
    this.resetTimeoutMs = positiveMs(options.resetTimeoutMs ?? 120_000, 'resetTimeoutMs');
    this.stepTimeoutMs = positiveMs(options.stepTimeoutMs ?? 30_000, 'stepTimeoutMs');
    this.deterministic = options.deterministic ?? false;
    this.jvmOptions = [...(options.jvmOptions ?? [])];
    for (const option of this.jvmOptions) {
      if (typeof option !== 'string' || !option.startsWith('-') || /\s/.test(option)) {
        throw new Error(`jvmOptions entries must be single JVM flags such as '-Xmx2g', got ${JSON.stringify(option)}`);
      }
    }
    this.resetAttempts = options.resetAttempts ?? 2;
    if (!Number.isInteger(this.resetAttempts) || this.resetAttempts < 1) {
      throw new Error(`resetAttempts must be a positive integer, got ${String(options.resetAttempts)}`);
    }
  }

  tasks(): string[] {
    return [...this.taskList];
  }

  variations(task: string, split: Split): number[] {
    return splitVariations(task, split, this.catalog);
  }

  maxSteps(task: string): number {
    getTask(task, this.catalog);
    return resolveStepLimit(task, this.stepLimits, this.defaultStepLimit);
  }

  /** Starts the simulator now instead of at the first reset (the JVM takes a few seconds). */
  async start(): Promise<void> {
    this.assertOpen();
    await this.ensureSimulator();
  }

  /** Process ids of the current simulator (bridge and JVM), for monitoring and fault tests. */
  get simulatorPids(): { bridge: number; java: number | undefined } | undefined {
    if (!this.simulator?.alive) return undefined;
    return { bridge: this.simulator.pid, java: this.simulator.javaPid };
  }

  async reset(task: string, variation: number, seed = 0): Promise<ResetResult> {
    this.assertOpen();
    const entry = getTask(task, this.catalog);
    if (!this.taskList.includes(task)) {
      throw new Error(`ScienceWorld task '${task}' is not among this env's tasks: ${this.taskList.join(', ')}`);
    }
    if (!Number.isInteger(variation) || variation < 0 || variation >= entry.maxVariations) {
      throw new Error(`ScienceWorld task '${task}' has variations 0..${entry.maxVariations - 1}, got ${String(variation)}`);
    }
    if (this.simplification.includes('noElectricalAction') && ELECTRICAL_TASKS.test(task)) {
      throw new Error(
        `ScienceWorld task '${task}' needs electrical actions; remove noElectricalAction from the simplification '${this.simplification}'`,
      );
    }
    return this.exclusive(async () => {
      this.episode = undefined;
      const maxSteps = this.maxSteps(task);
      let lastFailure: SimulatorError | undefined;
      for (let attempt = 1; attempt <= this.resetAttempts; attempt++) {
        try {
          const simulator = await this.ensureSimulator();
          const result = await simulator.call<BridgeReset>(
            'reset',
            { task, variation, simplification: this.simplification, goldPath: this.goldPath, moveLimit: this.moveLimit },
            this.resetTimeoutMs,
          );
          this.episode = {
            task,
            variation,
            seed,
            maxSteps,
            stepsTaken: 0,
            score: result.score,
            done: false,
            validActions: result.validActions,
            goldActions: result.goldActions,
          };
          return {
            observation: result.observation,
            task: result.task,
            validActions: [...result.validActions],
            info: {
              variation,
              seed,
              maxSteps,
              simplification: this.simplification,
              simplificationsUsed: result.simplificationsUsed,
              moves: result.moves,
              score: result.score,
              look: result.look,
              inventory: result.inventory,
            },
          };
        } catch (error) {
          if (error instanceof SimulatorRequestError) {
            throw new Error(`ScienceWorld refused to load task '${task}' variation ${variation}: ${error.message}`);
          }
          if (!(error instanceof SimulatorError)) throw error;
          lastFailure = error;
          this.discardSimulator();
        }
      }
      throw new Error(
        `ScienceWorld reset of '${task}' variation ${variation} failed on ${this.resetAttempts} fresh simulator(s): ${lastFailure?.message}`,
      );
    });
  }

  async step(action: string): Promise<StepResult> {
    this.assertOpen();
    const episode = this.episode;
    if (!episode) throw new Error('ScienceWorldEnv.step() called before reset()');
    if (episode.done) {
      throw new Error(
        `ScienceWorldEnv.step() called after the episode of '${episode.task}' variation ${episode.variation} ended; call reset()`,
      );
    }
    if (typeof action !== 'string') throw new Error(`ScienceWorldEnv.step() needs a string action, got ${typeof action}`);

    // A sampled byte-level token can leave half of a UTF-16 surrogate pair in the text; py4j
    // cannot encode that for the JVM. U+FFFD in its place makes it an ordinary unknown action.
    const text = toWellFormed(action);
    const correction = this.correction.enabled
      ? correctAction(text, episode.validActions)
      : { action: text, corrected: false, similarity: 1 };
    const historyAction = this.correction.history === 'corrected' ? correction.action : action;
    const actionInfo = { action: correction.action, originalAction: action, corrected: correction.corrected, historyAction };

    return this.exclusive(async () => {
      let result: BridgeStep;
      try {
        const simulator = this.simulator;
        if (!simulator?.alive) throw new SimulatorError('the simulator of this episode is no longer running', 'died');
        result = await simulator.call<BridgeStep>('step', { action: correction.action }, this.stepTimeoutMs);
      } catch (error) {
        if (error instanceof SimulatorRequestError) return this.refused(episode, actionInfo, error);
        if (!(error instanceof SimulatorError)) throw error;
        // The simulator died or hung: its state is gone or untrustworthy, so replace it.
        this.discardSimulator();
        episode.done = true;
        episode.stepsTaken++;
        episode.validActions = [];
        return {
          observation: `The ScienceWorld simulator failed and this episode was ended (${error.message.split('\n')[0]}).`,
          reward: 0,
          done: true,
          score: episode.score,
          validActions: [],
          info: {
            ...actionInfo,
            outcome: 'simulator_error' satisfies EpisodeOutcome,
            simulatorError: error.message,
            stepsTaken: episode.stepsTaken,
          },
        };
      }
      episode.stepsTaken++;
      episode.score = result.score;
      episode.validActions = result.validActions;
      const outcome = this.outcomeOf(result, episode);
      episode.done = outcome !== 'running';
      return {
        observation: result.observation,
        reward: result.reward,
        done: episode.done,
        score: result.score,
        validActions: [...result.validActions],
        info: {
          ...actionInfo,
          outcome,
          truncated: outcome === 'step_limit' || outcome === 'move_limit',
          stepsTaken: episode.stepsTaken,
          moves: result.moves,
          look: result.look,
          inventory: result.inventory,
        },
      };
    });
  }

  validActions(): string[] {
    return this.episode ? [...this.episode.validActions] : [];
  }

  score(): number {
    return this.episode?.score ?? 0;
  }

  done(): boolean {
    return this.episode?.done ?? false;
  }

  /** The simulator's gold action sequence for the current episode (needs goldPath: true). */
  goldActions(): string[] {
    if (!this.episode) throw new Error('ScienceWorldEnv.goldActions() called before reset()');
    if (!this.episode.goldActions) {
      throw new Error('gold action sequences are generated only when the ScienceWorld env is created with goldPath: true');
    }
    return [...this.episode.goldActions];
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.episode = undefined;
    const starting = this.starting;
    const simulator = this.simulator;
    this.simulator = undefined;
    if (starting) {
      const started = await starting.catch(() => undefined);
      await started?.close();
    }
    await simulator?.close();
  }

  /**
   * The simulator is alive but could not carry out this action (the bridge checked that the JVM
   * still answers): like an unknown action, the step counts, nothing changes and the episode
   * goes on with the same simulator.
   */
  private refused(episode: Episode, actionInfo: Record<string, unknown>, error: SimulatorRequestError): StepResult {
    episode.stepsTaken++;
    const outcome: EpisodeOutcome = episode.stepsTaken >= episode.maxSteps ? 'step_limit' : 'running';
    episode.done = outcome !== 'running';
    if (episode.done) episode.validActions = [];
    return {
      observation: `The simulator could not carry out that action (${error.message.split('\n')[0]}).`,
      reward: 0,
      done: episode.done,
      score: episode.score,
      validActions: [...episode.validActions],
      info: { ...actionInfo, outcome, truncated: episode.done, refused: error.message, stepsTaken: episode.stepsTaken },
    };
  }

  private outcomeOf(result: BridgeStep, episode: Episode): EpisodeOutcome {
    if (result.score < 0) return 'failure';
    if (result.simulatorCompleted) return 'success';
    if (result.done) return 'move_limit';
    if (episode.stepsTaken >= episode.maxSteps) return 'step_limit';
    return 'running';
  }

  private async ensureSimulator(): Promise<Simulator> {
    if (this.simulator?.alive) return this.simulator;
    if (this.simulator) this.discardSimulator();
    if (!this.starting) {
      this.starting = Simulator.start({
        python: this.python,
        startTimeoutMs: this.startTimeoutMs,
        deterministic: this.deterministic,
        jvmOptions: this.jvmOptions,
      }).finally(() => {
        this.starting = undefined;
      });
    }
    const simulator = await this.starting;
    if (this.closed) {
      await simulator.close();
      throw new Error('ScienceWorldEnv was closed while its simulator was starting');
    }
    if (simulator.scienceworldVersion !== this.catalog.scienceworldVersion) {
      await simulator.close();
      throw new Error(
        `the installed scienceworld ${simulator.scienceworldVersion} differs from the ${this.catalog.scienceworldVersion} the task catalog was made with; ` +
          `install the pinned version with scripts/setup-python.sh, or regenerate the catalog with 'npx tsx src/envs/scienceworld/generate-catalog.ts'`,
      );
    }
    this.simulator = simulator;
    return simulator;
  }

  private discardSimulator(): void {
    if (!this.simulator) return;
    this.simulator.kill();
    this.simulator = undefined;
    this.restarts++;
  }

  private async exclusive<T>(work: () => Promise<T>): Promise<T> {
    if (this.inCall) throw new Error('ScienceWorldEnv calls must not overlap: await the previous reset()/step() first');
    this.inCall = true;
    try {
      return await work();
    } finally {
      this.inCall = false;
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('ScienceWorldEnv is closed');
  }
}

function toWellFormed(text: string): string {
  return (text as string & { toWellFormed(): string }).toWellFormed();
}

function positiveMs(value: number, name: string): number {
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number of milliseconds, got ${String(value)}`);
  return value;
}
