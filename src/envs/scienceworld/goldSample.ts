/**
 * The (task, test variation) pairs whose gold replays run in CI (simulator.test.ts). Kept apart
 * so that scripts/scienceworld-gold-table.ts can check other variations than the tests do.
 */
import { splitVariations } from './catalog.ts';

/** One task per topic and then some, each at a different position in its test split. */
export const GOLD_SAMPLE: Array<[string, number]> = (
  [
    ['melt', 0],
    ['use-thermometer', 7],
    ['measure-melting-point-known-substance', 3],
    ['power-component', 4],
    ['test-conductivity', 11],
    ['find-non-living-thing', 40],
    ['identify-life-stages-2', 2],
    ['lifespan-longest-lived-then-shortest-lived', 20],
    ['chemistry-mix', 5],
    ['chemistry-mix-paint-tertiary-color', 8],
    ['inclined-plane-determine-angle', 30],
  ] as Array<[string, number]>
).map(([task, position]) => {
  const test = splitVariations(task, 'test');
  return [task, test[position % test.length]];
});
