/**
 * Options that moved under `experimental:` (the tiny-model switches, docs/EXPERIMENTAL.md). Config files, the
 * config.yaml of runs saved before the move, and `--set` lines in study notes still give them at
 * their old paths; each is read at its new path with its value unchanged, so every such config
 * resolves to the options it meant. Pure functions: load.ts reports what they find.
 */

export interface MovedKey {
  from: string;
  to: string;
  /** Only this value of `from` moved, and reads as `now` at `to` (other values stay where they are). */
  value?: { old: unknown; now: unknown };
}

/** Keys that kept their name and moved from `section` to experimental. */
const sameName = (section: string, keys: string[]): MovedKey[] => keys.map((k) => ({ from: `${section}.${k}`, to: `experimental.${k}` }));

export const MOVED_KEYS: readonly MovedKey[] = [
  ...sameName('model', ['tip_warmup_examples', 'tip_warmup_epochs', 'tip_warmup_lr', 'tip_rehearsal', 'tip_rehearsal_lr']),
  ...sameName('algo', ['p_end']),
  // algo.mode_draw keeps iteration and task; its third value became a switch that overrides both.
  { from: 'algo.mode_draw', to: 'experimental.mode_draw_per_rollout', value: { old: 'rollout', now: true } },
  ...sameName('algo', ['off_policy_ratio', 'off_policy_weight_cap']),
  ...sameName('memory', [
    'tip_order',
    'step_tip_reflection',
    'step_credit',
    'skip_taken_actions',
    'valid_actions_only',
    'match_progress',
    'min_tip_score',
  ]),
  { from: 'memory.source', to: 'experimental.tip_source' },
];

const isMapping = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** "algo.p_end is now experimental.p_end", or with the values where only one value moved. */
function describeMove(m: MovedKey): string {
  return m.value ? `${m.from}: ${String(m.value.old)} is now ${m.to}: ${String(m.value.now)}` : `${m.from} is now ${m.to}`;
}

/** The old path's key, where `raw` gives it (with the value that moved, for a value-only move). */
function oldKeyIn(raw: Record<string, unknown>, m: MovedKey): { section: Record<string, unknown>; key: string } | null {
  const [sectionName, key] = m.from.split('.');
  const section = raw[sectionName];
  if (!isMapping(section) || !(key in section)) return null;
  if (m.value && section[key] !== m.value.old) return null;
  return { section, key };
}

export interface KeyMove {
  /** The config with each moved key at its new path (a copy; the input is left as it was). */
  raw: Record<string, unknown>;
  /** One line per key read at its new path, e.g. "algo.p_end is now experimental.p_end". */
  moved: string[];
  /** One line per key given at both its old and its new path; such a config means two things at once. */
  clashes: string[];
  /** Whether `algo.mode_draw: rollout` became experimental.mode_draw_per_rollout here (see lastModeDrawWins). */
  rolloutDrawMoved: boolean;
}

/** Moves every old path that `raw` (one file's options, or one `--set` line's) gives to its new path. */
export function moveOldKeys(input: Record<string, unknown>): KeyMove {
  const raw = structuredClone(input);
  const moved: string[] = [];
  const clashes: string[] = [];
  let rolloutDrawMoved = false;
  for (const m of MOVED_KEYS) {
    const old = oldKeyIn(raw, m);
    if (!old) continue;
    const [newSection, newKey] = m.to.split('.');
    const target = raw[newSection];
    if (isMapping(target) && newKey in target) {
      const what = m.value ? `${m.from}: ${String(m.value.old)}` : m.from;
      clashes.push(`${what} and ${m.to} are both given (${describeMove(m)}); keep only ${m.to}`);
      continue;
    }
    if (target !== undefined && target !== null && !isMapping(target)) continue; // the schema says what is wrong with the section
    const value = m.value ? m.value.now : old.section[old.key];
    delete old.section[old.key];
    raw[newSection] = { ...(isMapping(target) ? target : {}), [newKey]: value };
    moved.push(describeMove(m));
    if (m.to === PER_ROLLOUT) rolloutDrawMoved = true;
  }
  return { raw, moved, clashes, rolloutDrawMoved };
}

export const PER_ROLLOUT = 'experimental.mode_draw_per_rollout';

/**
 * Before the move algo.mode_draw was one key, and the last file of an `extends:` chain (or `--set`
 * line) to set it won: a file over a base that said `rollout` went back to iteration or task by
 * setting algo.mode_draw. Read as experimental.mode_draw_per_rollout, the base's `rollout` would now
 * override that. So over a switch that was read from an old key, a layer (already moved by
 * moveOldKeys) that sets algo.mode_draw but not the switch turns the switch off, in `layer`.
 * Returns whether the switch, from this layer on, was read from an old key.
 */
export function lastModeDrawWins(layer: Record<string, unknown>, switchFromOldKey: boolean, rolloutDrawMoved: boolean): boolean {
  if (rolloutDrawMoved) return true;
  const experimental = layer.experimental;
  if (experimental !== undefined && experimental !== null && !isMapping(experimental)) return false; // the schema says what is wrong
  if (isMapping(experimental) && 'mode_draw_per_rollout' in experimental) return false;
  if (switchFromOldKey && isMapping(layer.algo) && 'mode_draw' in layer.algo) {
    layer.experimental = { ...(experimental ?? {}), mode_draw_per_rollout: false };
    return false;
  }
  return switchFromOldKey;
}

/**
 * A `--set` line's dotted path at its new place: [new path, value], or null where the path did not
 * move (or, for a value-only move, this value did not).
 */
export function movedOverride(path: string, value: unknown): { path: string; value: unknown; moved: string } | null {
  const m = MOVED_KEYS.find((k) => k.from === path && (!k.value || k.value.old === value));
  return m ? { path: m.to, value: m.value ? m.value.now : value, moved: describeMove(m) } : null;
}
