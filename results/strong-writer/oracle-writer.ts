/**
 * THE STAND-IN STRONG TIP WRITER (issue #89's study): an OpenAI-compatible server that answers the
 * reflection prompt (src/memory/reflector.ts `reflectionPrompt`) with a tip written from the built-in
 * environment's own scripted solver, not by a language model. No strong model can be downloaded here; this
 * stands where one would be, over the same API (`memory.reflector: openai`, `empo2 memory-proxy
 * --reflector`), and every result that uses it says so.
 *
 * How it writes a tip: the prompt names the task and shows the trajectory; the episode is found among the
 * built-in environment's (family, variation) pairs by its task text and, where that is not unique, by the
 * first observation the prompt shows: step 1's (equal to it, or, where an agent's message holds more than
 * the observation, containing it), else the line under the task, where an episode's description (the
 * memory proxy's `POST /episodes` `description`) names where it starts. A trajectory longer than the
 * prompt's last 12 steps shows no step 1, and no task text of power, clue or unlock is unique, so such an
 * episode gets a tip only when its description gives the first observation. The tip is the solver's plan from the start,
 * "To <task>: a, then b, then c.", cut to the reflection's word limit. An episode it cannot identify gets
 * an empty answer, which the writer's caller stores as no tip (counted as skipped in metrics.jsonl).
 *
 *   npx tsx results/strong-writer/oracle-writer.ts [--port 8089] [--tasks power,clue,unlock]
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { createEnv, type Env } from '../../src/index.ts';

/** The reflection's word limit (src/memory/reflector.ts MAX_TIP_WORDS). */
const MAX_WORDS = 100;

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim();

interface Episode {
  family: string;
  variation: number;
  firstObservation: string;
}

/** The built-in episodes of `tasks` (every split), indexed by task text. */
async function indexEpisodes(env: Env): Promise<Map<string, Episode[]>> {
  const byTask = new Map<string, Episode[]>();
  for (const family of env.tasks())
    for (const split of ['train', 'dev', 'test'] as const)
      for (const variation of env.variations(family, split)) {
        const r = await env.reset(family, variation);
        const list = byTask.get(r.task) ?? [];
        list.push({ family, variation, firstObservation: oneLine(r.observation) });
        byTask.set(r.task, list);
      }
  return byTask;
}

/** The solver's actions from the start of `e` (at most its step limit). */
async function plan(env: Env, e: Episode): Promise<string[]> {
  await env.reset(e.family, e.variation);
  const actions: string[] = [];
  for (let t = 0; t < env.maxSteps(e.family) && !env.done(); t++) {
    const a = env.oracleAction?.() ?? null;
    if (a === null) break;
    actions.push(a);
    await env.step(a);
  }
  return actions;
}

/** The tip for a reflection prompt, or '' where the episode cannot be identified. */
export async function writeTip(env: Env, index: Map<string, Episode[]>, prompt: string): Promise<string> {
  const task = /^Task: (.*)$/m.exec(prompt)?.[1];
  if (task === undefined) return '';
  const candidates = index.get(task) ?? [];
  // The first observation: step 1's, else the line under the task (an episode's description that names where it starts).
  const first = /^Step 1: you saw "(.*)" and did "/m.exec(prompt)?.[1] ?? /^Task: .*\n(?!Your trajectory)(.+)$/m.exec(prompt)?.[1];
  const exact = candidates.filter((c) => c.firstObservation === first);
  // An agent's step 1 may show the observation inside its message ("Task: ...", then it, then the valid actions).
  const within = candidates.filter((c) => first !== undefined && first.includes(c.firstObservation));
  const found = candidates.length === 1 ? candidates : exact.length === 1 ? exact : within;
  if (found.length !== 1) return '';
  const actions = await plan(env, found[0]);
  if (actions.length === 0) return '';
  const words = `To ${task.replace(/\.$/, '')}: ${actions.join(', then ')}.`.split(' ');
  return words.length <= MAX_WORDS ? words.join(' ') : `${words.slice(0, MAX_WORDS).join(' ')} ...`;
}

export interface OracleWriter {
  url: string;
  /** Prompts answered, and those answered with a tip. */
  stats(): { asked: number; written: number };
  close(): Promise<void>;
}

/** Starts the writer on 127.0.0.1:`port` (0: a free port) for the built-in tasks `tasks` (null: all). */
export async function startOracleWriter(o: { port: number; tasks: string[] | null }): Promise<OracleWriter> {
  const env = await createEnv({ name: 'builtin', tasks: o.tasks });
  const index = await indexEpisodes(env);
  let asked = 0;
  let written = 0;
  let queue = Promise.resolve();
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      const answer = (status: number, json: unknown) => {
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(json));
      };
      if (req.method === 'GET' && req.url?.endsWith('/models'))
        return answer(200, { object: 'list', data: [{ id: 'oracle-writer', object: 'model', owned_by: 'empo2-stand-in' }] });
      if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions'))
        return answer(404, { error: { message: `no route ${req.method} ${req.url}`, type: 'not_found_error', param: null, code: null } });
      let messages: { role: string; content: string }[];
      try {
        messages = (JSON.parse(body) as { messages: { role: string; content: string }[] }).messages;
      } catch (e) {
        return answer(400, {
          error: { message: `not JSON: ${(e as Error).message}`, type: 'invalid_request_error', param: null, code: null },
        });
      }
      const prompt = [...messages].reverse().find((m) => m.role === 'user')?.content ?? '';
      // One environment instance: the prompts are answered one after another.
      queue = queue.then(async () => {
        asked++;
        const tip = await writeTip(env, index, typeof prompt === 'string' ? prompt : '');
        if (tip) written++;
        answer(200, {
          id: `chatcmpl-oracle-${asked}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: 'oracle-writer',
          system_fingerprint: 'stand-in: the built-in environment solver, not a model',
          choices: [{ index: 0, message: { role: 'assistant', content: tip }, finish_reason: 'stop', logprobs: null }],
          usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
        });
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(o.port, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    stats: () => ({ asked, written }),
    close: async () => {
      await new Promise((r) => server.close(r));
      await env.close();
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { port: { type: 'string', default: '8089' }, tasks: { type: 'string' } } });
  const w = await startOracleWriter({ port: Number(values.port), tasks: values.tasks ? values.tasks.split(',') : null });
  console.log(`oracle writer (a STAND-IN: tips from the built-in solver, not a model) at ${w.url}`);
  process.on('SIGINT', () => void w.close().then(() => process.exit(0)));
}
