/**
 * What SmolLM2-135M wrote into the EMPO² runs' tip memories: each final checkpoint's memory.json,
 * entries per family sorted into rough kinds by text patterns, and the highest-scoring ones quoted.
 * Each entry is the model's reflection followed by the part the framework appends ("The action you
 * took was …; you finally scored …/100."). Prints Markdown.
 *
 *   npx tsx results/real-model/tips.ts runs/real-model/empo2 > results/real-model/tips.md
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = process.argv[2] ?? 'runs/real-model/empo2';
const quotes = Number(process.argv[3] ?? 3);
const APPENDED = / The action you took was (.*?); you finally scored (\d+)\/100\.$/;

/** Rough kinds, by text pattern: the first that matches. */
const KINDS: [string, RegExp][] = [
  ['echoes the reflection prompt', /^Reflect on this attempt/],
  ['copies the trajectory it was shown', /Your trajectory \(last|Step \d+: you saw/],
  ['assistant chatter', /I'm here to|I'm ready to assist|I'm sorry|assist you|creative writing|What's your next question/i],
  ['mentions the task', /Task:|The task|task is/i],
];
const kindOf = (reflection: string) => KINDS.find(([, re]) => re.test(reflection))?.[0] ?? 'other';

const lines = [
  '# The tips SmolLM2-135M wrote (EMPO² runs)',
  '',
  `From each run's final \`memory.json\` under \`${root}\` (made by \`results/real-model/tips.ts\`). Kinds are sorted by text pattern (the first that matches, in the order of the table), a rough guide, not a grading. "scored > 0": entries whose episode scored above 0, the ones retrieval prefers.`,
];
for (const seed of readdirSync(root)
  .filter((n) => /^seed\d+$/.test(n))
  .sort()) {
  const ckDir = join(root, seed, 'checkpoints');
  if (!existsSync(ckDir)) continue;
  const last = readdirSync(ckDir)
    .filter((n) => n.startsWith('iter-'))
    .sort()
    .at(-1);
  if (!last) continue;
  const memory = JSON.parse(readFileSync(join(ckDir, last, 'memory.json'), 'utf8')) as {
    tips: { slots: Record<string, { texts: string[]; scores: number[] }> };
  };
  lines.push(
    '',
    `## ${seed} (${last})`,
    '',
    '| family | entries | scored > 0 | ' + [...KINDS.map(([k]) => k), 'other'].join(' | ') + ' |',
    '|---' + '|---'.repeat(KINDS.length + 3) + '|',
  );
  const best: string[] = [];
  for (const [slot, { texts, scores }] of Object.entries(memory.tips.slots)) {
    const counts = new Map<string, number>();
    for (const t of texts) {
      const k = kindOf(t.replace(APPENDED, ''));
      counts.set(k, (counts.get(k) ?? 0) + 1);
    }
    const pct = (n: number) => `${Math.round((100 * n) / Math.max(1, texts.length))}%`;
    lines.push(
      `| ${slot} | ${texts.length} | ${pct(scores.filter((s) => s > 0).length)} | ` +
        [...KINDS.map(([k]) => k), 'other'].map((k) => pct(counts.get(k) ?? 0)).join(' | ') +
        ' |',
    );
    const seen = new Set<string>();
    const ranked = texts
      .map((t, i) => ({ t, s: scores[i] }))
      .sort((a, b) => b.s - a.s)
      .filter(({ t }) => !seen.has(t.replace(APPENDED, '')) && seen.add(t.replace(APPENDED, '')));
    for (const { t, s } of ranked.slice(0, quotes)) best.push(`- ${slot}, scored ${s}: "${t.length > 400 ? t.slice(0, 400) + '…' : t}"`);
  }
  lines.push('', `The ${quotes} highest-scoring distinct reflections per family:`, '', ...best);
}
console.log(lines.join('\n'));
