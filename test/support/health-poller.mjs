// Asks `GET <url>` every `everyMs` from its own process and writes one line per answer to `out`:
// {at, ms, status, phase}, `ms` the time from asking to the whole answer. Stops on SIGTERM.
import { appendFileSync, writeFileSync } from 'node:fs';

const [url, out, everyMs = '50'] = process.argv.slice(2);
writeFileSync(out, '');
let stop = false;
process.on('SIGTERM', () => (stop = true));
while (!stop) {
  const started = performance.now();
  let line;
  try {
    const res = await fetch(url);
    const body = await res.json();
    line = { at: Date.now(), ms: performance.now() - started, status: res.status, phase: body.phase ?? null };
  } catch (e) {
    line = { at: Date.now(), ms: performance.now() - started, status: 0, error: String(e.cause?.code ?? e.message) };
  }
  appendFileSync(out, JSON.stringify(line) + '\n');
  await new Promise((r) => setTimeout(r, Number(everyMs)));
}
