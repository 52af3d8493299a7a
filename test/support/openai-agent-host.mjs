// Plays the episodes a test hands it, in another process than the trainer, as an agent harness would:
// the `openai` client with maxRetries 0 and Node's fetch, whose kept-alive connections are shared by
// every episode. Reads one episode per stdin line ({id, baseURL, apiKey, model, task, calls, pauseMs});
// writes one result per stdout line ({id, ok, error?}). A pause before a call makes it arrive while
// the trainer samples the episodes that called on time.
import OpenAI from 'openai';
import { createInterface } from 'node:readline';

async function play(e) {
  const client = new OpenAI({ baseURL: e.baseURL, apiKey: e.apiKey, maxRetries: 0 });
  for (let k = 0; k < e.calls; k++) {
    if (e.pauseMs[k]) await new Promise((r) => setTimeout(r, e.pauseMs[k]));
    await client.chat.completions.create({
      model: e.model,
      messages: [{ role: 'user', content: `${e.task}, step ${k}` }],
      max_tokens: 3,
    });
  }
}

createInterface({ input: process.stdin }).on('line', (line) => {
  const e = JSON.parse(line);
  play(e).then(
    () => process.stdout.write(JSON.stringify({ id: e.id, ok: true }) + '\n'),
    (err) =>
      process.stdout.write(
        JSON.stringify({
          id: e.id,
          ok: false,
          error: `${err.constructor?.name}: ${err.message} (${err.cause?.code ?? err.cause?.message ?? ''})`,
        }) + '\n',
      ),
  );
});
