/**
 * A run whose every episode fails iteration after iteration learns nothing and only spends its time
 * (an agent command with a typo exits 127 in every episode; an environment server that is down): after
 * MAX_FAILED_ITERATIONS_IN_A_ROW such iterations in a row the run stops with one error naming them and
 * the last failure's reason, instead of running to its end.
 */
import { isFailed, type Episode } from './records.ts';

/** Iterations in a row in which every episode failed that stop the run. */
export const MAX_FAILED_ITERATIONS_IN_A_ROW = 3;

/** `1, 2 and 3`. */
const inWords = (ns: readonly number[]) => (ns.length < 2 ? ns.join('') : `${ns.slice(0, -1).join(', ')} and ${ns.at(-1)}`);

/** The run stopped: every episode failed in `iterations`, MAX_FAILED_ITERATIONS_IN_A_ROW in a row. */
export class AllEpisodesFailedError extends Error {
  override readonly name = 'AllEpisodesFailedError';
  constructor(
    /** The iterations, in a row, in which every episode failed. */
    readonly iterations: readonly number[],
    /** The reason the last failed episode gave. */
    readonly lastFailure: string,
  ) {
    super(
      `every episode failed in iterations ${inWords(iterations)} in a row, so the run stopped: ` +
        `nothing is learned from failed episodes. The last failure: ${lastFailure}. ` +
        `Fix what fails and start again (--resume, or resume: true, goes on from the run's latest checkpoint where it has one)`,
    );
  }
}

/** Counts the iterations in which every episode failed, in a row. */
export class FailureStreak {
  private readonly failed: number[] = [];

  /** Counts iteration `it`; throws AllEpisodesFailedError when it makes MAX_FAILED_ITERATIONS_IN_A_ROW in a row. */
  count(it: number, episodes: readonly Episode[]): void {
    if (episodes.length === 0 || !episodes.every(isFailed)) {
      this.failed.length = 0;
      return;
    }
    this.failed.push(it);
    if (this.failed.length >= MAX_FAILED_ITERATIONS_IN_A_ROW)
      throw new AllEpisodesFailedError([...this.failed], episodes.at(-1)?.failure ?? 'no reason given');
  }
}
