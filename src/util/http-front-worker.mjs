// The HTTP front's thread (./http-front.ts starts it): it owns the public socket, answers GET /health
// from the state the main thread posts, and forwards every other request to the server on the main
// thread, bodies and streamed answers piped both ways. Plain JavaScript, so that it loads as it is
// from src/ (under tsx or vitest) and from dist/, without a TypeScript loader in the thread.
import { Agent, createServer, request } from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';

/** @type {{ host: string; port: number; upstream: { host: string; port: number }; keepAliveMs: number; drainMs: number; health: object }} */
const o = workerData;
let health = o.health;

// Hop-by-hop headers belong to one connection, not the request. `expect`: this side has already
// answered 100-continue. `date`: the answer's own, not the time a blocked thread wrote it.
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'expect']);

function endToEnd(headers, drop) {
  const out = {};
  for (const [name, value] of Object.entries(headers)) if (!HOP.has(name) && name !== drop && value !== undefined) out[name] = value;
  return out;
}

function sendJson(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function answerHealth(req, res) {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('Allow', 'GET, HEAD');
    return sendJson(res, 405, {
      error: { message: `/health takes GET, not ${req.method}`, type: 'invalid_request_error', param: null, code: null },
    });
  }
  req.resume();
  sendJson(res, 200, { status: 'ok', ...health });
}

// Kept-alive loopback connections to the server, which never times them out (startHttpFront's
// caller sets its keepAliveTimeout to 0): one closed as the server wakes from a long block could meet a
// request going out on it. A new connection per request made each wait for the blocked thread to accept it.
const upstreamAgent = new Agent({ keepAlive: true });

function forward(req, res) {
  // When this thread received the request: a request that arrives while the server's thread is busy waits
  // here, and the gateway counts that wait as the model's, not the agent's (src/gateway/agent-clock.ts).
  const headers = { ...endToEnd(req.headers), 'x-empo2-received-at': String(Date.now()) };
  const up = request({
    host: o.upstream.host,
    port: o.upstream.port,
    method: req.method,
    path: req.url,
    headers,
    agent: upstreamAgent,
  });
  let answered = false;
  up.on('response', (upRes) => {
    answered = true;
    if (res.destroyed) return void upRes.destroy();
    res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, endToEnd(upRes.headers, 'date'));
    upRes.pipe(res);
    upRes.on('aborted', () => res.destroy());
    upRes.on('error', () => res.destroy());
  });
  up.on('error', (e) => {
    // After the answer began, an error is the request body meeting a server that answered without reading it all.
    if (answered) return;
    if (res.headersSent || res.destroyed) return void res.destroy();
    sendJson(res, 502, {
      error: { message: `the server behind this address did not answer: ${e.message}`, type: 'server_error', param: null, code: null },
    });
  });
  // A client that hangs up before its answer closes the forwarded request too, so the server sees it go.
  res.on('close', () => {
    if (!res.writableFinished) up.destroy();
  });
  req.pipe(up);
}

const server = createServer((req, res) => {
  inFlight++;
  res.once('close', () => {
    inFlight--;
    if (closing) setImmediate(settle);
  });
  if (closing) res.shouldKeepAlive = false;
  const path = (req.url ?? '/').split('?')[0];
  if (path === '/health' || path === '/health/') answerHealth(req, res);
  else forward(req, res);
});
// Longer than the idle time of clients' connection pools (undici follows the Keep-Alive hint this
// sends; httpx keeps 5 s): an idle connection is closed by the client first, never under a request
// it is sending. Node never applies it to a connection with a request in flight.
server.keepAliveTimeout = o.keepAliveMs;

// Answers on their way back (a 503 the stopping trainer wrote, a last stream) are let finish before a
// close cuts their connections, for at most o.drainMs: cutting them at once made a client read
// "socket hang up" where the server had answered.
let inFlight = 0;
let closing = null;
function settle() {
  server.closeIdleConnections();
  if (closing && inFlight === 0) closing();
}

parentPort.on('message', (m) => {
  if (m.type === 'health') health = m.value;
  else if (m.type === 'close' && !closing) {
    const cut = setTimeout(() => server.closeAllConnections(), o.drainMs);
    closing = () => {
      clearTimeout(cut);
      server.closeAllConnections();
    };
    server.close(() => {
      clearTimeout(cut);
      parentPort.postMessage({ type: 'closed' });
    });
    settle();
  }
});

server.once('error', (e) => parentPort.postMessage({ type: 'error', message: e.message, code: e.code }));
server.listen(o.port, o.host, () => parentPort.postMessage({ type: 'listening', address: server.address() }));
