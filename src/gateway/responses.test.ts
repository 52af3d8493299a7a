/**
 * The gateway's Responses API with the real `openai` client, in episodes of one lockstep batch:
 * `responses.retrieve(id)` returns the episode's own response as it was answered, and a 404 in OpenAI's
 * shape for an id it does not have (unknown, or another episode's while that episode plays);
 * `include: ["message.output_text.logprobs"]` gives the log-probs the episode's step recorded.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { loadConfig } from '../config/load.ts';
import { environmentCorpus } from '../envs/index.ts';
import { createEngine, initBackend } from '../policy/index.ts';
import type { PolicyEngine } from '../policy/types.ts';
import type { Episode } from '../run/records.ts';
import { rolloutSettings } from '../trainer/rollout.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { openAgentPlay, type AgentInput } from './index.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=5', 'rollout.max_tokens=6', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

const clientOf = (input: AgentInput) => new OpenAI({ baseURL: input.baseURL, apiKey: input.apiKey, maxRetries: 0 });

/** Plays one lockstep batch of `agents`, one episode each. */
async function playBatch(agents: ((input: AgentInput) => Promise<number>)[]): Promise<Episode[]> {
  const play = await openAgentPlay(cfg, {
    agent: (input) => agents[input.task as number](input),
    taskOf: (job) => job.variation,
    batchWaitMs: 50,
    log: () => {},
  });
  try {
    const settings = rolloutSettings(cfg, false, 77);
    const jobs = agents.map((_, k) => ({ task: 'agent', variation: k, group: k }));
    const { episodes } = await play.player(engine, jobs, { settingsFor: () => settings, evaluation: false });
    expect(play.gateway.openRequests()).toBe(0);
    return episodes;
  } finally {
    await play.close();
  }
}

/** The log-probs of a response's text (OpenAI always writes the field: `[]` unless asked for). */
function logprobsOf(r: OpenAI.Responses.Response): OpenAI.Responses.ResponseOutputText.Logprob[] {
  const part = (r.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
  if (!part.logprobs) throw new Error(`no logprobs field in ${JSON.stringify(part)}`);
  return part.logprobs;
}

/** What a call that should fail threw. */
const failure = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
  );

describe("the gateway's Responses API with the openai client", () => {
  it("GET responses/{id} retrieves the episode's own response as answered; an unknown id, or another episode's, is a 404", async () => {
    let otherId!: (id: string) => void;
    const otherCreated = new Promise<string>((r) => (otherId = r));
    let checked!: () => void;
    const done = new Promise<void>((r) => (checked = r));
    const seen: Record<string, unknown> = {};
    const episodes = await playBatch([
      async (input) => {
        const client = clientOf(input);
        const created = await client.responses.create({ model: input.model, input: 'You are in the hall.' });
        seen.retrieved = await client.responses.retrieve(created.id);
        seen.created = created;
        seen.unknown = await failure(client.responses.retrieve('resp_0123'));
        seen.others = await failure(client.responses.retrieve(await otherCreated));
        const raw = await fetch(`${input.baseURL}/responses/resp_0123`, { headers: { Authorization: `Bearer ${input.apiKey}` } });
        seen.raw = { status: raw.status, body: await raw.json() };
        checked();
        return 1;
      },
      async (input) => {
        const created = await clientOf(input).responses.create({ model: input.model, input: 'You are in the kitchen.' });
        otherId(created.id);
        await done; // still playing while the other episode asks for its response
        return 1;
      },
    ]);
    expect(episodes.map((e) => [e.outcome, e.steps.length])).toEqual([
      ['success', 1],
      ['success', 1],
    ]);
    expect(seen.retrieved).toEqual(seen.created);
    expect(logprobsOf(seen.created as OpenAI.Responses.Response)).toEqual([]);
    for (const name of ['unknown', 'others']) {
      expect(seen[name], name).toBeInstanceOf(OpenAI.NotFoundError);
      expect((seen[name] as InstanceType<typeof OpenAI.APIError>).status, name).toBe(404);
    }
    expect(seen.raw).toEqual({
      status: 404,
      body: {
        error: {
          message: expect.stringMatching(
            /^Response with id 'resp_0123' not found\. \(the empo2 gateway keeps the last 64 stored responses of episode ep\d+-\w+, for it alone\)$/,
          ),
          type: 'invalid_request_error',
          param: 'response_id',
          code: null,
        },
      },
    });
  }, 60_000);

  it('include message.output_text.logprobs: the log-probs the episode recorded for its step, plain and streamed', async () => {
    const include: OpenAI.Responses.ResponseIncludable[] = ['message.output_text.logprobs'];
    const got: {
      plain?: OpenAI.Responses.Response;
      streamed?: OpenAI.Responses.Response;
      deltas: OpenAI.Responses.ResponseTextDeltaEvent[];
    } = {
      deltas: [],
    };
    const [episode] = await playBatch([
      async (input) => {
        const client = clientOf(input);
        got.plain = await client.responses.create({ model: input.model, input: 'You are in the hall.', include });
        const stream = client.responses.stream({ model: input.model, input: 'You are in the kitchen.', include });
        stream.on('response.output_text.delta', (e) => got.deltas.push(e));
        got.streamed = await stream.finalResponse();
        return 1;
      },
    ]);
    expect(episode.steps).toHaveLength(2);
    const [first, second] = episode.steps;
    // No tools: every sampled token is the text's, its log-prob the one recorded for the update.
    expect(logprobsOf(got.plain!).map((l) => l.logprob)).toEqual(first.logprobs);
    expect(logprobsOf(got.streamed!).map((l) => l.logprob)).toEqual(second.logprobs);
    expect(got.deltas.flatMap((d) => d.logprobs.map((l) => l.logprob))).toEqual(second.logprobs);
    expect(got.deltas.map((d) => d.delta).join('')).toBe(got.streamed!.output_text);
    for (const l of logprobsOf(got.plain!)) expect(l.top_logprobs).toEqual([]);
  }, 60_000);
});
