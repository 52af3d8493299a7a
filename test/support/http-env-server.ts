/**
 * A small but real environment server for the tests: node:http, AgentGym's protocol (the shapes of
 * its SciWorld/BabyAI/TextCraft servers, or of its WebShop server with `dialect: 'webshop'`), a
 * tiny text game, and faults on demand: a request that hangs, a socket dropped before or after the
 * request is carried out, garbage or wrongly shaped answers, error statuses, AgentGym-style
 * {"error"} answers, observations of megabytes, and the whole server dying (every instance lost) and
 * coming back on the same port, or not. `openInstances` is what the leak checks read.
 *
 * The game: find an item hidden in one of four rooms and take it. Data index i hides item
 * ITEMS[i % 5] in room ROOMS[1 + floor(i / 5) % 4]; the player starts in the hall. Taking it gives
 * reward 1 and ends the episode; score is the summed reward (0-1).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export const ROOMS = ['hall', 'kitchen', 'garden', 'cellar', 'attic'] as const;
export const ITEMS = ['key', 'lamp', 'coin', 'book', 'apple'] as const;

export class FindGame {
  readonly item: string;
  readonly target: string;
  room = 'hall';
  score = 0;
  done = false;

  constructor(readonly index: number) {
    this.item = ITEMS[index % ITEMS.length];
    this.target = ROOMS[1 + (Math.floor(index / ITEMS.length) % (ROOMS.length - 1))];
  }

  get task(): string {
    return `Find the ${this.item} and take it.`;
  }

  observe(): string {
    const here = this.room === this.target ? `You see a ${this.item}.` : 'You see nothing of use.';
    return `You are in the ${this.room}. ${here} Doors lead to ${ROOMS.filter((r) => r !== this.room).join(', ')}.`;
  }

  actions(): string[] {
    const moves = ROOMS.filter((r) => r !== this.room).map((r) => `go to ${r}`);
    return [...moves, ...(this.room === this.target ? [`take ${this.item}`] : []), 'look'];
  }

  step(action: string): { observation: string; reward: number } {
    const a = action.trim().toLowerCase();
    const go = /^go to (\w+)$/.exec(a);
    if (go && (ROOMS as readonly string[]).includes(go[1]) && go[1] !== this.room) {
      this.room = go[1];
      return { observation: this.observe(), reward: 0 };
    }
    if (a === `take ${this.item}` && this.room === this.target) {
      this.done = true;
      this.score = 1;
      return { observation: `You take the ${this.item}. Well done.`, reward: 1 };
    }
    if (a === 'look') return { observation: this.observe(), reward: 0 };
    return { observation: 'Nothing happens.', reward: 0 };
  }
}

export type Fault =
  /** Never answered (until the server stops). */
  | 'hang'
  /** The socket is destroyed without an answer; the request is not carried out. */
  | 'drop'
  /** The request is carried out, then the socket is destroyed: the answer is lost. */
  | 'drop_after'
  /** HTTP 200 with a body that is not JSON; not carried out. */
  | 'garbage'
  /** HTTP 200 with JSON of the wrong shape; not carried out. */
  | 'wrong_shape'
  /** HTTP 500; not carried out. */
  | 'status_500'
  /** HTTP 503; not carried out. */
  | 'status_503'
  /** HTTP 200 with AgentGym's {"error": "..."}; not carried out. */
  | 'error'
  /** The server dies (every instance lost, connections cut) and listens again after a short pause. */
  | 'die'
  /** HTTP 200 and a body that never ends (no Content-Length); not carried out. */
  | 'endless'
  /** Carried out, answered with an observation of `hugeBytes` bytes of ordinary words (a reset's or a step's). */
  | 'huge';

export interface TestServerOptions {
  dialect?: 'agentgym' | 'webshop';
  /** Decides a fault for each request (null: none); called after any queued fault is used up. */
  faults?: (method: string, path: string) => Fault | null;
  /** Pause before a dead server listens again, ms (null: it stays dead). */
  restartAfterMs?: number | null;
  /** Size of the observation a 'huge' fault answers with, bytes (default 10 MiB). */
  hugeBytes?: number;
}

export class TestEnvServer {
  readonly instances = new Map<number, FindGame | null>();
  /** Most instances open at once since the start. */
  peakInstances = 0;
  /** Instances ever created. */
  created = 0;
  /** Times the server died. */
  deaths = 0;
  /** Instances removed by a client's close. */
  closedByClients = 0;
  /** Instances lost when the server died. */
  lostInDeaths = 0;
  /** Faults applied, by kind. */
  readonly faultCounts = new Map<Fault, number>();
  /** The last requests (method, path, body), for checking what clients send. */
  readonly requests: { method: string; path: string; body: unknown; fault?: Fault }[] = [];
  faults: ((method: string, path: string) => Fault | null) | null;
  private readonly queued: { path: string; fault: Fault }[] = [];
  private nextId = 0;
  private server: Server;
  private alive = true;
  private stopped = false;
  private restartTimer: NodeJS.Timeout | null = null;

  private constructor(
    readonly port: number,
    server: Server,
    readonly dialect: 'agentgym' | 'webshop',
    private readonly restartAfterMs: number | null,
    faults: TestServerOptions['faults'],
    private readonly hugeBytes: number,
  ) {
    this.server = server;
    this.faults = faults ?? null;
  }

  static async start(options: TestServerOptions = {}): Promise<TestEnvServer> {
    let self: TestEnvServer | undefined;
    const server = createServer((req, res) => void self!.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const restartAfterMs = options.restartAfterMs === undefined ? 50 : options.restartAfterMs;
    self = new TestEnvServer(
      port,
      server,
      options.dialect ?? 'agentgym',
      restartAfterMs,
      options.faults,
      options.hugeBytes ?? 10 * 2 ** 20,
    );
    return self;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get openInstances(): number {
    return this.instances.size;
  }

  /** The next request to `path` (e.g. "/step") meets this fault. */
  queueFault(path: string, fault: Fault): void {
    this.queued.push({ path, fault });
  }

  /** Stops for good: every connection cut, hanging requests included. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.alive = false;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Dies like a killed process: instances gone, connections cut; listens again on the same port after `restartAfterMs` (null: never). */
  die(restartAfterMs: number | null = this.restartAfterMs): void {
    if (!this.alive) return;
    this.alive = false;
    this.deaths++;
    this.lostInDeaths += this.instances.size;
    this.instances.clear();
    const old = this.server;
    old.close();
    old.closeAllConnections();
    if (restartAfterMs === null) return;
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      const server = createServer((req, res) => void this.handle(req, res));
      this.server = server;
      server.listen(this.port, '127.0.0.1', () => {
        if (!this.stopped) this.alive = true;
      });
    }, restartAfterMs);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    let body: unknown = undefined;
    try {
      body = await readJson(req);
    } catch {
      return send(res, 400, { detail: 'body is not JSON' });
    }
    this.requests.push({ method: req.method ?? '', path: url.pathname, body });
    if (this.requests.length > 5000) this.requests.splice(0, this.requests.length - 5000);
    if (!this.alive) {
      res.socket?.destroy();
      return;
    }

    const queuedAt = this.queued.findIndex((q) => q.path === url.pathname);
    const fault = queuedAt >= 0 ? this.queued.splice(queuedAt, 1)[0].fault : (this.faults?.(req.method ?? '', url.pathname) ?? null);
    if (fault) {
      this.faultCounts.set(fault, (this.faultCounts.get(fault) ?? 0) + 1);
      this.requests[this.requests.length - 1].fault = fault;
    }
    switch (fault) {
      case 'hang':
        return;
      case 'drop':
        res.socket?.destroy();
        return;
      case 'garbage':
        res.writeHead(200, { 'Content-Type': 'text/html' }).end('<html><body>Internal Server Error</body></html>');
        return;
      case 'wrong_shape':
        return send(res, 200, { result: 'ok', data: [1, 2, 3] });
      case 'status_500':
        return send(res, 500, { detail: 'Internal Server Error' });
      case 'status_503':
        return send(res, 503, { detail: 'Service Unavailable' });
      case 'error':
        return send(res, 200, { error: 'injected failure' });
      case 'die':
        this.die();
        return;
      case 'endless': {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.write('["');
        const chunk = 'x'.repeat(64 * 1024);
        const pump = () => {
          while (!res.destroyed && res.write(chunk));
          if (!res.destroyed) res.once('drain', pump);
        };
        pump();
        return;
      }
    }
    const [status, answer] = this.route(req.method ?? 'GET', url, body as Record<string, unknown> | undefined);
    if (fault === 'drop_after') {
      res.socket?.destroy();
      return;
    }
    if (fault === 'huge' && status === 200 && typeof answer === 'object' && answer !== null && 'observation' in answer) {
      const words = 'the red box is next to the green door in the kitchen ';
      (answer as { observation: string }).observation = words.repeat(Math.ceil(this.hugeBytes / words.length)).slice(0, this.hugeBytes);
    }
    send(res, status, answer);
  }

  private route(method: string, url: URL, body: Record<string, unknown> | undefined): [number, unknown] {
    const webshop = this.dialect === 'webshop';
    const idKey = webshop ? 'env_idx' : 'id';
    const path = url.pathname;
    if (method === 'GET' && path === '/') return [200, 'This is the test environment.'];
    if (method === 'POST' && path === '/create') {
      const id = this.nextId++;
      this.instances.set(id, null);
      this.created++;
      this.peakInstances = Math.max(this.peakInstances, this.instances.size);
      return [200, webshop ? id : { id }];
    }
    if (method === 'POST' && path === '/close' && !webshop) {
      const id = Number(body?.id);
      // AgentGym's BabyAI/TextCraft servers answer false for an id they do not know.
      const known = this.instances.delete(id);
      if (known) this.closedByClients++;
      return [200, known];
    }
    const id = Number(method === 'GET' ? url.searchParams.get(idKey) : body?.[idKey]);
    if (!this.instances.has(id)) return [200, { error: `The id ${id} is not valid.` }];
    if (method === 'POST' && path === '/reset') {
      const index = Number(body?.[webshop ? 'session_id' : 'data_idx']);
      if (!Number.isInteger(index) || index < 0) return [200, { error: `bad data index ${String(index)}` }];
      const game = new FindGame(index);
      this.instances.set(id, game);
      const observation = `${game.task} ${game.observe()}`;
      if (webshop) return [200, [observation, null]];
      return [200, { observation, task_description: game.task, reward: 0, score: 0, done: false, available_actions: game.actions() }];
    }
    const game = this.instances.get(id);
    if (!game) return [200, { error: `The environment ${id} has not been reset.` }];
    if (method === 'POST' && path === '/step') {
      if (game.done) return [200, { error: `The task with environment ${id} has finished.` }];
      const action = String(body?.action ?? '');
      const click = /^click\[(.*)\]$/.exec(action);
      const { observation, reward } = game.step(webshop && click ? click[1] : action);
      if (webshop) return [200, { state: observation, reward, done: game.done, info: null }];
      return [200, { observation, reward, score: game.score, done: game.done, available_actions: game.done ? [] : game.actions() }];
    }
    if (method === 'GET' && path === '/observation') return [200, game.observe()];
    if (method === 'GET' && path === '/available_actions') {
      return [200, webshop ? { has_search_bar: false, clickables: game.actions() } : game.actions()];
    }
    return [404, { detail: 'Not Found' }];
  }
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > 64 * 1024) throw new Error('body too large');
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  return text.length === 0 ? undefined : JSON.parse(text);
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) }).end(text);
}
