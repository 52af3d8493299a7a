/**
 * The comparison as text: a Markdown report (summary table, per-task table, notes) and CSV files
 * with the same numbers at full precision, for spreadsheets and scripts.
 */
import { evalCurve, fmtSteps, type Comparison } from './aggregate.ts';
import { interpolateAt, normalizedArea, type Summary } from './stats.ts';

const score = (s: Summary | null) => (s ? s.mean.toFixed(1) + (s.std !== null ? ` ± ${s.std.toFixed(1)}` : '') : '–');
const percent = (s: Summary | null) =>
  s ? (s.mean * 100).toFixed(1) + '%' + (s.std !== null ? ` ± ${(s.std * 100).toFixed(1)}` : '') : '–';
const steps = (s: Summary | null) => (s ? fmtSteps(Math.round(s.mean)) : '–');
const seconds = (s: Summary | null) => (s ? `${s.mean.toFixed(1)} s` + (s.std !== null ? ` ± ${s.std.toFixed(1)}` : '') : '–');

export function formatMarkdown(cmp: Comparison, plotFile?: string): string {
  const out: string[] = [];
  out.push(`# Comparison: ${cmp.configs.map((c) => c.label).join(' vs ')}`, '');
  out.push(...summaryTable(cmp));
  if (cmp.configs.some((c) => c.perTask.length > 0)) {
    out.push('', '## Final held-out score per task', '', 'mean ± sample std over runs (success rate in brackets).', '');
    out.push(...taskTable(cmp, (c) => c.perTask));
  }
  if (cmp.finalEval) out.push(...finalEvalSection(cmp, cmp.finalEval));
  if (cmp.checkpointEval) out.push(...checkpointEvalSection(cmp, cmp.checkpointEval));
  if (cmp.paired.length > 0) out.push('', ...pairedTable(cmp));
  if (plotFile) out.push('', `Learning curves: ${plotFile} (line: mean over runs; band: min–max over runs).`);
  if (cmp.notes.length > 0) out.push('', '## Notes', '', ...cmp.notes.map((n) => `- ${n}`));
  return out.join('\n') + '\n';
}

/** What the cells mean, then one row per config: final score and success, score at equal steps, AUC, steps, wall time. */
function summaryTable(cmp: Comparison): string[] {
  const out: string[] = [];
  out.push(
    "Held-out mean score (0–100) and success rate from the evaluations in each run's metrics.jsonl. " +
      'Cells are mean ± sample standard deviation (n − 1) over the runs counted (one per seed); a value without ± comes from a single run.',
  );
  const range = cmp.commonRange;
  if (range) {
    out.push(
      `Score @ N steps: each run's learning curve (held-out score against training environment steps) linearly interpolated at N. ` +
        `AUC: area under that curve over ${fmtSteps(range.from)}–${fmtSteps(range.to)} steps (the range every run covers) divided by its width, i.e. the average held-out score over it.`,
    );
  }
  out.push(
    "Wall time / run: the trainer's clock, its iterations and evaluations summed over resumed attempts (work repeated after an interruption counts once), or, for runs logged before evaluations were timed, compare's record of the processes it started.",
    '',
  );
  const head = ['config', 'runs', 'final score', 'final success', ...cmp.equalSteps.map((s) => `score @ ${fmtSteps(s)} steps`)];
  if (range) head.push(`AUC ${fmtSteps(range.from)}–${fmtSteps(range.to)}`);
  head.push('final env steps', 'wall time / run');
  out.push(row(head), row(head.map(() => '---')));
  for (const c of cmp.configs) {
    const planned = c.included.length + c.excluded.length;
    const cells = [
      c.label,
      `${c.included.length}/${planned}`,
      score(c.finalScore),
      percent(c.finalSuccess),
      ...c.scoreAtSteps.map((s) => score(s.score)),
    ];
    if (range) cells.push(score(c.auc));
    cells.push(steps(c.finalEnvSteps), seconds(c.wallSeconds));
    out.push(row(cells));
  }
  return out;
}

/** `compare --final-eval`: each config's last checkpoints on the larger evaluation, per seed and per task. */
function finalEvalSection(cmp: Comparison, big: NonNullable<Comparison['finalEval']>): string[] {
  const out: string[] = [
    '',
    `## Final checkpoints on ${big.variations} ${big.split} variations per task`,
    '',
    `Each counted run's last checkpoint evaluated once more on the first ${big.variations} variations of every task (${big.episodesPerRun} episodes per run; ` +
      '`<run>/final-eval.json`, made by `compare --final-eval`), which is less noisy than the evaluations logged during training.',
    '',
  ];
  const seeds = [...new Set(cmp.configs.flatMap((c) => c.finalEval?.runs.map((r) => r.seed) ?? []))].sort((a, b) => a - b);
  const bigHead = ['config', 'runs', 'score', 'success', ...seeds.map((s) => `seed ${s}`)];
  out.push(row(bigHead), row(bigHead.map(() => '---')));
  for (const c of cmp.configs) {
    const e = c.finalEval;
    const bySeed = (seed: number) => e?.runs.find((r) => r.seed === seed)?.score.toFixed(1) ?? '–';
    out.push(
      row([
        c.label,
        `${e?.runs.length ?? 0}/${c.included.length}`,
        score(e?.score ?? null),
        percent(e?.success ?? null),
        ...seeds.map(bySeed),
      ]),
    );
  }
  out.push('', 'Per task:', '', ...taskTable(cmp, (c) => c.finalEval?.perTask ?? []));
  return out;
}

/** `compare --equal-steps-eval`: the score at each of the equal step counts from checkpoints, per seed and per task. */
function checkpointEvalSection(cmp: Comparison, atCheckpoints: NonNullable<Comparison['checkpointEval']>): string[] {
  const out: string[] = [
    '',
    `## Score at equal env steps from checkpoints on ${atCheckpoints.variations} ${atCheckpoints.split} variations per task`,
    '',
    `For each run, the checkpoint saved at N training env steps, or the last one before N and the first one after, evaluated on the first ${atCheckpoints.variations} variations of every task ` +
      '(`<run>/checkpoint-evals/`, made by `compare --equal-steps-eval`; the final evaluation counts for the last checkpoint), and the score interpolated linearly in env steps between the two. ' +
      'Unlike the score @ N steps above, which interpolates the small evaluations logged during training, this compares configs at equal steps with the larger evaluation.',
  ];
  for (const [i, steps] of cmp.equalSteps.entries()) {
    const seeds = [...new Set(cmp.configs.flatMap((c) => c.checkpointScoreAtSteps[i]?.runs.map((r) => r.seed) ?? []))].sort(
      (a, b) => a - b,
    );
    const head = ['config', 'runs', `score @ ${fmtSteps(steps)} steps`, ...seeds.map((s) => `seed ${s}`)];
    out.push('', row(head), row(head.map(() => '---')));
    for (const c of cmp.configs) {
      const at = c.checkpointScoreAtSteps[i];
      const bySeed = (seed: number) => at?.runs.find((r) => r.seed === seed)?.score.toFixed(1) ?? '–';
      out.push(row([c.label, `${at?.runs.length ?? 0}/${c.included.length}`, score(at?.score ?? null), ...seeds.map(bySeed)]));
    }
    const tasks = [...new Set(cmp.configs.flatMap((c) => c.checkpointScoreAtSteps[i]?.perTask.map((t) => t.task) ?? []))];
    if (tasks.length === 0) continue;
    const taskHead = ['task', ...cmp.configs.map((c) => c.label)];
    out.push(
      '',
      `Per task, score @ ${fmtSteps(steps)} steps (mean ± sample std over runs; runs counted in brackets):`,
      '',
      row(taskHead),
      row(taskHead.map(() => '---')),
    );
    for (const task of tasks) {
      const cell = (c: Comparison['configs'][number]) => {
        const t = c.checkpointScoreAtSteps[i]?.perTask.find((p) => p.task === task);
        return t && t.runs.length > 0 ? `${score(t.score)} (${t.runs.length})` : '–';
      };
      out.push(row([task, ...cmp.configs.map(cell)]));
    }
  }
  return out;
}

/** Each other config minus the first, seed by seed: mean difference, its 95% t-interval and the per-seed signs. */
function pairedTable(cmp: Comparison): string[] {
  const signed = (x: number) => (x > 0 ? '+' : x < 0 ? '−' : '') + Math.abs(x).toFixed(1);
  const head = ['config − reference', 'metric', 'seeds', 'mean difference', '95% interval', 'ahead / behind / level', 'per seed'];
  const lines = [
    `## Paired differences against ${cmp.configs[0].label} (same seeds)`,
    '',
    "Per seed, the config's value minus the reference's on that seed; runs of one seed share the task sequence and the initial model, " +
      'so the pairing takes out part of the seed-to-seed spread. Interval: mean ± t(0.975, n − 1) · std / √n over the differences; ' +
      'one that contains 0 means these seeds do not tell the two apart.',
    '',
    row(head),
    row(head.map(() => '---')),
  ];
  for (const p of cmp.paired) {
    const d = p.difference;
    const perSeed = d.seeds.map((s, i) => `${s}: ${signed(d.diffs[i])}`).join(', ');
    const interval = d.ci95 ? `[${signed(d.ci95[0])}, ${signed(d.ci95[1])}]` : '–';
    lines.push(
      row([
        `${p.label} − ${p.reference}`,
        p.metric,
        String(d.seeds.length),
        signed(d.mean),
        interval,
        `${d.wins} / ${d.losses} / ${d.ties}`,
        perSeed,
      ]),
    );
  }
  return lines;
}

/** Task × config table of "score ± std (success ± std)". */
function taskTable(cmp: Comparison, perTask: (c: Comparison['configs'][number]) => Comparison['configs'][number]['perTask']): string[] {
  const tasks = [...new Set(cmp.configs.flatMap((c) => perTask(c).map((t) => t.task)))];
  const head = ['task', ...cmp.configs.map((c) => c.label)];
  const lines = [row(head), row(head.map(() => '---'))];
  for (const task of tasks) {
    const cell = (c: Comparison['configs'][number]) => {
      const t = perTask(c).find((p) => p.task === task);
      return t ? `${score(t.score)} (${percent(t.success)})` : '–';
    };
    lines.push(row([task, ...cmp.configs.map(cell)]));
  }
  return lines;
}

function row(cells: string[]): string {
  return `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
}

/** One row per config: the Markdown table's numbers at full precision, per-task columns last. */
export function formatResultsCsv(cmp: Comparison): string {
  const tasks = [...new Set(cmp.configs.flatMap((c) => c.perTask.map((t) => t.task)))];
  const head = ['config', 'runs_counted', 'runs_planned', ...stat('final_score'), ...stat('final_success_rate')];
  for (const s of cmp.equalSteps) head.push(...stat(`score_at_${s}_steps`));
  head.push('auc_from_steps', 'auc_to_steps', ...stat('auc'), ...stat('final_env_steps'), ...stat('wall_seconds'));
  for (const t of tasks) head.push(...stat(`task_${t}_score`), ...stat(`task_${t}_success_rate`));
  head.push('final_eval_variations', 'final_eval_runs', ...stat('final_eval_score'), ...stat('final_eval_success_rate'));
  head.push('checkpoint_eval_variations', ...cmp.equalSteps.flatMap((st) => stat(`checkpoint_score_at_${st}_steps`)));
  const checkpointTasks = checkpointTaskColumns(cmp);
  for (const { steps, task } of checkpointTasks) head.push(...stat(`checkpoint_task_${task}_score_at_${steps}_steps`));
  const rows = cmp.configs.map((c) => {
    const cells: (string | number | null)[] = [
      c.label,
      c.included.length,
      c.included.length + c.excluded.length,
      ...values(c.finalScore),
      ...values(c.finalSuccess),
    ];
    for (const s of c.scoreAtSteps) cells.push(...values(s.score));
    cells.push(
      cmp.commonRange?.from ?? null,
      cmp.commonRange?.to ?? null,
      ...values(c.auc),
      ...values(c.finalEnvSteps),
      ...values(c.wallSeconds),
    );
    for (const t of tasks) {
      const p = c.perTask.find((x) => x.task === t);
      cells.push(...values(p?.score ?? null), ...values(p?.success ?? null));
    }
    const e = c.finalEval;
    cells.push(cmp.finalEval?.variations ?? null, e ? e.runs.length : null, ...values(e?.score ?? null), ...values(e?.success ?? null));
    cells.push(
      cmp.checkpointEval?.variations ?? null,
      ...cmp.equalSteps.flatMap((_, i) => values(c.checkpointScoreAtSteps[i]?.score ?? null)),
    );
    for (const { index, task } of checkpointTasks)
      cells.push(...values(c.checkpointScoreAtSteps[index]?.perTask.find((t) => t.task === task)?.score ?? null));
    return cells;
  });
  return toCsv([head, ...rows]);
}

/** (equal-steps point, task) pairs with a per-task checkpoint score in some config, for the CSV columns. */
function checkpointTaskColumns(cmp: Comparison): { index: number; steps: number; task: string }[] {
  return cmp.equalSteps.flatMap((steps, index) =>
    [...new Set(cmp.configs.flatMap((c) => c.checkpointScoreAtSteps[index]?.perTask.map((t) => t.task) ?? []))].map((task) => ({
      index,
      steps,
      task,
    })),
  );
}

/** One row per planned run, counted or not, with the per-run numbers behind the summary. */
export function formatRunsCsv(cmp: Comparison): string {
  const head = [
    'config',
    'seed',
    'status',
    'counted',
    'dir',
    'iterations',
    'final_env_steps',
    'final_score',
    'final_success_rate',
    ...cmp.equalSteps.map((s) => `score_at_${s}_steps`),
    'auc',
    'wall_seconds',
    'wall_source',
    'note',
    'final_eval_variations',
    'final_eval_episodes',
    'final_eval_score',
    'final_eval_success_rate',
    ...cmp.equalSteps.map((st) => `checkpoint_score_at_${st}_steps`),
  ];
  const checkpointTasks = checkpointTaskColumns(cmp);
  for (const { steps, task } of checkpointTasks) head.push(`checkpoint_task_${task}_score_at_${steps}_steps`);
  const rows: (string | number | null)[][] = [];
  for (const c of cmp.configs) {
    for (const r of [...c.included, ...c.excluded]) {
      const evals = r.metrics?.evals ?? [];
      const last = evals.at(-1);
      const curve = evalCurve(evals);
      rows.push([
        c.label,
        r.seed,
        r.status,
        c.included.includes(r) ? 'yes' : 'no',
        r.dir,
        last?.iteration ?? null,
        last?.train_env_steps ?? null,
        last?.mean_score ?? null,
        last?.success_rate ?? null,
        ...cmp.equalSteps.map((s) => interpolateAt(curve, s)),
        cmp.commonRange ? normalizedArea(curve, cmp.commonRange.from, cmp.commonRange.to) : null,
        r.wallSeconds,
        r.wallSource,
        r.note ?? null,
        r.finalEval?.eval_variations ?? null,
        r.finalEval?.episodes ?? null,
        r.finalEval?.mean_score ?? null,
        r.finalEval?.success_rate ?? null,
        ...cmp.equalSteps.map((_, i) =>
          c.included.includes(r) ? (c.checkpointScoreAtSteps[i]?.runs.find((x) => x.seed === r.seed)?.score ?? null) : null,
        ),
        ...checkpointTasks.map(({ index, task }) =>
          c.included.includes(r)
            ? (c.checkpointScoreAtSteps[index]?.perTask.find((t) => t.task === task)?.runs.find((x) => x.seed === r.seed)?.score ?? null)
            : null,
        ),
      ]);
    }
  }
  return toCsv([head, ...rows]);
}

/** The plotted curves: per config and env-step count, the statistics over runs. */
export function formatCurvesCsv(cmp: Comparison): string {
  const rows: (string | number | null)[][] = [['config', 'train_env_steps', 'runs', 'mean_score', 'std_score', 'min_score', 'max_score']];
  for (const c of cmp.configs) for (const p of c.curve) rows.push([c.label, p.x, p.n, p.mean, p.std, p.min, p.max]);
  return toCsv(rows);
}

const stat = (name: string) => [`${name}_mean`, `${name}_std`, `${name}_min`, `${name}_max`];
const values = (s: Summary | null) => (s ? [s.mean, s.std, s.min, s.max] : [null, null, null, null]);

/** RFC 4180: quote a field only when it holds a comma, quote or line break; empty for null. */
export function toCsv(rows: (string | number | null)[][]): string {
  const field = (v: string | number | null) => {
    const s = v === null ? '' : String(v);
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return rows.map((r) => r.map(field).join(',')).join('\n') + '\n';
}
