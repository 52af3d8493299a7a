/**
 * `empo2 webshop serve`: a local web page where a person shops in the same simulated shop the
 * agents use (same engine, same observations, same reward): pick a goal, search, open products,
 * choose options, buy, and see the reward and its parts. Plain node:http, no external assets, so it
 * works offline; it listens on loopback unless told otherwise. Only its own pages drive it: a Host
 * or Origin that does not name it (DNS rebinding, a form posted from another site) gets a 403.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { allowedHostNames, foreignHeader, isLoopback, type HostRules } from '../../util/host-check.ts';
import type { Split, StepResult } from '../types.ts';
import { WEBSHOP_TASK, WebShopEnv, type WebShopEnvOptions } from './env.ts';
import type { RewardInfo } from './reward.ts';
import type { Segment } from './shop.ts';
import { isPort } from '../../util/port.ts';

export interface WebShopServerOptions extends WebShopEnvOptions {
  /** Interface to listen on (default 127.0.0.1, loopback only). */
  host?: string;
  /** Port (default 3000; 0 picks a free one). */
  port?: number;
  /** Oldest sessions are forgotten beyond this many (default 500). */
  maxSessions?: number;
  /** Host names the page may be opened under, besides its IP addresses (and localhost on loopback) and a `host` given by name. */
  allowedHosts?: string[];
}

export interface RunningWebShopServer {
  url: string;
  port: number;
  server: Server;
  close(): Promise<void>;
}

interface ShopperSession {
  env: WebShopEnv;
  goalIndex: number;
  last: StepResult | null;
  history: string[];
}

const GOALS_PER_PAGE = 20;
const MAX_BODY_BYTES = 64 * 1024;
/** Longer actions (a pasted page as a search) would be repeated in every later page of the session. */
const MAX_ACTION_CHARS = 1000;

/** A form body over MAX_BODY_BYTES: answered with 413, the rest of the body left unread. */
class FormTooLarge extends Error {}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const STYLE = `
body{font-family:system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#232f3e;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}
header a{color:#febd69;text-decoration:none}
main{max-width:1100px;margin:20px auto;padding:0 20px}
.instruction{background:#fff8e1;border:1px solid #f0d98c;padding:12px 16px;border-radius:6px;margin-bottom:16px}
.row{display:flex;gap:8px;flex-wrap:wrap;align-items:center;margin:8px 0}
form.inline{display:inline}
button{cursor:pointer;border:1px solid #8a94a6;background:#fff;border-radius:4px;padding:6px 12px;font-size:14px}
button.primary{background:#febd69;border-color:#c88a2c}
button.buy{background:#ffa41c;border-color:#c45500;font-size:16px;padding:10px 20px}
button.option.selected{background:#1f6feb;color:#fff;border-color:#1f6feb}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(240px,1fr));gap:12px}
.card{background:#fff;border:1px solid #d8dde6;border-radius:6px;padding:12px}
.card .asin{font-family:monospace}
.price{color:#b12704;font-weight:600}
.error{background:#ffe3e3;border:1px solid #e06666;padding:8px 12px;border-radius:6px;margin-bottom:12px}
table{border-collapse:collapse;background:#fff}
td,th{border:1px solid #d8dde6;padding:4px 8px;text-align:left;vertical-align:top}
.score{font-size:40px;font-weight:700}
details{margin-top:24px;background:#fff;border:1px solid #d8dde6;border-radius:6px;padding:8px 12px}
pre{white-space:pre-wrap;word-break:break-word}
input[type=text]{padding:8px;font-size:15px;width:60%}
`;

function page(title: string, body: string): string {
  return (
    `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head>` +
    `<body><header><strong>WebShop</strong><a href="/">Pick a goal</a></header><main>${body}</main></body></html>`
  );
}

function actionButton(sessionId: string, action: string, label: string, cls = ''): string {
  return (
    `<form class="inline" method="post" action="/s/${sessionId}"><input type="hidden" name="action" value="${escapeHtml(action)}">` +
    `<button type="submit" class="${cls}" data-action="${escapeHtml(action)}">${escapeHtml(label)}</button></form>`
  );
}

function rewardTable(
  info: RewardInfo,
  purchased: { asin: string; options: Record<string, string>; price: number },
  env: WebShopEnv,
  goalIndex: number,
): string {
  const goal = env.world.goals[goalIndex];
  const pct = (x: number | undefined) => (x === undefined ? '—' : x.toFixed(3));
  const rows: Array<[string, string]> = [
    [
      'type match r_type',
      `${info.r_type} (query match: ${info.query_match}, category match: ${info.category_match}, title score: ${pct(info.title_score)})`,
    ],
    ['attributes r_att', `${pct(info.r_att)} × weight ${pct(info.w_att)}`],
    ['options r_option', info.r_option === undefined ? 'no goal options' : `${pct(info.r_option)} × weight ${pct(info.w_option)}`],
    [
      'price r_price',
      `${info.r_price} × weight ${pct(info.w_price)} (paid $${purchased.price.toFixed(2)}, limit $${goal.price_upper.toFixed(2)})`,
    ],
    ['purchased', `${purchased.asin} ${escapeHtml(JSON.stringify(purchased.options))}`],
    ['target', `${goal.asin} ${escapeHtml(JSON.stringify(goal.goal_options))}`],
    ['goal attributes', escapeHtml(goal.attributes.join(', '))],
  ];
  return `<table id="reward-parts">${rows.map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join('')}</table>`;
}

function renderSession(id: string, s: ShopperSession): string {
  const session = s.env.currentSession()!;
  const view = session.view();
  const goal = s.env.world.goals[s.goalIndex];
  const parts: string[] = [];
  parts.push(`<div class="instruction" id="instruction"><strong>Goal ${s.goalIndex}:</strong> ${escapeHtml(goal.instruction_text)}</div>`);
  if (s.last?.info?.error) parts.push(`<div class="error" id="error">${escapeHtml(String(s.last.info.error))}</div>`);
  const segs = view.segments.filter((x) => !(x.kind === 'text' && (x.role === 'instruction' || x.role === 'instruction-label')));
  const buttons = segs.filter((x): x is Extract<Segment, { kind: 'button' }> => x.kind === 'button');
  const buttonRow = (names: string[], cls = '') =>
    `<div class="row">${buttons
      .filter((b) => names.includes(b.text))
      .map((b) => actionButton(id, `click[${b.text.toLowerCase()}]`, b.text, cls))
      .join('')}</div>`;

  switch (view.kind) {
    case 'search':
      parts.push(
        `<form method="post" action="/s/${id}" id="search-form"><div class="row">` +
          `<input id="search_input" type="text" name="query" placeholder="Search..." required autofocus>` +
          `<button type="submit" class="primary">Search</button></div></form>`,
      );
      break;
    case 'results': {
      parts.push(buttonRow(['Back to Search', '< Prev', 'Next >']));
      const heading = segs.find((x) => x.kind === 'text' && x.role === 'heading');
      parts.push(
        `<h2 id="results-heading">${escapeHtml(heading?.text ?? '')} — query “${escapeHtml(session.query)}”</h2><div class="grid">`,
      );
      for (const p of segs) {
        if (p.kind !== 'product') continue;
        parts.push(
          `<div class="card">${actionButton(id, `click[${p.asin.toLowerCase()}]`, p.asin, 'asin product-link')}` +
            `<p>${escapeHtml(p.title)}</p><p class="price">${escapeHtml(p.price)}</p></div>`,
        );
      }
      parts.push('</div>');
      break;
    }
    case 'item': {
      parts.push(buttonRow(['Back to Search', '< Prev']));
      const title = segs.find((x) => x.kind === 'text' && x.role === 'title');
      const price = segs.find((x) => x.kind === 'text' && x.role === 'price');
      const rating = segs.find((x) => x.kind === 'text' && x.text.startsWith('Rating:'));
      parts.push(
        `<h2 id="product-title">${escapeHtml(title?.text ?? '')}</h2><p class="price">${escapeHtml(price?.text ?? '')}</p>` +
          `<p>${escapeHtml(rating?.text ?? '')}</p>`,
      );
      let open = false;
      for (const x of segs) {
        if (x.kind === 'text' && x.role === 'option-name') {
          if (open) parts.push('</div>');
          parts.push(`<h4>${escapeHtml(x.text)}</h4><div class="row">`);
          open = true;
        } else if (x.kind === 'option') {
          parts.push(actionButton(id, `click[${x.text}]`, x.text, `option${x.selected ? ' selected' : ''}`));
        }
      }
      if (open) parts.push('</div>');
      parts.push(buttonRow(['Description', 'Features', 'Reviews', 'Attributes']));
      parts.push(buttonRow(['Buy Now'], 'buy'));
      break;
    }
    case 'sub':
      parts.push(buttonRow(['Back to Search', '< Prev']));
      parts.push(
        `<div class="card" id="sub-page">${segs
          .filter((x) => x.kind === 'text')
          .map((x) => `<p>${escapeHtml(x.text)}</p>`)
          .join('')}</div>`,
      );
      break;
    case 'done': {
      const purchase = session.lastPurchase!;
      parts.push(
        `<h2>Thank you for shopping with us!</h2><p>Your score (min 0.0, max 1.0)</p>` +
          `<p class="score" id="reward">${purchase.result.reward.toFixed(4)}</p>` +
          `<p id="outcome">${purchase.result.reward === 1 ? 'Success: everything the goal asked for.' : 'Not a full match.'}</p>`,
      );
      parts.push(rewardTable(purchase.result.info, purchase, s.env, s.goalIndex));
      parts.push(`<p><a href="/">Pick another goal</a></p>`);
      break;
    }
  }
  if (s.env.done() && view.kind !== 'done') {
    parts.push(
      `<div class="error" id="out-of-steps">Step limit reached (${s.env.maxSteps(WEBSHOP_TASK)} actions) without buying: reward 0. <a href="/">Pick another goal</a></div>`,
    );
  }
  parts.push(
    `<details id="agent-view"><summary>What the agent sees (step ${s.history.length} of ${s.env.maxSteps(WEBSHOP_TASK)})</summary>` +
      `<h4>Observation</h4><pre id="observation">${escapeHtml(session.observation())}</pre>` +
      `<h4>Valid actions</h4><pre>${escapeHtml(s.env.validActions().join('\n'))}</pre>` +
      `<h4>Actions so far</h4><pre>${escapeHtml(s.history.join('\n'))}</pre></details>`,
  );
  return page(`WebShop goal ${s.goalIndex}`, parts.join(''));
}

function renderHome(env: WebShopEnv, split: Split, pageNo: number): string {
  const indices = env.variations(WEBSHOP_TASK, split);
  const pages = Math.max(1, Math.ceil(indices.length / GOALS_PER_PAGE));
  const p = Math.min(Math.max(1, pageNo), pages);
  const shown = indices.slice((p - 1) * GOALS_PER_PAGE, p * GOALS_PER_PAGE);
  const w = env.world;
  const splitLinks = (['test', 'dev', 'train'] as Split[])
    .map((sp) => `<a href="/?split=${sp}">${sp} (${w.splits[sp].length})</a>`)
    .join(' · ');
  const rows = shown
    .map(
      (i) =>
        `<tr><td>${i}</td><td>${escapeHtml(w.goals[i].instruction_text)}</td><td>` +
        `<form class="inline" method="post" action="/start"><input type="hidden" name="goal" value="${i}">` +
        `<button type="submit" class="primary" data-goal="${i}">Shop</button></form></td></tr>`,
    )
    .join('');
  return page(
    'WebShop — pick a goal',
    `<h1>Pick a goal</h1><p>${w.catalogue.products.length} products, ${w.goals.length} ${w.goalSource} goals. Splits: ${splitLinks}</p>` +
      `<form method="post" action="/start" class="row" id="goal-form"><label>Goal index <input type="number" name="goal" min="0" max="${w.goals.length - 1}" value="${shown[0] ?? 0}"></label>` +
      `<button type="submit" class="primary">Start</button></form>` +
      `<h3>${split} goals, page ${p} of ${pages}</h3>` +
      `<div class="row">${p > 1 ? `<a href="/?split=${split}&page=${p - 1}">&lt; previous</a>` : ''} ${p < pages ? `<a href="/?split=${split}&page=${p + 1}">next &gt;</a>` : ''}</div>` +
      `<table id="goals"><tr><th>#</th><th>Instruction</th><th></th></tr>${rows}</table>`,
  );
}

function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  return new Promise((resolve, reject) => {
    const tooLarge = () => new FormTooLarge(`form body larger than ${MAX_BODY_BYTES} bytes`);
    if (Number(req.headers['content-length']) > MAX_BODY_BYTES) return reject(tooLarge());
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        // Reject but keep the socket: the answer is a 413 page, sent before the connection closes.
        chunks.length = 0;
        reject(tooLarge());
      } else chunks.push(c);
    });
    req.on('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: string, type = 'text/html; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}

function redirect(res: ServerResponse, location: string): void {
  res.writeHead(303, { location });
  res.end();
}

export async function startWebShopServer(opts: WebShopServerOptions = {}): Promise<RunningWebShopServer> {
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 3000;
  if (!isPort(port)) throw new Error(`webshop serve: port must be 0..65535, got ${port}`);
  const maxSessions = opts.maxSessions ?? 500;
  const catalogueEnv = new WebShopEnv(opts); // loads data once; sessions reuse the cached world
  const sessions = new Map<string, ShopperSession>();

  const rules: HostRules = { boundAddress: host, allowedHosts: allowedHostNames(host, opts.allowedHosts) };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const foreign = foreignHeader(rules, req.headers);
    if (foreign) {
      const why =
        foreign.header === 'host'
          ? `Host ${JSON.stringify(foreign.value)} does not name this server (bound to ${rules.boundAddress}); open it by its IP address${isLoopback(rules.boundAddress) ? ' or as localhost' : ''}, or start it with --allowed-host NAME`
          : `forms from pages of another origin (${JSON.stringify(foreign.value)}) are refused: shop from this server's own page`;
      return send(res, 403, page('Refused', `<p class="error">${escapeHtml(why)}.</p>`));
    }
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname;
    if (req.method === 'GET' && path === '/') {
      const split = (url.searchParams.get('split') ?? 'test') as Split;
      if (!['train', 'dev', 'test'].includes(split))
        return send(res, 400, page('Bad split', `<p class="error">Unknown split "${escapeHtml(split)}".</p>`));
      return send(res, 200, renderHome(catalogueEnv, split, Number(url.searchParams.get('page') ?? '1') || 1));
    }
    if (req.method === 'POST' && path === '/start') {
      const form = await readForm(req);
      // Digits only: Number() reads an empty or missing goal as 0, and takes " 1", "1e0", "-0" and "0x1".
      const given = form.get('goal') ?? '';
      const goalIndex = /^\d+$/.test(given) ? Number(given) : NaN;
      if (!Number.isInteger(goalIndex) || goalIndex >= catalogueEnv.world.goals.length) {
        return send(
          res,
          400,
          page('Bad goal', `<p class="error">Goal must be an index in 0..${catalogueEnv.world.goals.length - 1}.</p><a href="/">back</a>`),
        );
      }
      const env = new WebShopEnv(opts);
      await env.reset(WEBSHOP_TASK, goalIndex);
      const id = randomBytes(8).toString('hex');
      sessions.set(id, { env, goalIndex, last: null, history: [] });
      while (sessions.size > maxSessions) sessions.delete(sessions.keys().next().value!);
      return redirect(res, `/s/${id}`);
    }
    const match = /^\/s\/([0-9a-f]{16})(\/state)?$/.exec(path);
    if (match) {
      const s = sessions.get(match[1]);
      if (!s)
        return send(
          res,
          404,
          page('No such session', '<p class="error">This session is unknown or expired.</p><a href="/">Pick a goal</a>'),
        );
      if (req.method === 'GET' && match[2]) {
        const session = s.env.currentSession()!;
        return send(
          res,
          200,
          JSON.stringify({
            goalIndex: s.goalIndex,
            page: session.kind,
            observation: session.observation(),
            validActions: s.env.validActions(),
            done: s.env.done(),
            score: s.env.score(),
            history: s.history,
            purchase: session.lastPurchase,
          }),
          'application/json',
        );
      }
      if (req.method === 'GET') return send(res, 200, renderSession(match[1], s));
      if (req.method === 'POST' && !match[2]) {
        const form = await readForm(req);
        const query = form.get('query');
        const action = query !== null ? `search[${query}]` : form.get('action');
        if (!action) return send(res, 400, page('Bad request', '<p class="error">The form sent no action.</p>'));
        if (action.length > MAX_ACTION_CHARS) {
          return send(
            res,
            400,
            page(
              'Bad request',
              `<p class="error">The action is longer than ${MAX_ACTION_CHARS} characters.</p><a href="/s/${match[1]}">back</a>`,
            ),
          );
        }
        // The history holds at most the step limit's actions: a finished episode takes no more.
        if (s.env.done()) {
          return send(
            res,
            409,
            page(
              'Episode over',
              `<p class="error">This episode is over (${s.history.length} actions); it takes no more actions.</p><a href="/">Pick another goal</a>`,
            ),
          );
        }
        s.history.push(action);
        s.last = await s.env.step(action);
        return redirect(res, `/s/${match[1]}`);
      }
    }
    send(res, 404, page('Not found', `<p class="error">Nothing at ${escapeHtml(path)}.</p><a href="/">Pick a goal</a>`));
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (err instanceof FormTooLarge && !res.headersSent) {
        // The unread rest of the body would otherwise be parsed as the next request.
        res.setHeader('connection', 'close');
        return send(res, 413, page('Form too large', `<p class="error">${escapeHtml(err.message)}.</p><a href="/">back</a>`));
      }
      if (!res.headersSent) send(res, 500, page('Error', `<p class="error">${escapeHtml(err.message)}</p>`));
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(new Error(`webshop serve: cannot listen on ${host}:${port}: ${err.code ?? err.message}`)),
    );
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  rules.boundAddress = address.address;
  const actualPort = address.port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${actualPort}/`,
    port: actualPort,
    server,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
