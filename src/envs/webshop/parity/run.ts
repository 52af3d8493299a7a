/**
 * Measures how far the TypeScript WebShop is from the original on the real catalogue and goals:
 *  1. reward: the same purchases scored here and by reference.py (thefuzz 0.19.0, difflib) — with the
 *     nouns from this port's tagger (checks everything but the tagger) and with spaCy's nouns
 *     (measures what the tagger changes);
 *  2. fuzzy matching: every token_set_ratio the reward computed, here vs thefuzz;
 *  3. search: top-50 rankings here vs Lucene 8 (LuceneReference.java) for every goal instruction.
 * usage: npx tsx src/envs/webshop/parity/run.ts --python PY [--spacy-model M] [--lucene-cp CP --lucene-classes DIR]
 *        [--write-fixture]   (PY: a Python with thefuzz==0.19.0 and spaCy + an English model)
 * Prints a JSON summary and writes it to parity/results.json.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Product } from '../data.ts';
import type { Goal } from '../goals.ts';
import { nounWords } from '../nouns.ts';
import { computeReward, goalOptionValues } from '../reward.ts';
import { tokenSetRatio } from '../fuzzy.ts';
import { normalizeColor } from '../normalize.ts';
import { loadWorld } from '../world.ts';

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    python: { type: 'string', default: 'python3' },
    'spacy-model': { type: 'string', default: 'en_core_web_sm' },
    'lucene-cp': { type: 'string' },
    'lucene-classes': { type: 'string' },
    'write-fixture': { type: 'boolean', default: false },
  },
});

const world = loadWorld();
const goals = world.goals;
const testIdx = world.splits.test;

interface Case {
  goalIndex: number;
  kind: string;
  purchased: string;
  goal: Goal;
  price: number;
  options: Record<string, string>;
}

// Purchases an agent plausibly makes: the right product right or slightly wrong, and the products
// ranked next to it for the instruction.
const cases: Case[] = [];
for (const i of testIdx) {
  const goal = goals[i];
  const target = world.catalogue.byAsin.get(goal.asin)!;
  const price = world.prices.get(goal.asin)!;
  const goalOpts = Array.isArray(goal.goal_options) ? {} : goal.goal_options;
  cases.push({ goalIndex: i, kind: 'exact', purchased: goal.asin, goal, price, options: { ...goalOpts } });
  cases.push({ goalIndex: i, kind: 'no-options', purchased: goal.asin, goal, price, options: {} });
  for (const [name, wanted] of Object.entries(goalOpts)) {
    const other = target.options[name]?.find((v) => v !== wanted);
    if (other !== undefined) cases.push({ goalIndex: i, kind: `wrong-${name}`, purchased: goal.asin, goal, price, options: { ...goalOpts, [name]: other } });
  }
  cases.push({ goalIndex: i, kind: 'over-price', purchased: goal.asin, goal: { ...goal, price_upper: Math.max(1, Math.floor(price) - 1) }, price, options: { ...goalOpts } });
  for (const hit of world.search.search(goal.instruction_text, 6).filter((h) => h.asin !== goal.asin).slice(0, 4)) {
    const p = world.catalogue.byAsin.get(hit.asin)!;
    const options = Object.fromEntries(Object.entries(p.options).map(([n, vs]) => [n, vs[0]]));
    cases.push({ goalIndex: i, kind: 'other-product', purchased: p.asin, goal, price: world.prices.get(p.asin)!, options });
  }
}

const tsRewards = cases.map((c) => computeReward(world.catalogue.byAsin.get(c.purchased)!, c.goal, c.price, c.options));

// Every fuzzy comparison the reward makes for these cases.
const pairSet = new Map<string, [string, string]>();
for (const c of cases) {
  const p = world.catalogue.byAsin.get(c.purchased)!;
  for (const g of c.goal.attributes) for (const a of p.Attributes) pairSet.set(JSON.stringify([a, g]), [a, g]);
  const wanted = goalOptionValues(c.goal).map(normalizeColor);
  for (const v of Object.values(c.options)) for (const w of wanted) pairSet.set(JSON.stringify([w, normalizeColor(v)]), [w, normalizeColor(v)]);
}
const pairs = [...pairSet.values()];
const tsRatios = pairs.map(([a, b]) => tokenSetRatio(a, b));

const products: Record<string, Product> = {};
for (const p of world.catalogue.products) products[p.asin] = p;
const nouns: Record<string, string[]> = {};
for (const p of world.catalogue.products) {
  nouns[p.name] = nounWords(p.name);
  nouns[p.Title] = nounWords(p.Title);
}

const work = mkdtempSync(join(tmpdir(), 'webshop-parity-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));
const casesPath = join(work, 'cases.json');
writeFileSync(casesPath, JSON.stringify({
  products,
  cases: cases.map((c) => ({ purchased: c.purchased, goal: c.goal, price: c.price, options: c.options })),
  pairs,
  nouns,
}));
const runReference = (mode: 'given' | 'spacy') => {
  const out = join(work, `out-${mode}.json`);
  execFileSync(args.python!, [join(here, 'reference.py'), casesPath, out, '--nouns', mode, '--spacy-model', args['spacy-model']!], { stdio: ['ignore', 'ignore', 'inherit'] });
  return JSON.parse(readFileSync(out, 'utf8')) as { rewards: Array<{ reward: number; info: { r_type: number } }>; ratios: number[]; nouns: Record<string, string[]> };
};

const given = runReference('given');
const spacy = runReference('spacy');
const same = (a: number, b: number) => Math.abs(a - b) < 1e-12;
const rewardMismatchGiven = cases.filter((_, k) => !same(tsRewards[k].reward, given.rewards[k].reward));
const ratioMismatch = pairs.filter((_, k) => tsRatios[k] !== given.ratios[k]);
const thresholdFlip = pairs.filter((_, k) => (tsRatios[k] > 85) !== (given.ratios[k] > 85));
const rewardMismatchSpacy = cases.filter((_, k) => !same(tsRewards[k].reward, spacy.rewards[k].reward));
const rtypeMismatchSpacy = cases.filter((_, k) => tsRewards[k].info.r_type !== spacy.rewards[k].info.r_type);
const successFlip = cases.filter((_, k) => (tsRewards[k].reward === 1) !== (spacy.rewards[k].reward === 1));
const names = world.catalogue.products.map((p) => p.name);
const nounListDiffers = names.filter((n) => JSON.stringify(nouns[n]) !== JSON.stringify(spacy.nouns[n]));
const nounSetDiffers = names.filter((n) => JSON.stringify([...new Set(nouns[n])].sort()) !== JSON.stringify([...new Set(spacy.nouns[n])].sort()));
const byKind = (list: Case[]) => list.reduce<Record<string, number>>((acc, c) => ((acc[c.kind] = (acc[c.kind] ?? 0) + 1), acc), {});

const summary: Record<string, unknown> = {
  catalogue: world.catalogue.files.products.split('/').pop(),
  goals: goals.length,
  testGoals: testIdx.length,
  reward: {
    cases: cases.length,
    casesByKind: byKind(cases),
    mismatchesWithSameNouns: rewardMismatchGiven.length,
    mismatchesWithSpacyNouns: rewardMismatchSpacy.length,
    mismatchesWithSpacyNounsByKind: byKind(rewardMismatchSpacy),
    rTypeMismatchesWithSpacyNouns: rtypeMismatchSpacy.length,
    successFlipsWithSpacyNouns: successFlip.length,
    spacyModel: args['spacy-model'],
  },
  fuzzy: { pairs: pairs.length, ratioMismatches: ratioMismatch.length, thresholdFlips: thresholdFlip.length, examples: ratioMismatch.slice(0, 5) },
  nouns: {
    productNames: names.length,
    nounListDiffers: nounListDiffers.length,
    nounSetDiffers: nounSetDiffers.length,
    examples: nounSetDiffers.slice(0, 3).map((n) => ({ name: n, wink: nouns[n], spacy: spacy.nouns[n] })),
  },
};

if (args['lucene-cp'] && args['lucene-classes']) {
  const docsPath = join(work, 'docs.tsv');
  const queriesPath = join(work, 'queries.txt');
  const outPath = join(work, 'lucene.tsv');
  const clean = (s: string) => s.replace(/[\t\r\n]/g, ' ');
  writeFileSync(docsPath, world.catalogue.products.map((p) => `${p.asin}\t${clean(world.catalogue.searchText.get(p.asin)!)}`).join('\n') + '\n');
  // WebShop lower-cases the query before searching
  const queries = goals.map((g) => clean(g.instruction_text.toLowerCase()));
  writeFileSync(queriesPath, queries.join('\n') + '\n');
  execFileSync('java', ['-cp', `${args['lucene-cp']}:${args['lucene-classes']}`, 'LuceneReference', docsPath, queriesPath, outPath, '50'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const lucene = readFileSync(outPath, 'utf8').split('\n').slice(0, queries.length).map((l) => (l ? l.split(' ').map((x) => x.split(':')[0]) : []));
  let top1 = 0, top10Same = 0, top50Same = 0, overlap10 = 0, goalRankSame = 0, foundSame = 0, testTop10Same = 0;
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
  // Every 10th case with the reference's reward (same nouns), for the unit test.
  const fixture = cases
    .map((c, k) => ({ goalIndex: c.goalIndex, kind: c.kind, purchased: c.purchased, price: c.price, priceUpper: c.goal.price_upper, options: c.options, reward: given.rewards[k].reward }))
    .filter((_, k) => k % 10 === 0);
  writeFileSync(join(here, 'reward-fixture.json'), JSON.stringify(fixture) + '\n');
}
