// The dashboard's JSON API. Every failure becomes an Error carrying the server's message, which
// names the file (and line) it could not read.

async function answer(res, url) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    // Not JSON: the status line says what there is to say.
  }
  if (!res.ok) throw new Error(body?.error ?? `${url}: HTTP ${res.status}`);
  return body;
}

export async function getJson(url) {
  return answer(await fetch(url, { cache: 'no-store' }), url);
}

export async function postJson(url, value) {
  return answer(await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(value) }), url);
}

export const api = {
  sources: () => getJson('/api/sources'),
  configDefaults: () => getJson('/api/config-defaults'),
  source: (id) => getJson(`/api/sources/${id}`),
  metrics: (id) => getJson(`/api/sources/${id}/metrics`),
  trajectories: (id, query) => getJson(`/api/sources/${id}/trajectories?${new URLSearchParams(query)}`),
  episode: (id, file, line) => getJson(`/api/sources/${id}/episodes/${file}/${line}`),
  memory: (id, query) => getJson(`/api/sources/${id}/memory?${new URLSearchParams(query)}`),
  retrieve: (id, query) => postJson(`/api/sources/${id}/retrieve`, query),
};
