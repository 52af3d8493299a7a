/**
 * Who may drive the server. A web page the user happens to visit can send requests to a server on
 * loopback: "simple" cross-origin POSTs (text/plain bodies) need no CORS preflight, and with DNS
 * rebinding the page's own host name resolves to the server, so it can read the replies too. So:
 * POST bodies must be declared JSON (which a cross-origin page cannot send without a preflight this
 * server never grants), the Host header (and Origin, when sent) must name this server
 * (util/host-check.ts), and an optional bearer token must match.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { foreignHeader, isLoopback, type HostRules } from '../util/host-check.ts';
import { RequestError } from './protocol.ts';

export interface AccessRules extends HostRules {
  /** When set, every request must carry `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
}

/** Throws the RequestError that refuses `req`, if any rule does. */
export function checkAccess(rules: AccessRules, req: IncomingMessage): void {
  const foreign = foreignHeader(rules, req.headers);
  if (foreign?.header === 'host') {
    throw new RequestError(
      403,
      `Host ${JSON.stringify(foreign.value)} does not name this server (bound to ${rules.boundAddress}); use its IP address${isLoopback(rules.boundAddress) ? ' or localhost' : ''}, or start it with --allowed-host NAME`,
      null,
      'permission_error',
    );
  }
  if (foreign?.header === 'origin') {
    throw new RequestError(
      403,
      `requests from web pages of another origin (${JSON.stringify(foreign.value)}) are refused`,
      null,
      'permission_error',
    );
  }
  if (rules.apiKey !== undefined) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!m || !sameSecret(m[1], rules.apiKey)) {
      throw new RequestError(
        401,
        'this server needs an API key: send "Authorization: Bearer <key>" with the key it was started with (--api-key or $EMPO2_API_KEY)',
        null,
        'invalid_request_error',
        'invalid_api_key',
      );
    }
  }
}

/** POST bodies must be declared JSON: browsers send other types cross-origin without asking. */
export function checkJsonContentType(req: IncomingMessage): void {
  const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
  if (type !== 'application/json') {
    throw new RequestError(
      415,
      `the request body must be sent with "Content-Type: application/json" (got ${JSON.stringify(req.headers['content-type'] ?? 'none')})`,
      null,
    );
  }
}

function sameSecret(given: string, expected: string): boolean {
  // Digests have equal lengths, so the comparison takes the same time whatever is sent.
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}
