/**
 * `empo2 dashboard`: a local web page over runs, their trajectories, their tip memory and compare
 * outputs. Node's http server with a JSON API the page polls (so a live run's new iterations show up
 * without a reload) and the page's own files; vega and vega-lite come from node_modules, so nothing
 * is fetched from the internet.
 *
 * It serves the user's files without a login, so it listens on loopback only, answers only requests
 * whose Host (and Origin) name this server (a web page elsewhere could otherwise read it through
 * DNS rebinding), takes POST bodies only as JSON, and never maps a URL onto a file path: files are
 * served from fixed names, and sources and episodes are addressed by ids the server handed out.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ConfigSchema } from '../config/schema.ts';
import { checkAccess, checkJsonContentType } from '../serve/access.ts';
import { RequestError } from '../serve/protocol.ts';
import { TRAJECTORY_MODES, TRAJECTORY_SOURCES } from '../trajectory/format.ts';
import type { EpisodeSummary } from '../trajectory/reader.ts';
import { MemoryRequestError, MemoryViews } from './memory-view.ts';
import { DataError, readAdaptReport, readCompare, readConfig, readMetrics, summariseRun, TrajectoryFiles } from './run-data.ts';
import { discoverSources, SourceError, type Source } from './sources.ts';
import { isPort } from '../util/port.ts';

export interface DashboardOptions {
  /** Folders (or trajectory .jsonl files) to show; none: ./runs. */
  paths: readonly string[];
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  cwd?: string;
  log?: (line: string) => void;
}

export interface RunningDashboard {
  url: string;
  sources(): readonly Source[];
  close(): Promise<void>;
}

export const DEFAULT_DASHBOARD_PORT = 8765;
/** How often the page asks for news; the sources list is searched again at most this often. */
const RESCAN_MS = 2_000;
const MAX_BODY_BYTES = 256 * 1024;
const MAX_EPISODES_PER_PAGE = 500;

const PAGE_DIR = fileURLToPath(new URL('./page/', import.meta.url));
/** The page's own files: a fixed list, so no URL can name anything else on disk. */
const PAGE_FILES: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'api.js': 'text/javascript; charset=utf-8',
  'runs.js': 'text/javascript; charset=utf-8',
  'trajectories.js': 'text/javascript; charset=utf-8',
  'memory.js': 'text/javascript; charset=utf-8',
  'compare.js': 'text/javascript; charset=utf-8',
  'dom.js': 'text/javascript; charset=utf-8',
};

/** `vega` and `vega-lite`'s browser builds, found through the packages' entry points. */
function vendorFiles(): Record<string, string> {
  const require = createRequire(import.meta.url);
  const files = {
    'vega.min.js': join(dirname(require.resolve('vega')), 'vega.min.js'),
    'vega-lite.min.js': join(dirname(require.resolve('vega-lite')), 'vega-lite.min.js'),
  };
  for (const [name, path] of Object.entries(files))
    if (!existsSync(path)) throw new Error(`the browser build ${name} is missing (looked at ${path}); reinstall with npm ci`);
  return files;
}

/** Loopback names and addresses: the only interfaces the dashboard listens on. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || /^127(\.\d{1,3}){3}$/.test(host) || host === '::1' || host === '[::1]';
}

export async function startDashboard(o: DashboardOptions): Promise<RunningDashboard> {
  const { host, port } = listenAddress(o);
  const cwd = o.cwd ?? process.cwd();
  const log = o.log ?? (() => {});
  const vendor = vendorFiles();
  const sources = new SourceList(o.paths, cwd);
  const trajectories = new TrajectoryFiles();
  const memories = new MemoryViews();
  const routes: Route[] = [
    ...pageRoutes(vendor),
    ...sourceRoutes(sources, trajectories, cwd),
    ...trajectoryRoutes(sources, trajectories),
    ...memoryRoutes(sources, memories),
  ];
  const access: Access = { bound: host, publicUrl: () => `http://${host}:${port}` };
  const server = createServer((req, res) => {
    void handle(req, res, { routes, access, log });
  });
  await listen(server, host, port);
  const address = server.address() as AddressInfo;
  access.bound = address.address;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  access.publicUrl = () => `http://${shownHost}:${address.port}`;
  return {
    url: access.publicUrl(),
    sources: () => sources.all,
    close: () =>
      new Promise<void>((resolvePromise) => {
        memories.dispose();
        server.closeAllConnections();
        server.close(() => resolvePromise());
      }),
  };
}

/** The host and port asked for, refused unless the host is a loopback one and the port a port. */
function listenAddress(o: DashboardOptions): { host: string; port: number } {
  const host = o.host ?? '127.0.0.1';
  if (!isLoopbackHost(host)) {
    throw new SourceError(
      `--host ${host}: the dashboard shows your run files to anyone who can reach it and has no login, so it listens on loopback only (127.0.0.1, ::1 or localhost). ` +
        `To see it from another machine, forward the port, e.g. ssh -L ${o.port || DEFAULT_DASHBOARD_PORT}:127.0.0.1:${o.port || DEFAULT_DASHBOARD_PORT} <this machine>`,
    );
  }
  const port = o.port ?? DEFAULT_DASHBOARD_PORT;
  if (!isPort(port)) throw new SourceError(`--port must be an integer from 0 to 65535, got ${port}`);
  return { host, port };
}

/** The sources found under the paths, searched again at most every RESCAN_MS. */
class SourceList {
  private list: Source[];
  private scannedAt = Date.now();
  /** Why the last search failed (the list is then the one found before), or null. */
  problem: string | null = null;

  constructor(
    private readonly paths: readonly string[],
    private readonly cwd: string,
  ) {
    this.list = discoverSources(paths, cwd);
  }

  get all(): readonly Source[] {
    return this.list;
  }

  rescan(): void {
    if (Date.now() - this.scannedAt < RESCAN_MS) return;
    this.scannedAt = Date.now();
    try {
      this.list = discoverSources(this.paths, this.cwd);
      this.problem = null;
    } catch (e) {
      // A folder removed while the page is open: keep showing what was found, and say why the list is stale.
      this.problem = (e as Error).message;
    }
  }

  byId(id: string): Source {
    const found = this.list.find((s) => s.id === id);
    if (!found) throw new RequestError(404, `no source with id ${id} (the folder may have been removed; reload the page)`, 'id');
    return found;
  }
}

/** The page, its files, the vendored vega builds and the config defaults. */
function pageRoutes(vendor: Record<string, string>): Route[] {
  return [
    ['GET', /^\/$/, (_req, res) => sendFile(res, join(PAGE_DIR, 'index.html'), PAGE_FILES['index.html'])],
    [
      'GET',
      /^\/favicon\.ico$/,
      (_req, res) => {
        res.writeHead(204, SECURITY_HEADERS);
        res.end();
      },
    ],
    [
      'GET',
      /^\/app\/([a-z-]+\.(?:js|css|html))$/,
      (_req, res, [name]) => {
        const type = PAGE_FILES[name];
        if (!type) throw new RequestError(404, `no page file ${name}`, null);
        sendFile(res, join(PAGE_DIR, name), type);
      },
    ],
    [
      'GET',
      /^\/vendor\/([a-z.-]+\.js)$/,
      (_req, res, [name]) => {
        const path = vendor[name];
        if (!path) throw new RequestError(404, `no vendor file ${name}`, null);
        sendFile(res, path, 'text/javascript; charset=utf-8', 'public, max-age=3600');
      },
    ],
    ['GET', /^\/api\/config-defaults$/, (_req, res) => sendJson(res, ConfigSchema.parse({}))],
  ];
}

/** The sources: the list with each run's summary, one source, a run's metrics and a compare's plot. */
function sourceRoutes(sources: SourceList, trajectories: TrajectoryFiles, cwd: string): Route[] {
  const summaries = new FileKeyedCache<ReturnType<typeof summariseRun>>();
  return [
    [
      'GET',
      /^\/api\/sources$/,
      (_req, res) => {
        sources.rescan();
        // The minute is part of the key: a run whose files stop changing turns from running to stopped.
        const minute = String(Math.floor(Date.now() / 60_000));
        const list = sources.all.map((s) => ({
          ...s,
          ...(s.kind === 'run'
            ? {
                run: summaries.get(
                  s.path,
                  minute,
                  [join(s.path, 'metrics.jsonl'), join(s.path, 'config.yaml'), join(s.path, 'eval.md')],
                  () => summariseRun(s.path),
                ),
              }
            : {}),
        }));
        sendJson(res, { cwd, sources: list, problems: sources.problem ? [sources.problem] : [] });
      },
    ],
    ['GET', /^\/api\/sources\/([0-9a-f]{12})$/, (_req, res, [id]) => sendSource(res, sources, trajectories, id)],
    [
      'GET',
      /^\/api\/sources\/([0-9a-f]{12})\/metrics$/,
      (_req, res, [id]) => {
        const s = sources.byId(id);
        if (s.kind !== 'run')
          throw new RequestError(404, `${s.label} is a ${s.kind} folder, not a training run: it has no metrics.jsonl`, 'id');
        const metrics = readMetrics(s.path);
        const { config } = readConfig(s.path);
        sendJson(res, {
          file: join(s.path, 'metrics.jsonl'),
          train: metrics?.train ?? [],
          evals: metrics?.evals ?? [],
          warnings: metrics?.warnings ?? [],
          config,
        });
      },
    ],
    [
      'GET',
      /^\/api\/sources\/([0-9a-f]{12})\/plot\.svg$/,
      (_req, res, [id]) => {
        const s = sources.byId(id);
        const path = join(s.path, 'learning_curve.svg');
        if (s.kind !== 'compare' || !existsSync(path)) throw new RequestError(404, `${s.label} has no learning_curve.svg`, 'id');
        sendFile(res, path, 'image/svg+xml', 'no-cache');
      },
    ],
  ];
}

/** One source with what its kind adds: a run's summary, a compare's report and runs, an adapt report. */
function sendSource(res: ServerResponse, sources: SourceList, trajectories: TrajectoryFiles, id: string): void {
  const s = sources.byId(id);
  const files = trajectories.of(s).map(describeFile);
  if (s.kind === 'run') return sendJson(res, { source: s, run: summariseRun(s.path), files });
  if (s.kind === 'compare')
    return sendJson(res, {
      source: s,
      compare: readCompare(s.path),
      runs: sources.all.filter((r) => r.compare === s.id).map((r) => r.id),
      files,
    });
  if (s.kind === 'adapt') {
    const md = join(s.path, 'adapt.md');
    return sendJson(res, {
      source: s,
      adapt: readAdaptReport(s.path),
      adapt_md: existsSync(md) ? readFileSync(md, 'utf8') : null,
      files,
    });
  }
  sendJson(res, { source: s, files });
}

/** A source's episodes: filtered summaries with their facets, and one episode in full. */
function trajectoryRoutes(sources: SourceList, trajectories: TrajectoryFiles): Route[] {
  return [
    [
      'GET',
      /^\/api\/sources\/([0-9a-f]{12})\/trajectories$/,
      (_req, res, [id], query) => sendJson(res, episodeList(trajectories.of(sources.byId(id)), episodeFilter(query))),
    ],
    [
      'GET',
      /^\/api\/sources\/([0-9a-f]{12})\/episodes\/(\d+)\/(\d+)$/,
      (_req, res, [id, fileIndex, line]) => {
        const s = sources.byId(id);
        const file = trajectories.of(s)[Number(fileIndex)];
        if (!file) throw new RequestError(404, `${s.label} has no trajectory file number ${fileIndex}`, 'file');
        if (!file.episodes.some((e) => e.line === Number(line)))
          throw new RequestError(404, `${file.path} has no episode on line ${line}`, 'line');
        let episode;
        try {
          episode = file.episode(Number(line));
        } catch (e) {
          throw new DataError((e as Error).message);
        }
        sendJson(res, { file: file.path, line: Number(line), episode });
      },
    ],
  ];
}

/** The episodes of `files` that `filter` keeps, newest first, one page of them, with the facets of all. */
function episodeList(files: ReturnType<TrajectoryFiles['of']>, filter: ReturnType<typeof episodeFilter>) {
  const facets = { sources: new Set<string>(), iterations: new Set<number>(), tasks: new Set<string>(), modes: new Set<string>() };
  const matching: (EpisodeSummary & { file: number })[] = [];
  files.forEach((f, index) => {
    if (filter.file !== null && filter.file !== index) return;
    for (const e of f.episodes) {
      facets.sources.add(e.source);
      const step = e.iteration ?? e.trial;
      if (step !== null) facets.iterations.add(step);
      facets.tasks.add(e.task);
      facets.modes.add(e.mode);
      if (filter.matches(e)) matching.push({ ...summaryOnly(e), file: index });
    }
  });
  // Newest first: a live run's latest iteration is what one usually wants to read.
  matching.reverse();
  return {
    files: files.map(describeFile),
    facets: {
      sources: [...facets.sources].sort(),
      iterations: [...facets.iterations].sort((a, b) => a - b),
      tasks: [...facets.tasks].sort(),
      modes: TRAJECTORY_MODES.filter((m) => facets.modes.has(m)),
    },
    total: matching.length,
    offset: filter.offset,
    episodes: matching.slice(filter.offset, filter.offset + filter.limit),
  };
}

/** A source's tip memory: its overview, and what it retrieves for a state the page sends. */
function memoryRoutes(sources: SourceList, memories: MemoryViews): Route[] {
  return [
    [
      'GET',
      /^\/api\/sources\/([0-9a-f]{12})\/memory$/,
      async (_req, res, [id], query) => {
        const s = sources.byId(id);
        const limit = integerParam(query, 'limit', 200, 1, 1000);
        sendJson(res, await memories.overview(s, query.get('slot') || null, query.get('q') ?? '', limit));
      },
    ],
    [
      'POST',
      /^\/api\/sources\/([0-9a-f]{12})\/retrieve$/,
      async (req, res, [id]) => {
        checkJsonContentType(req);
        const s = sources.byId(id);
        const b = await retrieveBody(req);
        sendJson(
          res,
          await memories.retrieve(s, {
            slot: b.slot,
            state: b.state,
            taken: b.taken,
            scoreSoFar: b.score_so_far,
            validActions: b.valid_actions,
          }),
        );
      },
    ],
  ];
}

/** A retrieve request's body, checked. */
async function retrieveBody(req: IncomingMessage): Promise<z.infer<typeof RetrieveBody>> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readBody(req));
  } catch (e) {
    if (e instanceof RequestError) throw e;
    throw new RequestError(400, `retrieve: the body is not JSON (${(e as Error).message})`, null);
  }
  const body = RetrieveBody.safeParse(raw);
  if (!body.success)
    throw new RequestError(
      400,
      `retrieve: ${body.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ')}`,
      null,
    );
  return body.data;
}

/** Where the server listens (known once it does) and the URL it tells people to open. */
interface Access {
  bound: string;
  publicUrl: () => string;
}

/** One request: the Host/Origin check, the route its path and method name, and errors as JSON. */
async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  c: { routes: readonly Route[]; access: Access; log: (line: string) => void },
): Promise<void> {
  try {
    checkHost(req, c.access);
    const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    const path = decodePath(url.pathname);
    const matching = c.routes.filter(([, pattern]) => pattern.test(path));
    if (matching.length === 0) throw new RequestError(404, `no page or API route ${path}`, null);
    const route = matching.find(([method]) => method === req.method);
    if (!route) {
      res.setHeader('Allow', [...new Set(matching.map(([m]) => m))].join(', '));
      throw new RequestError(405, `${req.method} is not allowed on ${path}`, null);
    }
    await route[2](req, res, route[1].exec(path)!.slice(1), url.searchParams);
  } catch (e) {
    const status = e instanceof RequestError ? e.status : e instanceof MemoryRequestError ? 400 : e instanceof DataError ? 422 : 500;
    if (status === 500) c.log(`dashboard: ${req.method} ${req.url}: ${(e as Error).stack ?? e}`);
    if (!res.headersSent) sendJson(res, { error: (e as Error).message }, status);
    else res.end();
  }
}

/** The serve command's Host and Origin rules, in the dashboard's words (it has no --allowed-host). */
function checkHost(req: IncomingMessage, access: Access): void {
  try {
    checkAccess({ boundAddress: access.bound, allowedHosts: new Set() }, req);
  } catch (e) {
    if (e instanceof RequestError && e.message.startsWith('Host '))
      throw new RequestError(
        403,
        `Host ${JSON.stringify(req.headers.host ?? '')} does not name this dashboard: open it as ${access.publicUrl()} or with localhost`,
        null,
      );
    throw e;
  }
}

/** Listens on host:port; a port in use is said with what to do. */
async function listen(server: Server, host: string, port: number): Promise<void> {
  await new Promise<void>((resolvePromise, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(
        e.code === 'EADDRINUSE' ? new SourceError(`port ${port} on ${host} is in use: choose another with --port (0 picks a free one)`) : e,
      ),
    );
    server.listen(port, host, () => resolvePromise());
  });
}

type Handler = (req: IncomingMessage, res: ServerResponse, params: string[], query: URLSearchParams) => void | Promise<void>;
type Route = [method: 'GET' | 'POST', pattern: RegExp, handler: Handler];

const RetrieveBody = z.strictObject({
  slot: z.string().min(1),
  state: z.string().min(1).max(100_000),
  taken: z.array(z.string()).max(10_000).default([]),
  score_so_far: z.number().default(0),
  valid_actions: z.array(z.string()).max(100_000).default([]),
});

/** A percent-decoded path; one that decodes to a parent reference or a NUL is refused outright. */
function decodePath(raw: string): string {
  let path: string;
  try {
    path = decodeURIComponent(raw);
  } catch {
    throw new RequestError(400, `the path ${raw} is not valid percent-encoding`, null);
  }
  if (path.includes('\0') || path.split(/[\\/]/).includes('..'))
    throw new RequestError(400, `the path ${raw} leaves the dashboard (it names a parent folder)`, null);
  return path;
}

function integerParam(query: URLSearchParams, name: string, fallback: number, min: number, max: number): number {
  const raw = query.get(name);
  if (raw === null || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new RequestError(400, `${name} must be an integer from ${min} to ${max}, got "${raw}"`, name);
  return n;
}

function numberParam(query: URLSearchParams, name: string): number | null {
  const raw = query.get(name);
  if (raw === null || raw === '') return null;
  const n = Number(raw);
  if (!Number.isFinite(n)) throw new RequestError(400, `${name} must be a number, got "${raw}"`, name);
  return n;
}

function episodeFilter(query: URLSearchParams) {
  const source = query.get('source') || null;
  if (source !== null && !(TRAJECTORY_SOURCES as readonly string[]).includes(source))
    throw new RequestError(400, `source must be one of ${TRAJECTORY_SOURCES.join(', ')}, got "${source}"`, 'source');
  const mode = query.get('mode') || null;
  if (mode !== null && !(TRAJECTORY_MODES as readonly string[]).includes(mode))
    throw new RequestError(400, `mode must be one of ${TRAJECTORY_MODES.join(', ')}, got "${mode}"`, 'mode');
  const iteration = numberParam(query, 'iteration');
  const minScore = numberParam(query, 'min_score');
  const maxScore = numberParam(query, 'max_score');
  const task = query.get('task') || null;
  const tipsOnly = query.get('tips') === '1';
  const fileRaw = query.get('file');
  return {
    file: fileRaw === null || fileRaw === '' ? null : integerParam(query, 'file', 0, 0, 10_000),
    offset: integerParam(query, 'offset', 0, 0, Number.MAX_SAFE_INTEGER),
    limit: integerParam(query, 'limit', 100, 1, MAX_EPISODES_PER_PAGE),
    matches: (e: EpisodeSummary) =>
      (source === null || e.source === source) &&
      (mode === null || e.mode === mode) &&
      (task === null || e.task === task) &&
      (iteration === null || (e.iteration ?? e.trial) === iteration) &&
      (minScore === null || e.score >= minScore) &&
      (maxScore === null || e.score <= maxScore) &&
      (!tipsOnly || e.tipped_steps > 0),
  };
}

/** A summary as the page gets it: without the byte offsets the server keeps. */
function summaryOnly(e: EpisodeSummary): EpisodeSummary {
  const {
    line,
    source,
    iteration,
    trial,
    env_steps,
    checkpoint,
    task,
    variation,
    description,
    mode,
    score,
    success,
    steps,
    tipped_steps,
    followed_steps,
    has_reflection,
  } = e;
  return {
    line,
    source,
    iteration,
    trial,
    env_steps,
    checkpoint,
    task,
    variation,
    description,
    mode,
    score,
    success,
    steps,
    tipped_steps,
    followed_steps,
    has_reflection,
  };
}

function describeFile(f: { path: string; episodes: readonly unknown[]; problems: readonly string[]; cap: unknown }, index: number) {
  return { index, path: f.path, name: f.path.split(/[\\/]/).at(-1), episodes: f.episodes.length, problems: f.problems, cap: f.cap };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new RequestError(413, `the request body is over ${MAX_BODY_BYTES / 1024} KiB`, null);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

const SECURITY_HEADERS = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  // Vega compiles its expressions with Function(), hence 'unsafe-eval'; its SVG sets style attributes.
  'Content-Security-Policy':
    "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
};

function sendJson(res: ServerResponse, value: unknown, status = 200): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    ...SECURITY_HEADERS,
    'Content-Type': 'application/json; charset=utf-8',
    'Cache-Control': 'no-store',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}

function sendFile(res: ServerResponse, path: string, type: string, cache = 'no-cache'): void {
  const body = readFileSync(path);
  res.writeHead(200, { ...SECURITY_HEADERS, 'Content-Type': type, 'Cache-Control': cache, 'Content-Length': body.length });
  res.end(body);
}

/** A value computed from files, kept until one of them changes (size or modification time). */
class FileKeyedCache<T> {
  private readonly entries = new Map<string, { key: string; value: T }>();

  get(name: string, extraKey: string, files: readonly string[], compute: () => T): T {
    const key = extraKey + '|' + files.map((f) => (existsSync(f) ? `${statSync(f).size}:${statSync(f).mtimeMs}` : '-')).join('|');
    const hit = this.entries.get(name);
    if (hit && hit.key === key) return hit.value;
    const value = compute();
    this.entries.set(name, { key, value });
    return value;
  }
}
