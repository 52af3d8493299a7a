/**
 * Measures how far the TypeScript WebShop is from the original on the real catalogue and goals:
 *  1. reward: the same purchases scored here and by WebShop's ORIGINAL get_reward (original.py
 *     imports goal.py of each revision unchanged; fetch-original.sh puts it on the machine), for
 *     each reward revision, with the nouns from this port's tagger (checks everything but the
 *     tagger); and, with --spacy-model, by the original master with spaCy's nouns (measures what
 *     the tagger changes);
 *  2. fuzzy matching: every token_set_ratio the reward computed, here vs thefuzz;
 *  3. search: top-50 rankings here vs Lucene 8 (LuceneReference.java) for every goal instruction.
 * usage: npx tsx src/envs/webshop/parity/run.ts --python PY --original DIR [--spacy-model M]
 *        [--lucene-cp CP --lucene-classes DIR] [--write-fixture]
 *   PY: a Python with scripts/requirements-webshop-reference.txt (+ spaCy and a model for --spacy-model)
 *   DIR: the folder fetch-original.sh wrote
 * Prints a JSON summary and writes it to parity/results.json; --write-fixture also writes the
 * recorded purchases the unit tests replay (reward-fixture.json, lucene-top10.json).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Product } from '../data.ts';
import type { Goal, GoalSource } from '../goals.ts';
import { nounWords } from '../nouns.ts';
import { computeReward, goalOptionValues, REWARD_REVISIONS, type RewardRevision } from '../reward.ts';
import { tokenSetRatio } from '../fuzzy.ts';
import { normalizeColor } from '../normalize.ts';
import { loadWorld, type World } from '../world.ts';

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    python: { type: 'string', default: 'python3' },
    original: { type: 'string' },
    'spacy-model': { type: 'string' },
    'lucene-cp': { type: 'string' },
    'lucene-classes': { type: 'string' },
    'write-fixture': { type: 'boolean', default: false },
  },
});
if (!args.original) throw new Error('--original DIR is required: the folder parity/fetch-original.sh wrote');
const originalDir = resolve(args.original);
for (const revision of REWARD_REVISIONS) {
  const goalPy = join(originalDir, revision, 'web_agent_site', 'engine', 'goal.py');
  if (!existsSync(goalPy)) throw new Error(`--original: ${goalPy} is missing; run parity/fetch-original.sh ${args.original}`);
}

const world = loadWorld();
const humanWorld = loadWorld({ goals: 'human' });
const goals = world.goals;
const testIdx = world.splits.test;

interface Case {
  source: GoalSource;
  goalIndex: number;
  kind: string;
  purchased: string;
  goal: Goal;
  price: number;
  options: Record<string, string>;
}

/**
 * Purchases an agent plausibly makes for goal i: the right product with the goal's options, none,
 * each other value of each option, over the price limit, and the products ranked next to it for the
 * instruction with their first option values (often more options than the goal names).
 */
function purchasesFor(w: World, source: GoalSource, i: number): Case[] {
  const goal = w.goals[i];
  const target = w.catalogue.byAsin.get(goal.asin)!;
  const price = w.prices.get(goal.asin)!;
  const out: Case[] = [];
  const add = (kind: string, purchased: string, options: Record<string, string>, g = goal, p = price) =>
    out.push({ source, goalIndex: i, kind, purchased, goal: g, price: p, options });
  // Human goals list option values without names: choose each wanted value where the product offers it.
  const wanted: Record<string, string> = Array.isArray(goal.goal_options)
    ? Object.fromEntries(
        Object.entries(target.options).flatMap(([n, vs]) => {
          const v = (goal.goal_options as string[]).find((o) => vs.includes(o));
          return v === undefined ? [] : [[n, v]];
        }),
      )
    : { ...goal.goal_options };
  const full = Object.fromEntries(Object.entries(target.options).map(([n, vs]) => [n, wanted[n] ?? vs[0]]));
  add('exact', goal.asin, wanted);
  if (JSON.stringify(full) !== JSON.stringify(wanted)) add('every-option-chosen', goal.asin, full);
  add('no-options', goal.asin, {});
  for (const [name, values] of Object.entries(target.options)) {
    for (const other of values) if (other !== full[name]) add(`wrong-${name}`, goal.asin, { ...full, [name]: other });
  }
  add('over-price', goal.asin, { ...wanted }, { ...goal, price_upper: Math.max(1, Math.floor(price) - 1) });
  for (const hit of w.search
    .search(goal.instruction_text, 6)
    .filter((h) => h.asin !== goal.asin)
    .slice(0, 4)) {
    const p = w.catalogue.byAsin.get(hit.asin)!;
    const options = Object.fromEntries(Object.entries(p.options).map(([n, vs]) => [n, vs[0]]));
    add('other-product', p.asin, options, goal, w.prices.get(p.asin)!);
  }
  return out;
}

const worldOf = (source: GoalSource) => (source === 'human' ? humanWorld : world);
const cases: Case[] = [
  ...testIdx.flatMap((i) => purchasesFor(world, 'synthetic', i)),
  ...humanWorld.goals.flatMap((_, i) => purchasesFor(humanWorld, 'human', i)),
];
const product = (c: Case) => worldOf(c.source).catalogue.byAsin.get(c.purchased)!;
const tsRewards = Object.fromEntries(
  REWARD_REVISIONS.map((rev) => [rev, cases.map((c) => computeReward(product(c), c.goal, c.price, c.options, rev))]),
) as Record<RewardRevision, ReturnType<typeof computeReward>[]>;

// Every fuzzy comparison v2-6ba9969's reward makes for these cases (master's are pairs of the same values).
const pairSet = new Map<string, [string, string]>();
for (const c of cases) {
  const p = product(c);
  for (const g of c.goal.attributes) for (const a of p.Attributes) pairSet.set(JSON.stringify([a, g]), [a, g]);
  const wanted = goalOptionValues(c.goal).map(normalizeColor);
  for (const v of Object.values(c.options))
    for (const w of wanted) pairSet.set(JSON.stringify([w, normalizeColor(v)]), [w, normalizeColor(v)]);
}
const pairs = [...pairSet.values()];
const tsRatios = pairs.map(([a, b]) => tokenSetRatio(a, b));

const products: Record<string, Product> = {};
for (const p of [...world.catalogue.products, ...humanWorld.catalogue.products]) products[p.asin] = p;
const nouns: Record<string, string[]> = {};
for (const p of Object.values(products)) {
  nouns[p.name] = nounWords(p.name);
  nouns[p.Title] = nounWords(p.Title);
}
for (const c of cases) nouns[c.goal.name] = nounWords(c.goal.name);

const work = mkdtempSync(join(tmpdir(), 'webshop-parity-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));
const casesPath = join(work, 'cases.json');
writeFileSync(
  casesPath,
  JSON.stringify({
    products,
    cases: cases.map((c) => ({ purchased: c.purchased, goal: c.goal, price: c.price, options: c.options })),
    pairs,
    nouns,
  }),
);
interface OriginalOutput {
  rewards: Array<{ reward: number; info: { r_type: number } }>;
  ratios: number[];
  nouns: Record<string, string[]>;
}
const runOriginal = (revision: RewardRevision, nounsFrom: 'given' | 'spacy'): OriginalOutput => {
  const out = join(work, `out-${revision}-${nounsFrom}.json`);
  const spacy = args['spacy-model'] ? ['--spacy-model', args['spacy-model']] : [];
  execFileSync(
    args.python!,
    [join(here, 'original.py'), '--webshop', join(originalDir, revision), casesPath, out, '--nouns', nounsFrom, ...spacy],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  return JSON.parse(readFileSync(out, 'utf8')) as OriginalOutput;
};

const same = (a: number, b: number) => Math.abs(a - b) < 1e-12;
const byKind = (list: Case[]) => list.reduce<Record<string, number>>((acc, c) => ((acc[c.kind] = (acc[c.kind] ?? 0) + 1), acc), {});
const original = Object.fromEntries(REWARD_REVISIONS.map((rev) => [rev, runOriginal(rev, 'given')])) as Record<
  RewardRevision,
  OriginalOutput
>;
const perRevision: Record<string, unknown> = {};
for (const rev of REWARD_REVISIONS) {
  const ref = original[rev].rewards.map((r) => r.reward);
  perRevision[rev] = {
    mismatchesWithSameNouns: cases.filter((_, k) => !same(tsRewards[rev][k].reward, ref[k])).length,
    originalAbove1: ref.filter((r) => r > 1 + 1e-12).length,
    originalMax: Math.max(...ref),
    originalSuccess: ref.filter((r) => r === 1).length,
  };
}
const masterRef = original.master.rewards.map((r) => r.reward);
const v2Ref = original['v2-6ba9969'].rewards.map((r) => r.reward);
const revisionsDiffer = cases.filter((_, k) => !same(masterRef[k], v2Ref[k]));
const revisionsSuccessFlip = cases.filter((_, k) => (masterRef[k] === 1) !== (v2Ref[k] === 1));

const v2Ratios = original['v2-6ba9969'].ratios;
const ratioMismatch = pairs.filter((_, k) => tsRatios[k] !== v2Ratios[k]);
const thresholdFlip = pairs.filter((_, k) => tsRatios[k] > 85 !== v2Ratios[k] > 85);

const summary: Record<string, unknown> = {
  catalogue: world.catalogue.files.products.split('/').pop(),
  goals: goals.length,
  testGoals: testIdx.length,
  humanGoals: humanWorld.goals.length,
  original: 'princeton-nlp/WebShop web_agent_site/engine/goal.py, imported unchanged (parity/fetch-original.sh)',
  reward: {
    cases: cases.length,
    casesBySource: {
      synthetic: cases.filter((c) => c.source === 'synthetic').length,
      human: cases.filter((c) => c.source === 'human').length,
    },
    casesByKind: byKind(cases),
    revisions: perRevision,
    masterVsV2: { differ: revisionsDiffer.length, successFlips: revisionsSuccessFlip.length, differByKind: byKind(revisionsDiffer) },
  },
  fuzzy: {
    pairs: pairs.length,
    ratioMismatches: ratioMismatch.length,
    thresholdFlips: thresholdFlip.length,
    examples: ratioMismatch.slice(0, 5),
  },
};

if (args['spacy-model']) {
  // The tagger's effect, with the default revision: spaCy is what the original tags nouns with.
  const spacy = runOriginal('master', 'spacy');
  const ts = tsRewards.master;
  const rewardMismatch = cases.filter((_, k) => !same(ts[k].reward, spacy.rewards[k].reward));
  const names = Object.values(products).map((p) => p.name);
  const nounListDiffers = names.filter((n) => JSON.stringify(nouns[n]) !== JSON.stringify(spacy.nouns[n]));
  const nounSetDiffers = names.filter(
    (n) => JSON.stringify([...new Set(nouns[n])].sort()) !== JSON.stringify([...new Set(spacy.nouns[n])].sort()),
  );
  summary.tagger = {
    spacyModel: args['spacy-model'],
    rewardMismatches: rewardMismatch.length,
    rewardMismatchesByKind: byKind(rewardMismatch),
    rTypeMismatches: cases.filter((_, k) => ts[k].info.r_type !== spacy.rewards[k].info.r_type).length,
    successFlips: cases.filter((_, k) => (ts[k].reward === 1) !== (spacy.rewards[k].reward === 1)).length,
    productNames: names.length,
    nounListDiffers: nounListDiffers.length,
    nounSetDiffers: nounSetDiffers.length,
    examples: nounSetDiffers.slice(0, 3).map((n) => ({ name: n, wink: nouns[n], spacy: spacy.nouns[n] })),
  };
}

if (args['lucene-cp'] && args['lucene-classes']) {
  const docsPath = join(work, 'docs.tsv');
  const queriesPath = join(work, 'queries.txt');
  const outPath = join(work, 'lucene.tsv');
  const clean = (s: string) => s.replace(/[\t\r\n]/g, ' ');
  writeFileSync(
    docsPath,
    world.catalogue.products.map((p) => `${p.asin}\t${clean(world.catalogue.searchText.get(p.asin)!)}`).join('\n') + '\n',
  );
  // WebShop lower-cases the query before searching
  const queries = goals.map((g) => clean(g.instruction_text.toLowerCase()));
  writeFileSync(queriesPath, queries.join('\n') + '\n');
  execFileSync('java', ['-cp', `${args['lucene-cp']}:${args['lucene-classes']}`, 'LuceneReference', docsPath, queriesPath, outPath, '50'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const lucene = readFileSync(outPath, 'utf8')
    .split('\n')
    .slice(0, queries.length)
    .map((l) => (l ? l.split(' ').map((x) => x.split(':')[0]) : []));
  let top1 = 0,
    top10Same = 0,
    top50Same = 0,
    overlap10 = 0,
    goalRankSame = 0,
    foundSame = 0,
    testTop10Same = 0;
  queries.forEach((q, i) => {
    const ours = world.search.search(q, 50).map((h) => h.asin);
    const ref = lucene[i];
    if (ours[0] === ref[0]) top1++;
    if (JSON.stringify(ours.slice(0, 10)) === JSON.stringify(ref.slice(0, 10))) {
      top10Same++;
      if (i < testIdx.length) testTop10Same++;
    }
    if (JSON.stringify(ours) === JSON.stringify(ref)) top50Same++;
    overlap10 += ours.slice(0, 10).filter((a) => ref.slice(0, 10).includes(a)).length / 10;
    if (ours.indexOf(goals[i].asin) === ref.indexOf(goals[i].asin)) goalRankSame++;
    if (ours.includes(goals[i].asin) === ref.includes(goals[i].asin)) foundSame++;
  });
  const n = queries.length;
  if (args['write-fixture']) {
    // Lucene's top 10 for the first 100 test goals, for the search unit test.
    const top10 = testIdx.slice(0, 100).map((i) => ({ goalIndex: i, query: queries[i], top10: lucene[i].slice(0, 10) }));
    writeFileSync(join(here, 'lucene-top10.json'), JSON.stringify(top10) + '\n');
  }
  summary.search = {
    queries: n,
    sameTop1: top1 / n,
    sameTop10Order: top10Same / n,
    sameTop10OrderOnTestGoals: testTop10Same / testIdx.length,
    sameTop50Order: top50Same / n,
    meanOverlapAt10: overlap10 / n,
    sameGoalProductRank: goalRankSame / n,
    sameGoalProductFoundInTop50: foundSame / n,
  };
}

console.log(JSON.stringify(summary, null, 2));
writeFileSync(join(here, 'results.json'), JSON.stringify(summary, null, 2) + '\n');

if (args['write-fixture']) {
  // Every 10th case, every case where the revisions disagree and every human-goal case, with the
  // original's reward under each revision (same nouns), for the unit test.
  const fixture = cases
    .map((c, k) => ({
      source: c.source,
      goalIndex: c.goalIndex,
      kind: c.kind,
      purchased: c.purchased,
      price: c.price,
      priceUpper: c.goal.price_upper,
      options: c.options,
      reward: Object.fromEntries(REWARD_REVISIONS.map((rev) => [rev, original[rev].rewards[k].reward])),
    }))
    .filter((c, k) => k % 10 === 0 || c.source === 'human' || !same(masterRef[k], v2Ref[k]));
  writeFileSync(join(here, 'reward-fixture.json'), JSON.stringify(fixture) + '\n');
}
