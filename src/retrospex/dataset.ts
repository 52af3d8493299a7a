/**
 * Retrospex's logged experience: the episodes empo2 already records (src/trajectory/format.ts), turned
 * into the transitions (s, a, r, s', done) the critic learns from. Any policy's episodes serve: a
 * training run's `trajectories/train.jsonl` and `eval*.jsonl`, an `adapt` output's `trajectories.jsonl`,
 * an `eval --trajectories` file. The critic never needs to know who acted: IQL learns only from the
 * actions the data took.
 *
 * A state is what the authors' (task, observation) critic reads (Retrospex, webshop/ and alfworld/):
 * the task description and the observation the action was chosen from. A step's reward is the
 * environment's (the score gained, as the authors' score differences); the last step of an episode is
 * terminal, since the recorded episode ended there (done, or the step limit, which empo2's environments
 * also report as done). An episode whose outcome is `failed` (the environment or the engine broke it off,
 * e.g. a prompt past the model's context) is left out, as training and scoring leave it out: its last
 * step is neither terminal nor followed by one the policy took.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { isFailed } from '../run/records.ts';
import { TrajectoryFile } from '../trajectory/reader.ts';
import type { EpisodeRecord } from '../trajectory/format.ts';

export interface Transition {
  task: string;
  observation: string;
  action: string;
  reward: number;
  nextObservation: string;
  done: boolean;
}

export interface LoggedData {
  transitions: Transition[];
  /** The trajectory files read, with how many episodes each gave. */
  files: { path: string; episodes: number }[];
  episodes: number;
  /** Episodes left out because their outcome is `failed` (not the agent's doing). */
  failedEpisodes: number;
  /** Task names (the environment's, e.g. "power") of the episodes kept. */
  tasks: string[];
  /** Lines that could not be read, each naming file:line and what is wrong. */
  problems: string[];
}

/** How deep under a given folder trajectory files are looked for (a compare output holds <label>/seed<k>/trajectories/). */
const SEARCH_DEPTH = 5;

/**
 * The trajectory files of `source`: a .jsonl file itself, or every `trajectories/*.jsonl` and
 * `trajectories.jsonl` in the folder or up to SEARCH_DEPTH folders below it, in a stable order.
 */
export function trajectoryFiles(source: string): string[] {
  if (!existsSync(source)) throw new Error(`${source} does not exist`);
  if (statSync(source).isFile()) {
    if (!source.endsWith('.jsonl')) throw new Error(`${source} is a file but not trajectory records (.jsonl)`);
    return [source];
  }
  const found: string[] = [];
  const walk = (dir: string, depth: number) => {
    for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, e.name);
      if (e.isFile() && e.name === 'trajectories.jsonl') found.push(path);
      else if (e.isDirectory() && e.name === 'trajectories')
        for (const f of readdirSync(path).sort()) if (f.endsWith('.jsonl')) found.push(join(path, f));
      if (e.isDirectory() && e.name !== 'trajectories' && e.name !== 'checkpoints' && depth < SEARCH_DEPTH) walk(path, depth + 1);
    }
  };
  walk(source, 0);
  if (found.length === 0)
    throw new Error(
      `${source} holds no trajectory records (looked for trajectories/*.jsonl, as a run writes, and trajectories.jsonl, as adapt writes, up to ${SEARCH_DEPTH} folders down); record episodes with train (trajectories.train_per_iteration), eval --trajectories or adapt`,
    );
  return found;
}

/** The transitions of one recorded episode, in order. */
export function episodeTransitions(e: Pick<EpisodeRecord, 'description' | 'steps' | 'final_observation'>): Transition[] {
  return e.steps.map((s, j) => ({
    task: e.description,
    observation: s.observation,
    action: s.action,
    reward: s.reward,
    nextObservation: j + 1 < e.steps.length ? e.steps[j + 1].observation : e.final_observation,
    done: j === e.steps.length - 1,
  }));
}

/** Reads every episode of `sources` (only those of `tasks`, when given), refusing data that would train nothing. */
export function readLoggedData(sources: readonly string[], tasks?: readonly string[]): LoggedData {
  if (sources.length === 0) throw new Error('no logged episodes given: name run folders, adapt outputs or trajectory .jsonl files');
  const files = [...new Set(sources.flatMap(trajectoryFiles))];
  const data: LoggedData = { transitions: [], files: [], episodes: 0, failedEpisodes: 0, tasks: [], problems: [] };
  const seenTasks = new Set<string>();
  for (const path of files) {
    const file = new TrajectoryFile(path);
    file.refresh();
    data.problems.push(...file.problems);
    let kept = 0;
    for (const summary of file.episodes) {
      if (tasks && !tasks.includes(summary.task)) continue;
      if (summary.steps === 0) continue;
      const episode = file.episode(summary.line);
      if (isFailed(episode)) {
        data.failedEpisodes++;
        continue;
      }
      data.transitions.push(...episodeTransitions(episode));
      seenTasks.add(summary.task);
      kept++;
    }
    data.files.push({ path, episodes: kept });
    data.episodes += kept;
  }
  data.tasks = [...seenTasks].sort();
  if (data.transitions.length === 0) {
    const what = tasks ? ` of task ${tasks.join(', ')}` : '';
    const read = files.map((f) => basename(f)).join(', ');
    throw new Error(
      `no episodes${what} with steps in ${sources.join(', ')} (read ${read}${data.failedEpisodes ? `; ${data.failedEpisodes} left out as failed` : ''}${data.problems.length ? `; ${data.problems[0]}` : ''})`,
    );
  }
  return data;
}
