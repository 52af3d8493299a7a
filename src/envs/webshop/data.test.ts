import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { DATA_ENV_VAR, loadCatalogue, loadHumanInstructions, pythonFloatText, resolveDataDir } from './data.ts';
import { WebShopEnv } from './env.ts';

const saved = process.env[DATA_ENV_VAR];
const scratch = mkdtempSync(join(tmpdir(), 'empo2-webshop-data-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
afterEach(() => {
  if (saved === undefined) delete process.env[DATA_ENV_VAR];
  else process.env[DATA_ENV_VAR] = saved;
});

function rawShop(): string {
  const dir = mkdtempSync(join(scratch, 'raw-'));
  const item = (asin: string, extra: Record<string, unknown>) => ({
    asin,
    name: `Product ${asin}`,
    full_description: 'A thing.',
    small_description: ['First point', 'Second'],
    category: 'beauty',
    query: ' Face Cream ',
    product_category: 'Beauty › Skin Care › Face',
    images: ['img.jpg'],
    customization_options: '',
    pricing: '$10.00',
    ...extra,
  });
  writeFileSync(
    join(dir, 'items_shuffle_1000.json'),
    JSON.stringify([
      item('B000000001', {
        customization_options: {
          Color: [
            { value: 'Red/Blue ', image: 'a.jpg' },
            { value: 'Green', image: null },
          ],
          Size: null,
        },
      }),
      item('B000000002', { pricing: '$10.00$15.50', small_description: 'only one' }),
      item('B000000003', { pricing: '' }),
      item('B000000001', {}), // a duplicate ASIN is skipped, as WebShop does
      item('nan', {}),
    ]),
  );
  writeFileSync(
    join(dir, 'items_ins_v2_1000.json'),
    JSON.stringify({
      B000000001: { attributes: ['paraben free'], instruction: 'i want a face cream', instruction_attributes: ['paraben free'] },
      B000000002: { attributes: ['dry skin'] },
    }),
  );
  return dir;
}

describe('WebShop data loading', () => {
  it('finds the shared data next to the repository by default', () => {
    delete process.env[DATA_ENV_VAR];
    expect(resolveDataDir()).toMatch(/shared\/data\/webshop$/);
    expect(loadCatalogue().products).toHaveLength(1000);
  });

  it('says where to get the files when they are missing', () => {
    process.env[DATA_ENV_VAR] = '/nonexistent/webshop-data';
    expect(() => loadCatalogue()).toThrow(/folder \/nonexistent\/webshop-data does not exist.*setup\.sh -d small.*EMPO2_WEBSHOP_DATA/s);
    expect(() => new WebShopEnv({ dataDir: tmpdir(), productsFile: 'nope.json' })).toThrow(
      /product catalogue file not found: .*nope\.json/,
    );
  });

  it("processes WebShop's raw items_shuffle file like load_products", () => {
    const dir = rawShop();
    const c = loadCatalogue({ dataDir: dir });
    expect(c.products.map((p) => p.asin)).toEqual(['B000000001', 'B000000002', 'B000000003']);
    const [a, b, d] = c.products;
    expect(a.options).toEqual({ color: ['red | blue', 'green'] });
    expect(a.option_to_image).toEqual({ 'red | blue': 'a.jpg', green: null });
    expect(a.Attributes).toEqual(['paraben free']);
    expect(a.query).toBe('face cream');
    expect(a.Price).toBe('$10.0');
    expect(b.pricing).toEqual([10, 15.5]);
    expect(b.Price).toBe('$10.0 to $15.5');
    expect(b.BulletPoints).toEqual(['only one']);
    expect(d.pricing).toEqual([100]);
    expect(d.Attributes).toEqual(['DUMMY_ATTR']);
    expect(c.searchText.get('B000000001')).toBe('product b000000001 a thing. first point color: red | blue, green');

    process.env[DATA_ENV_VAR] = dir;
    const env = new WebShopEnv();
    expect(env.world.goals).toHaveLength(2); // one instructed product x two colours
    expect(env.world.goals.map((g) => g.instruction_text).sort()).toEqual(
      [
        'i want a face cream with color: green, and price lower than 20.00 dollars',
        'i want a face cream with color: red | blue, and price lower than 20.00 dollars',
      ]
        .sort()
        .map((t) => expect.stringMatching(new RegExp(`^${t.replace(/[|.]/g, '\\$&').replace('20\\.00', '(20|30|40|50)\\.00')}$`))),
    );
  });

  it('reads items_human_ins.json (ASIN -> instructions) and plays human goals from it', () => {
    const dir = rawShop();
    writeFileSync(
      join(dir, 'items_human_ins.json'),
      JSON.stringify({
        B000000001: [
          {
            asin: 'B000000001',
            instruction: 'i need a paraben free face cream in green.',
            instruction_attributes: ['paraben free'],
            instruction_options: ['green'],
          },
          { asin: 'B000000001', instruction: 'skipped: no attributes', instruction_attributes: [], instruction_options: [] },
        ],
        B999999999: [{ instruction: 'not in the catalogue', instruction_attributes: ['x'], instruction_options: [] }],
      }),
    );
    expect(loadHumanInstructions(join(dir, 'items_human_ins.json')).get('B000000001')).toHaveLength(2);
    const env = new WebShopEnv({ dataDir: dir, goals: 'human' });
    expect(env.world.goals).toHaveLength(1);
    const g = env.world.goals[0];
    expect(g.goal_options).toEqual(['green']);
    expect(g.instruction_text).toMatch(/^i need a paraben free face cream in green, and price lower than \d+\.00 dollars$/);
    expect(() => new WebShopEnv({ dataDir: rawShop(), goals: 'human' })).toThrow(/human-goal file not found/);
  });

  it('names the file and line of a broken catalogue line', () => {
    const dir = mkdtempSync(join(scratch, 'bad-'));
    writeFileSync(join(dir, 'resources_1k_documents.jsonl'), '{"id": "X", "contents": "x", "product": {"pricing": [1.0]}}\n');
    writeFileSync(join(dir, 'items_ins_v2_1000.json'), '{}');
    expect(() => loadCatalogue({ dataDir: dir })).toThrow(/resources_1k_documents\.jsonl:1: product\.asin: expected a string/);
  });

  it('prints prices like Python floats', () => {
    expect(pythonFloatText(10)).toBe('10.0');
    expect(pythonFloatText(12.99)).toBe('12.99');
  });
});
