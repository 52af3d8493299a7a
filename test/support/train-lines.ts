/**
 * A run's `train` lines from metrics.jsonl, less what differs between two runs of the same
 * computation: timings, and prefill counts (a server prefills out of the client's sight: null there).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export function comparableTrainLines(runDir: string): Record<string, unknown>[] {
  return readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.type === 'train')
    .map((l) => Object.fromEntries(Object.entries(l).filter(([k]) => !/seconds|per_s|share|prefill_tokens/.test(k))));
}
