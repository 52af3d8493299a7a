/**
 * `npx tsx bench/serve.ts [--skip-huge]`: how `empo2 serve` (the tests' tiny model, on loopback)
 * copes with requests that used to stall it. Prints wall-clock times over HTTP; asserts nothing.
 *   1. {"prompt": [[5]] × 2000, "max_tokens": 2000}: time to the answer (--skip-huge leaves it out)
 *   2. echo with log-probs of a 4,090-token prompt
 *   3. a chat message of 15 MB
 *   4. GET /v1/models while a greedy 2 × 2500-token generation runs, then how soon after its
 *      client hangs up a 1-token request is answered
 */
import { startServedFixture } from '../test/support/served-fixture.ts';

const skipHuge = process.argv.includes('--skip-huge');
const f = await startServedFixture('tiny');
const url = f.server.url;

async function timed(what: string, path: string, body: unknown, signal?: AbortSignal): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
  await res.text();
  const ms = performance.now() - t0;
  console.log(`${what}: HTTP ${res.status} in ${ms.toFixed(0)} ms`);
  return ms;
}

if (!skipHuge)
  await timed('2000 prompts × max_tokens 2000', '/v1/completions', { prompt: Array.from({ length: 2000 }, () => [5]), max_tokens: 2000 });

const text = 'Task: put the blue mug in the sink, then open the red box. '.repeat(200);
const ids = f.local.tokenizer.encode(text).slice(0, 4090);
await timed(`echo + logprobs, ${ids.length}-token prompt`, '/v1/completions', { prompt: ids, max_tokens: 0, echo: true, logprobs: 0 });

await timed('chat message of 15 MB', '/v1/chat/completions', {
  messages: [{ role: 'user', content: 'y'.repeat(15 << 20) }],
  max_tokens: 8,
});

const client = new AbortController();
const t0 = performance.now();
const long = fetch(url + '/v1/completions', {
  method: 'POST',
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ prompt: [[5], [6]], max_tokens: 2500, temperature: 0 }),
  signal: client.signal,
}).catch(() => null);
await new Promise((r) => setTimeout(r, 300));
const m0 = performance.now();
await (await fetch(url + '/v1/models')).text();
console.log(
  `GET /v1/models during the generation: ${(performance.now() - m0).toFixed(0)} ms (sent ${(m0 - t0).toFixed(0)} ms after it started)`,
);
client.abort();
await long;
await timed("a 1-token request right after the long one's client hung up", '/v1/completions', { prompt: [[5]], max_tokens: 1 });

await f.close();
