/**
 * One shopper's session in the simulated shop, following WebShop's text environment page by page:
 * search page -> results (10 per page of the top 50, "< Prev" / "Next >") -> item page (options,
 * Description / Features / Reviews sub-pages, "Buy Now") -> done page with the reward. A page is a
 * list of segments; the text observation joins them with " [SEP] " as WebShop's simple text mode
 * does, and the web page (server.ts) renders the same segments as HTML.
 */
import type { Product } from './data.ts';
import type { Goal } from './goals.ts';
import { computeReward, parseRewardRevision, type RewardResult, type RewardRevision } from './reward.ts';
import { SEARCH_RETURN_N } from './search.ts';
import type { World } from './world.ts';

export const PRODUCTS_PER_PAGE = 10;
export const BUTTON = {
  search: 'Search',
  backToSearch: 'Back to Search',
  prev: '< Prev',
  next: 'Next >',
  buy: 'Buy Now',
} as const;
export const SUB_PAGES = ['Description', 'Features', 'Reviews', 'Attributes'] as const;
export type SubPage = (typeof SUB_PAGES)[number];
/** What an agent writes to search; the list of valid actions shows it on pages with a search box. */
export const SEARCH_ACTION_TEMPLATE = 'search[<your query>]';

export type PageKind = 'search' | 'results' | 'item' | 'sub' | 'done';

export type Segment =
  | { kind: 'text'; text: string; role?: 'instruction-label' | 'instruction' | 'title' | 'heading' | 'option-name' | 'price' | 'score' }
  | { kind: 'button'; text: string }
  | { kind: 'product'; text: string; asin: string; title: string; price: string }
  | { kind: 'option'; text: string; optionName: string; selected: boolean };

export interface PageView {
  kind: PageKind;
  segments: Segment[];
  hasSearchBar: boolean;
}

export interface ActionOutcome {
  /** True when the action did something; false for an action the page does not offer. */
  valid: boolean;
  /** Why an invalid action was refused. */
  error?: string;
  done: boolean;
  /** Set on purchase. */
  reward?: RewardResult;
}

/** Splits "name[arg]" into its parts; null when the action has no brackets. */
export function parseAction(action: string): { name: string; arg: string } | null {
  const open = action.indexOf('[');
  const close = action.lastIndexOf(']');
  if (open <= 0 || close < open) return null;
  return { name: action.slice(0, open).trim().toLowerCase(), arg: action.slice(open + 1, close).trim() };
}

export interface ShopOptions {
  /** Also honour search[...] on pages without a search box (WebShop's gym env does; its web page cannot). */
  searchAnywhere?: boolean;
  /** Offer the item page's "Attributes" tab (WebShop's show_attrs). */
  showAttributes?: boolean;
  /** Which revision of WebShop's reward scores a purchase (default master, as published numbers use). */
  rewardRevision?: RewardRevision;
}

export class ShopSession {
  private page: PageKind = 'search';
  private keywords: string[] = [];
  private resultPage = 1;
  private results: Product[] = [];
  private asin: string | null = null;
  private options: Record<string, string> = {};
  private subPage: SubPage = 'Description';
  private visited = new Set<string>();
  private purchase: { asin: string; options: Record<string, string>; price: number; result: RewardResult } | null = null;

  private readonly rewardRevision: RewardRevision;

  constructor(
    private readonly world: World,
    readonly goal: Goal,
    private readonly opts: ShopOptions = {},
  ) {
    this.rewardRevision = parseRewardRevision(opts.rewardRevision);
  }

  get kind(): PageKind {
    return this.page;
  }
  get done(): boolean {
    return this.page === 'done';
  }
  get chosenOptions(): Record<string, string> {
    return { ...this.options };
  }
  get currentAsin(): string | null {
    return this.asin;
  }
  get lastPurchase() {
    return this.purchase;
  }
  get query(): string {
    return this.keywords.join(' ');
  }
  get totalResults(): number {
    return this.results.length;
  }
  get currentResultPage(): number {
    return this.resultPage;
  }

  private product(): Product {
    return this.world.catalogue.byAsin.get(this.asin!)!;
  }

  view(): PageView {
    const instruction: Segment[] = [
      { kind: 'text', text: 'Instruction:', role: 'instruction-label' },
      { kind: 'text', text: this.goal.instruction_text, role: 'instruction' },
    ];
    const segments: Segment[] = [];
    switch (this.page) {
      case 'search':
        segments.push({ kind: 'text', text: 'WebShop', role: 'heading' }, ...instruction, { kind: 'button', text: BUTTON.search });
        break;
      case 'results': {
        segments.push(...instruction, { kind: 'button', text: BUTTON.backToSearch });
        segments.push({ kind: 'text', text: `Page ${this.resultPage} (Total results: ${this.results.length})`, role: 'heading' });
        if (this.resultPage > 1) segments.push({ kind: 'button', text: BUTTON.prev });
        if (this.resultPage * PRODUCTS_PER_PAGE < this.results.length) segments.push({ kind: 'button', text: BUTTON.next });
        const start = (this.resultPage - 1) * PRODUCTS_PER_PAGE;
        for (const p of this.results.slice(start, start + PRODUCTS_PER_PAGE)) {
          segments.push(
            { kind: 'product', text: p.asin, asin: p.asin, title: p.Title, price: p.Price },
            { kind: 'text', text: p.Title, role: 'title' },
            { kind: 'text', text: p.Price, role: 'price' },
          );
        }
        break;
      }
      case 'item': {
        const p = this.product();
        segments.push(...instruction, { kind: 'button', text: BUTTON.backToSearch }, { kind: 'button', text: BUTTON.prev });
        for (const [name, values] of Object.entries(p.options)) {
          segments.push({ kind: 'text', text: name, role: 'option-name' });
          for (const v of values) segments.push({ kind: 'option', text: v, optionName: name, selected: this.options[name] === v });
        }
        segments.push(
          { kind: 'text', text: p.Title, role: 'title' },
          { kind: 'text', text: `Price: ${p.Price}`, role: 'price' },
          { kind: 'text', text: `Rating: ${p.Rating}` },
        );
        for (const sub of SUB_PAGES) {
          if (sub === 'Attributes' && !this.opts.showAttributes) continue;
          segments.push({ kind: 'button', text: sub });
        }
        segments.push({ kind: 'button', text: BUTTON.buy });
        break;
      }
      case 'sub': {
        const p = this.product();
        segments.push(...instruction, { kind: 'button', text: BUTTON.backToSearch }, { kind: 'button', text: BUTTON.prev });
        segments.push(...this.subPageText(p).map((text): Segment => ({ kind: 'text', text })));
        break;
      }
      case 'done': {
        const r = this.purchase!.result;
        segments.push(
          { kind: 'text', text: 'Thank you for shopping with us!', role: 'heading' },
          { kind: 'text', text: 'Your score (min 0.0, max 1.0)' },
          { kind: 'text', text: String(r.reward), role: 'score' },
        );
        break;
      }
    }
    return { kind: this.page, segments, hasSearchBar: this.page === 'search' };
  }

  private subPageText(p: Product): string[] {
    switch (this.subPage) {
      case 'Description':
        return [p.Description.trim() || 'No Description'];
      case 'Features':
        return p.BulletPoints.length > 0 ? p.BulletPoints.map((b) => b.trim()).filter((b) => b !== '') : ['No Features'];
      case 'Reviews':
        if (p.Reviews.length === 0) return ['No reviews found'];
        return p.Reviews.flatMap((r) => [`"${r.title ?? ''}"`, String(r.score ?? ''), r.body ?? '']);
      case 'Attributes':
        return p.Attributes.length > 0 ? p.Attributes : ['No Attributes'];
    }
  }

  /** Text observation in WebShop's simple text mode. */
  observation(): string {
    return this.view()
      .segments.map((s) => s.text.trim())
      .filter((t) => t !== '')
      .join(' [SEP] ');
  }

  /**
   * What can be clicked, keyed as WebShop keys it: button texts and ASINs lower-cased, option
   * values as they are (a value shared by two options belongs to the later one, as in WebShop).
   */
  clickables(): Map<string, Segment> {
    const map = new Map<string, Segment>();
    for (const s of this.view().segments) {
      if (s.kind === 'button' && s.text !== BUTTON.search) map.set(s.text.toLowerCase(), s);
      else if (s.kind === 'product') map.set(s.asin.toLowerCase(), s);
      else if (s.kind === 'option') map.set(s.text, s);
    }
    return map;
  }

  validActions(): string[] {
    const actions = this.page === 'search' || this.opts.searchAnywhere ? [SEARCH_ACTION_TEMPLATE] : [];
    for (const key of this.clickables().keys()) actions.push(`click[${key}]`);
    return actions;
  }

  /** Applies one text action. Never throws for bad actions: they come back as valid=false. */
  act(action: string): ActionOutcome {
    if (this.page === 'done') return { valid: false, error: 'the episode is over: the item was bought', done: true };
    const parsed = parseAction(action);
    if (!parsed) return this.refuse(`"${action}" is not of the form search[query] or click[element]`);
    if (parsed.name === 'search') {
      if (this.page !== 'search' && !this.opts.searchAnywhere) {
        return this.refuse('there is no search box on this page; click[back to search] first');
      }
      const query = parsed.arg.toLowerCase();
      if (query === '') return this.refuse('the search query is empty');
      this.runSearch(query.split(' '));
      return { valid: true, done: false };
    }
    if (parsed.name !== 'click') return this.refuse(`unknown action "${parsed.name}"; use search[...] or click[...]`);
    const target = parsed.arg.toLowerCase();
    const clickable = this.clickables().get(target);
    if (!clickable) return this.refuse(`"${parsed.arg}" is not clickable on this page`);
    return this.click(target, clickable);
  }

  private refuse(error: string): ActionOutcome {
    return { valid: false, error, done: false };
  }

  private runSearch(keywords: string[], page = 1): void {
    this.keywords = keywords;
    this.results = this.world.search.products(keywords.join(' '), SEARCH_RETURN_N);
    this.resultPage = page;
    this.asin = null;
    this.options = {};
    this.page = 'results';
  }

  private click(target: string, clickable: Segment): ActionOutcome {
    if (target === BUTTON.buy.toLowerCase()) {
      const product = this.product();
      const price = this.world.prices.get(product.asin)!;
      const result = computeReward(product, this.goal, price, this.options, this.rewardRevision);
      this.purchase = { asin: product.asin, options: { ...this.options }, price, result };
      this.page = 'done';
      return { valid: true, done: true, reward: result };
    }
    if (target === BUTTON.backToSearch.toLowerCase()) {
      this.page = 'search';
      this.keywords = [];
      this.results = [];
      this.resultPage = 1;
      this.asin = null;
      this.options = {};
      this.visited = new Set();
      return { valid: true, done: false };
    }
    if (target === BUTTON.next.toLowerCase() && this.page === 'results') {
      this.resultPage += 1;
      return { valid: true, done: false };
    }
    if (target === BUTTON.prev.toLowerCase()) {
      if (this.page === 'results') this.resultPage -= 1;
      else if (this.page === 'sub') this.page = 'item';
      else if (this.page === 'item') {
        // WebShop re-runs the search, which also forgets the chosen options
        this.runSearch(this.keywords, this.resultPage);
      }
      return { valid: true, done: false };
    }
    const sub = SUB_PAGES.find((s) => s.toLowerCase() === target);
    if (sub && clickable.kind === 'button') {
      this.subPage = sub;
      this.page = 'sub';
      return { valid: true, done: false };
    }
    if (clickable.kind === 'product') {
      this.asin = clickable.asin;
      this.visited.add(clickable.asin);
      this.page = 'item';
      return { valid: true, done: false };
    }
    if (clickable.kind === 'option') {
      this.options[clickable.optionName] = clickable.text;
      this.page = 'item';
      return { valid: true, done: false };
    }
    return this.refuse(`"${target}" cannot be clicked here`);
  }
}
