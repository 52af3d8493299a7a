/**
 * Redirects followed only under a base URL, for the HTTP clients of remote environments and remote
 * engines: a server may move a route below its own base, but must not send a request (with its key
 * and payload) anywhere else.
 */

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
export const MAX_REDIRECTS = 5;

/** Whether `url` is the base URL or under it (same scheme, host and port; its path below the base's). */
export function underBase(url: URL, baseUrl: string): boolean {
  const base = new URL(baseUrl);
  const path = base.pathname.replace(/\/+$/, '');
  return url.origin === base.origin && (url.pathname === path || url.pathname.startsWith(`${path}/`));
}

/** A redirect that was not followed: to somewhere outside the base (`target` null when Location is no URL), or one too many. */
export interface RefusedRedirect {
  why: 'outside' | 'too-many';
  /** The URL that answered with the redirect. */
  at: string;
  status: number;
  location: string | null;
  target: URL | null;
}

function parseUrl(url: string, base: string): URL | null {
  try {
    return new URL(url, base);
  } catch {
    return null;
  }
}

/**
 * fetch, following redirects as fetch itself would (303, and 301/302 after a POST, go on as a GET
 * without the body and its Content-Type) but only under `o.baseUrl`; anything else throws what
 * `o.refuse` makes of it.
 */
export async function fetchUnderBase(
  url: string,
  init: RequestInit & { method: string },
  o: { baseUrl: string; refuse: (r: RefusedRedirect) => Error },
): Promise<Response> {
  let at = url;
  let request = init;
  for (let hop = 0; ; hop++) {
    const res = await fetch(at, { ...request, redirect: 'manual' });
    if (!REDIRECTS.has(res.status)) return res;
    await res.body?.cancel().catch(() => undefined);
    const location = res.headers.get('location');
    const target = location === null ? null : parseUrl(location, at);
    if (target === null || !underBase(target, o.baseUrl)) throw o.refuse({ why: 'outside', at, status: res.status, location, target });
    if (hop + 1 >= MAX_REDIRECTS) throw o.refuse({ why: 'too-many', at, status: res.status, location, target });
    if (res.status === 303 || ((res.status === 301 || res.status === 302) && request.method === 'POST')) {
      const { body: _body, headers, ...rest } = request;
      const kept = { ...(headers as Record<string, string>) };
      delete kept['Content-Type'];
      request = { ...rest, method: 'GET', headers: kept };
    }
    at = target.href;
  }
}
