/**
 * Whether a request to a local HTTP server comes from where it should. A web page the user happens
 * to visit can send requests to a server on loopback (form posts need no CORS preflight), and with
 * DNS rebinding the page's own host name resolves to the server, so it can read the replies too.
 * So the Host header, and the Origin header when a browser sends one, must name the server: its
 * bound IP address (any IP when bound to every interface, any loopback address on loopback),
 * `localhost` on loopback, or a name it was given. `empo2 serve`, the dashboard and the WebShop
 * page share this check.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { isIP } from 'node:net';

export interface HostRules {
  /** The address the server is bound to (`0.0.0.0` or `::` for every interface). */
  boundAddress: string;
  /** Host names clients may use besides IP addresses (and localhost on a loopback server). */
  allowedHosts: ReadonlySet<string>;
}

/** Which header does not name the server, with its value as sent; null when the request may go on. */
export function foreignHeader(rules: HostRules, headers: IncomingHttpHeaders): { header: 'host' | 'origin'; value: string } | null {
  const host = headers.host;
  const hostName = host === undefined ? null : hostnameOf(`http://${host}`);
  if (hostName === null || !hostAllowed(rules, hostName)) return { header: 'host', value: host ?? '' };
  const origin = headers.origin;
  if (origin !== undefined) {
    const originHost = hostnameOf(origin);
    if (originHost === null || !hostAllowed(rules, originHost)) return { header: 'origin', value: origin };
  }
  return null;
}

/** The names a server bound to `host` answers to: those given, and `host` itself when it is a name. */
export function allowedHostNames(host: string | undefined, given: readonly string[] = []): Set<string> {
  const names = new Set(given.map((h) => h.toLowerCase()));
  if (host && !isIP(host)) names.add(host.toLowerCase());
  return names;
}

export function isLoopback(address: string): boolean {
  // URL parsing writes an IPv4-mapped loopback address in hex (::ffff:7f00:1).
  return /^127\./.test(address) || address === '::1' || /^::ffff:(127\.|7f)/i.test(address);
}

function hostnameOf(url: string): string | null {
  try {
    const name = new URL(url).hostname.toLowerCase();
    return name.startsWith('[') ? name.slice(1, -1) : name.replace(/\.$/, '');
  } catch {
    return null;
  }
}

function hostAllowed(rules: HostRules, name: string): boolean {
  if (rules.allowedHosts.has(name)) return true;
  const bound = rules.boundAddress;
  const everyInterface = bound === '0.0.0.0' || bound === '::';
  // An IP literal is never a rebound name: a page can only reach it from its own origin.
  if (isIP(name)) return everyInterface || name === bound || (isLoopback(bound) && isLoopback(name));
  return name === 'localhost' && (everyInterface || isLoopback(bound));
}
