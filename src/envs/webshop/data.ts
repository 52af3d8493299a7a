/**
 * Loading WebShop's own data files: the product catalogue (either the search-engine documents
 * `resources_*_documents.jsonl` or the raw `items_shuffle*.json`), the attribute/instruction file
 * `items_ins_v2*.json` and, optionally, human goals (`items_human_ins.json`, or the task-list form
 * with `target_attributes`). Products end up exactly as WebShop's `load_products` leaves them,
 * because the reward reads those fields (Title, BulletPoints, Description, Attributes, options...).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Review {
  title?: string;
  score?: number | string;
  body?: string;
}

/** A product as WebShop's load_products leaves it (only the fields the shop and reward read). */
export interface Product {
  asin: string;
  name: string;
  Title: string;
  Description: string;
  BulletPoints: string[];
  /** Display price, e.g. "$12.99" or "$10.0 to $15.5". */
  Price: string;
  /** One price, or the [low, high] range the real price is drawn from. */
  pricing: number[];
  /** Option name (lower-cased) -> option values (lower-cased, "/" written as " | "). */
  options: Record<string, string[]>;
  option_to_image: Record<string, string | null>;
  Attributes: string[];
  category: string;
  query: string;
  product_category: string;
  MainImage: string | null;
  Rating: string;
  Reviews: Review[];
}

/** One entry of items_ins_v2*.json. */
export interface AttributeEntry {
  attributes?: string[];
  instruction?: string | null;
  instruction_attributes?: string[] | null;
}

/** One human instruction as items_human_ins.json stores it (per ASIN). */
export interface HumanInstruction {
  instruction: string;
  instruction_attributes: string[];
  instruction_options: string[];
}

export interface Catalogue {
  /** In catalogue order (the order search ties and goal building follow). */
  products: Product[];
  byAsin: Map<string, Product>;
  /** Search text per ASIN, as WebShop's convert_product_file_format.py writes it. */
  searchText: Map<string, string>;
  /** Synthetic instructions from the attribute file, by ASIN. */
  attributes: Record<string, AttributeEntry>;
  /** Files actually read, for messages and reports. */
  files: { products: string; attributes: string };
}

export const DATA_ENV_VAR = 'EMPO2_WEBSHOP_DATA';

const CATALOGUE_CANDIDATES = [
  'resources_1k_documents.jsonl',
  'items_shuffle_1000.json',
  'items_shuffle.json',
  'resources_100_documents.jsonl',
];
const ATTRIBUTE_CANDIDATES = ['items_ins_v2_1000.json', 'items_ins_v2.json'];
export const HUMAN_GOAL_CANDIDATES = ['items_human_ins.json', 'human_goals_webshop_tasks.json'];

export const WHERE_TO_GET_DATA =
  "WebShop's data files come from the princeton-nlp/WebShop project (MIT licence): its `setup.sh -d small` " +
  'downloads items_shuffle_1000.json, items_ins_v2_1000.json and items_human_ins.json (`-d all` gives the full ' +
  'items_shuffle.json / items_ins_v2.json). The empo2 repository expects them, or resources_1k_documents.jsonl ' +
  `(see shared/data/webshop/SOURCE.md), in ../shared/data/webshop next to the repository; set ${DATA_ENV_VAR} ` +
  'or pass dataDir to use another folder.';

/** The repository root: this file lives in <root>/src/envs/webshop. */
function repoRoot(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
}

/** Where the data lives: explicit option, then $EMPO2_WEBSHOP_DATA, then ../shared/data/webshop. */
export function resolveDataDir(dataDir?: string): string {
  const chosen = dataDir ?? process.env[DATA_ENV_VAR] ?? join(repoRoot(), '..', 'shared', 'data', 'webshop');
  return isAbsolute(chosen) ? chosen : resolve(process.cwd(), chosen);
}

/** A file in the data folder: an explicit name/path, or the first existing candidate. */
export function findDataFile(dir: string, explicit: string | undefined, candidates: string[], what: string): string {
  if (explicit !== undefined) {
    const path = isAbsolute(explicit) ? explicit : join(dir, explicit);
    if (!existsSync(path)) {
      throw new Error(`WebShop ${what} file not found: ${path}. ${WHERE_TO_GET_DATA}`);
    }
    return path;
  }
  for (const name of candidates) {
    const path = join(dir, name);
    if (existsSync(path) && statSync(path).isFile()) return path;
  }
  const why = existsSync(dir) ? `none of ${candidates.join(', ')} is in ${dir}` : `the folder ${dir} does not exist`;
  throw new Error(`WebShop ${what} not found: ${why}. ${WHERE_TO_GET_DATA}`);
}

function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read JSON from ${path}: ${(err as Error).message}`);
  }
}

function asString(value: unknown, where: string): string {
  if (typeof value !== 'string') throw new Error(`${where}: expected a string, got ${JSON.stringify(value)?.slice(0, 80)}`);
  return value;
}

function asStringList(value: unknown, where: string): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw new Error(`${where}: expected a list of strings, got ${JSON.stringify(value)?.slice(0, 80)}`);
  }
  return value;
}

/** Python's repr() of a float, as WebShop's f"${price}" prints it ("10.0", "12.99"). */
export function pythonFloatText(x: number): string {
  if (Number.isInteger(x) && Math.abs(x) < 1e16) return x.toFixed(1);
  return String(x);
}

/** The search text WebShop indexes: title, description, first bullet point and options, lower-cased. */
export function buildSearchText(p: Product): string {
  const optionText = Object.entries(p.options)
    .map(([name, values]) => `${name}: ${values.join(', ')}`)
    .join(', and ');
  return [p.Title, p.Description, p.BulletPoints[0] ?? '', optionText].join(' ').toLowerCase();
}

function productFromDocument(raw: Record<string, unknown>, where: string): Product {
  const pricing = raw.pricing;
  if (!Array.isArray(pricing) || !pricing.every((x) => typeof x === 'number')) {
    throw new Error(`${where}: product.pricing must be a list of numbers`);
  }
  const options = (raw.options ?? {}) as Record<string, unknown>;
  for (const [name, values] of Object.entries(options)) asStringList(values, `${where}: options["${name}"]`);
  return {
    asin: asString(raw.asin, `${where}: product.asin`),
    name: asString(raw.name, `${where}: product.name`),
    Title: asString(raw.Title, `${where}: product.Title`),
    Description: asString(raw.Description ?? '', `${where}: product.Description`),
    BulletPoints: asStringList(raw.BulletPoints ?? [], `${where}: product.BulletPoints`),
    Price: asString(raw.Price, `${where}: product.Price`),
    pricing: pricing as number[],
    options: options as Record<string, string[]>,
    option_to_image: (raw.option_to_image ?? {}) as Record<string, string | null>,
    Attributes: asStringList(raw.Attributes ?? ['DUMMY_ATTR'], `${where}: product.Attributes`),
    category: asString(raw.category, `${where}: product.category`),
    query: asString(raw.query, `${where}: product.query`),
    product_category: asString(raw.product_category ?? '', `${where}: product.product_category`),
    MainImage: typeof raw.MainImage === 'string' ? raw.MainImage : null,
    Rating: typeof raw.Rating === 'string' ? raw.Rating : 'N.A.',
    Reviews: Array.isArray(raw.Reviews) ? (raw.Reviews as Review[]) : [],
  };
}

/** resources_*_documents.jsonl: products already processed by load_products, plus their search text. */
function loadDocuments(path: string): { products: Product[]; searchText: Map<string, string> } {
  const products: Product[] = [];
  const searchText = new Map<string, string>();
  const lines = readFileSync(path, 'utf8').split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${path}:${i + 1}`;
    let doc: { id?: unknown; contents?: unknown; product?: unknown };
    try {
      doc = JSON.parse(line);
    } catch (err) {
      throw new Error(`${where}: not valid JSON (${(err as Error).message})`);
    }
    if (typeof doc.product !== 'object' || doc.product === null) throw new Error(`${where}: missing "product" object`);
    const product = productFromDocument(doc.product as Record<string, unknown>, where);
    if (searchText.has(product.asin)) return; // load_products keeps the first copy of an ASIN
    products.push(product);
    searchText.set(product.asin, typeof doc.contents === 'string' ? doc.contents : buildSearchText(product));
  });
  return { products, searchText };
}

/** Parses WebShop's raw price text ("$12.99", "$10.00$15.50") like load_products does. */
function parsePricing(raw: unknown, asin: string): { pricing: number[]; price: string } {
  if (raw === undefined || raw === null || raw === '' || (Array.isArray(raw) && raw.length === 0)) {
    return { pricing: [100.0], price: '$100.0' };
  }
  if (typeof raw !== 'string') throw new Error(`product ${asin}: pricing must be a "$.." string, got ${JSON.stringify(raw)}`);
  const pricing = raw
    .split('$')
    .slice(1)
    .map((piece) => {
      const digits = piece.replace(/[^\d.]/g, '');
      const value = Number(digits);
      if (digits === '' || !Number.isFinite(value)) throw new Error(`product ${asin}: cannot read a price from "${raw}"`);
      return value;
    });
  if (pricing.length === 0) throw new Error(`product ${asin}: no "$" price in "${raw}"`);
  if (pricing.length === 1) return { pricing, price: `$${pythonFloatText(pricing[0])}` };
  return {
    pricing: pricing.slice(0, 2),
    price: `$${pythonFloatText(pricing[0])} to $${pythonFloatText(pricing[1])}`,
  };
}

/** items_shuffle*.json: the raw scrape, processed as WebShop's load_products processes it. */
function loadRawProducts(
  path: string,
  attributes: Record<string, AttributeEntry>,
  reviews: Map<string, { reviews: Review[]; rating: string }>,
): { products: Product[]; searchText: Map<string, string> } {
  const raw = readJson(path);
  if (!Array.isArray(raw)) throw new Error(`${path}: expected a JSON list of products`);
  const products: Product[] = [];
  const searchText = new Map<string, string>();
  raw.forEach((item: Record<string, unknown>, i: number) => {
    const where = `${path}[${i}]`;
    const asin = String(item.asin);
    if (asin === 'nan' || asin.length > 10 || searchText.has(asin)) return;
    const { pricing, price } = parsePricing(item.pricing, asin);
    const options: Record<string, string[]> = {};
    const optionToImage: Record<string, string | null> = {};
    const custom = item.customization_options;
    if (custom && typeof custom === 'object') {
      for (const [optionName, contents] of Object.entries(custom as Record<string, unknown>)) {
        if (contents === null || contents === undefined) continue;
        if (!Array.isArray(contents)) throw new Error(`${where}: customization_options["${optionName}"] must be a list`);
        const values: string[] = [];
        for (const content of contents as Array<{ value?: unknown; image?: unknown }>) {
          const value = asString(content.value, `${where}: customization_options["${optionName}"].value`)
            .trim()
            .replaceAll('/', ' | ')
            .toLowerCase();
          values.push(value);
          optionToImage[value] = typeof content.image === 'string' ? content.image : null;
        }
        options[optionName.toLowerCase()] = values;
      }
    }
    const small = item.small_description;
    const review = reviews.get(asin);
    const images = Array.isArray(item.images) ? item.images : [];
    const product: Product = {
      asin,
      name: asString(item.name, `${where}.name`),
      Title: asString(item.name, `${where}.name`),
      Description: asString(item.full_description ?? '', `${where}.full_description`),
      BulletPoints: Array.isArray(small)
        ? asStringList(small, `${where}.small_description`)
        : [asString(small ?? '', `${where}.small_description`)],
      Price: price,
      pricing,
      options,
      option_to_image: optionToImage,
      Attributes: attributes[asin]?.attributes ?? ['DUMMY_ATTR'],
      category: asString(item.category, `${where}.category`),
      query: asString(item.query, `${where}.query`).toLowerCase().trim(),
      product_category: asString(item.product_category ?? '', `${where}.product_category`),
      MainImage: typeof images[0] === 'string' ? images[0] : null,
      Rating: review?.rating ?? 'N.A.',
      Reviews: review?.reviews ?? [],
    };
    products.push(product);
    searchText.set(asin, buildSearchText(product));
  });
  return { products, searchText };
}

/** Optional reviews.json next to a raw catalogue: [{asin, reviews: [{title, stars|score, review|body}], average_rating}]. */
function loadReviews(dir: string): Map<string, { reviews: Review[]; rating: string }> {
  const path = join(dir, 'reviews.json');
  const out = new Map<string, { reviews: Review[]; rating: string }>();
  if (!existsSync(path)) return out;
  const raw = readJson(path);
  if (!Array.isArray(raw)) throw new Error(`${path}: expected a JSON list`);
  for (const entry of raw as Array<Record<string, unknown>>) {
    const reviews = (Array.isArray(entry.reviews) ? entry.reviews : []).map((r: Record<string, unknown>) => ({
      title: typeof r.title === 'string' ? r.title : undefined,
      score: (r.score ?? r.stars) as number | string | undefined,
      body: typeof r.review === 'string' ? r.review : typeof r.body === 'string' ? r.body : '',
    }));
    out.set(String(entry.asin), { reviews, rating: String(entry.average_rating ?? 'N.A.') });
  }
  return out;
}

export interface CatalogueOptions {
  /** Folder with the data files (default: $EMPO2_WEBSHOP_DATA, else ../shared/data/webshop). */
  dataDir?: string;
  /** Catalogue file name or path (default: the first of resources_1k_documents.jsonl, items_shuffle_1000.json, ...). */
  productsFile?: string;
  /** Attribute/instruction file (default: items_ins_v2_1000.json, else items_ins_v2.json). */
  attributesFile?: string;
  /** Keep only the first N products (WebShop's num_products). */
  numProducts?: number;
}

const catalogueCache = new Map<string, Catalogue>();

/** Reads the catalogue once per process and set of files. */
export function loadCatalogue(opts: CatalogueOptions = {}): Catalogue {
  const dir = resolveDataDir(opts.dataDir);
  const productsPath = findDataFile(dir, opts.productsFile, CATALOGUE_CANDIDATES, 'product catalogue');
  const attributesPath = findDataFile(dir, opts.attributesFile, ATTRIBUTE_CANDIDATES, 'attribute file (items_ins_v2*.json)');
  const key = JSON.stringify([productsPath, attributesPath, opts.numProducts ?? null]);
  const cached = catalogueCache.get(key);
  if (cached) return cached;

  const attributesRaw = readJson(attributesPath);
  if (typeof attributesRaw !== 'object' || attributesRaw === null || Array.isArray(attributesRaw)) {
    throw new Error(`${attributesPath}: expected a JSON object keyed by ASIN`);
  }
  const attributes = attributesRaw as Record<string, AttributeEntry>;
  const loaded = productsPath.endsWith('.jsonl')
    ? loadDocuments(productsPath)
    : loadRawProducts(productsPath, attributes, loadReviews(dirname(productsPath)));
  let products = loaded.products;
  if (opts.numProducts !== undefined) {
    if (!Number.isInteger(opts.numProducts) || opts.numProducts < 3) {
      throw new Error(`numProducts must be an integer >= 3, got ${opts.numProducts}`);
    }
    products = products.slice(0, opts.numProducts);
  }
  if (products.length < 3) throw new Error(`${productsPath}: only ${products.length} products; the shop needs at least 3`);
  const catalogue: Catalogue = {
    products,
    byAsin: new Map(products.map((p) => [p.asin, p])),
    searchText: new Map(products.map((p) => [p.asin, loaded.searchText.get(p.asin) ?? buildSearchText(p)])),
    attributes,
    files: { products: productsPath, attributes: attributesPath },
  };
  catalogueCache.set(key, catalogue);
  return catalogue;
}

/**
 * Human goals by ASIN. Accepts items_human_ins.json ({asin: [{instruction, instruction_attributes,
 * instruction_options}]}) or the task-list form ([{asin, instruction, target_attributes: {attributes, options}}]).
 */
export function loadHumanInstructions(path: string): Map<string, HumanInstruction[]> {
  const raw = readJson(path);
  const out = new Map<string, HumanInstruction[]>();
  const add = (asin: string, ins: HumanInstruction) => {
    const list = out.get(asin) ?? [];
    list.push(ins);
    out.set(asin, list);
  };
  if (Array.isArray(raw)) {
    raw.forEach((task: Record<string, unknown>, i: number) => {
      const where = `${path}[${i}]`;
      const target = (task.target_attributes ?? {}) as Record<string, unknown>;
      add(asString(task.asin, `${where}.asin`), {
        instruction: asString(task.instruction, `${where}.instruction`),
        instruction_attributes: asStringList(target.attributes ?? [], `${where}.target_attributes.attributes`),
        instruction_options: asStringList(target.options ?? [], `${where}.target_attributes.options`),
      });
    });
  } else if (typeof raw === 'object' && raw !== null) {
    for (const [asin, list] of Object.entries(raw as Record<string, unknown>)) {
      if (!Array.isArray(list)) throw new Error(`${path}: entry "${asin}" must be a list of instructions`);
      list.forEach((ins: Record<string, unknown>, i: number) => {
        const where = `${path}["${asin}"][${i}]`;
        const options = ins.instruction_options ?? [];
        add(asin, {
          instruction: asString(ins.instruction, `${where}.instruction`),
          instruction_attributes: asStringList(ins.instruction_attributes ?? [], `${where}.instruction_attributes`),
          // Some dumps keep options as {name: value}; WebShop only uses the values.
          instruction_options: Array.isArray(options)
            ? asStringList(options, `${where}.instruction_options`)
            : asStringList(Object.values(options as Record<string, unknown>), `${where}.instruction_options`),
        });
      });
    }
  } else {
    throw new Error(`${path}: expected a JSON object keyed by ASIN or a list of tasks`);
  }
  return out;
}
