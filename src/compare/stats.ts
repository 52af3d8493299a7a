/**
 * Small numeric helpers for comparing runs: summary statistics over seeds and piecewise-linear
 * learning curves (interpolation and normalised area). Curves are interpolated, never
 * extrapolated: a value outside the range a run actually covered is unknown, not a guess.
 */
import tQuantile from '@stdlib/stats-base-dists-t-quantile';

export interface Summary {
  n: number;
  mean: number;
  /** Sample standard deviation (n − 1 in the denominator); null with fewer than two values. */
  std: number | null;
  min: number;
  max: number;
}

export function summarize(values: number[]): Summary | null {
  if (values.length === 0) return null;
  for (const v of values) if (!Number.isFinite(v)) throw new Error(`summarize: values must be finite numbers, got ${v}`);
  const n = values.length;
  const mean = values.reduce((a, b) => a + b, 0) / n;
  const std = n < 2 ? null : Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1));
  return { n, mean, std, min: Math.min(...values), max: Math.max(...values) };
}

export interface CurvePoint {
  x: number;
  y: number;
}

/**
 * y at x on the polyline through `curve` (x non-decreasing). Where several points share an x
 * (an evaluation repeated without new environment steps) the last one wins, as the latest
 * measurement at that step count. Returns null outside [first x, last x].
 */
export function interpolateAt(curve: CurvePoint[], x: number): number | null {
  if (curve.length === 0 || x < curve[0].x || x > curve[curve.length - 1].x) return null;
  let hi = curve.findIndex((p) => p.x >= x);
  if (curve[hi].x === x) {
    while (hi + 1 < curve.length && curve[hi + 1].x === x) hi++;
    return curve[hi].y;
  }
  const a = curve[hi - 1];
  const b = curve[hi];
  return a.y + ((b.y - a.y) * (x - a.x)) / (b.x - a.x);
}

/**
 * Area under the polyline between `from` and `to`, divided by (to − from): the curve's average
 * height over that range, in the units of y. With from === to it is the value at that point.
 * Null when the curve does not cover the whole range.
 */
export function normalizedArea(curve: CurvePoint[], from: number, to: number): number | null {
  if (to < from) throw new Error(`normalizedArea: range ends (${to}) before it starts (${from})`);
  const start = interpolateAt(curve, from);
  const end = interpolateAt(curve, to);
  if (start === null || end === null) return null;
  if (to === from) return end;
  // The polyline restricted to [from, to]: interpolated ends plus the points strictly inside.
  const inside = curve.filter((p) => p.x > from && p.x < to);
  const pts: CurvePoint[] = [{ x: from, y: start }, ...inside, { x: to, y: end }];
  let area = 0;
  for (let i = 1; i < pts.length; i++) area += ((pts[i].x - pts[i - 1].x) * (pts[i].y + pts[i - 1].y)) / 2;
  return area / (to - from);
}

export interface PairedDifference {
  /** Seeds both configs have a value for, ascending. */
  seeds: number[];
  /** other − reference, per seed in `seeds` order. */
  diffs: number[];
  mean: number;
  /** Sample standard deviation of the differences; null with one seed. */
  std: number | null;
  /** Two-sided 95% Student-t interval for the mean difference; null with one seed. */
  ci95: [number, number] | null;
  /** Seeds where the other config is ahead / behind / level. */
  wins: number;
  losses: number;
  ties: number;
}

/**
 * The same-seed difference of one metric between two configs. Runs with the same seed share their
 * task sequence and initial model, so pairing them removes part of the seed-to-seed spread that an
 * unpaired comparison of two means carries. Null when no seed has both values.
 */
export function pairedDifference(reference: ReadonlyMap<number, number>, other: ReadonlyMap<number, number>): PairedDifference | null {
  const seeds = [...other.keys()].filter((s) => reference.has(s)).sort((a, b) => a - b);
  if (seeds.length === 0) return null;
  const diffs = seeds.map((s) => other.get(s)! - reference.get(s)!);
  const { n, mean, std } = summarize(diffs)!;
  const halfWidth = std === null ? null : (tQuantile(0.975, n - 1) * std) / Math.sqrt(n);
  const ci95: [number, number] | null = halfWidth === null ? null : [mean - halfWidth, mean + halfWidth];
  return {
    seeds,
    diffs,
    mean,
    std,
    ci95,
    wins: diffs.filter((d) => d > 0).length,
    losses: diffs.filter((d) => d < 0).length,
    ties: diffs.filter((d) => d === 0).length,
  };
}

/** `+1.2 [-0.3, +2.7], 5 ahead / 2 behind`, one decimal, for the benches' paired reports. */
export function formatPairedDifference(d: PairedDifference | null): string {
  if (!d) return '–';
  const f1 = (x: number) => (x > 0 ? '+' : '') + x.toFixed(1);
  return `${f1(d.mean)} [${d.ci95 ? `${f1(d.ci95[0])}, ${f1(d.ci95[1])}` : '–'}], ${d.wins} ahead / ${d.losses} behind`;
}
