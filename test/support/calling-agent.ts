import type { AgentInput } from '../../src/index.ts';

/**
 * An agent for judge tests: its k-th episode (counted from 0) makes 1 + (k mod `spread`) plain chat calls
 * through the gateway, so that the episodes of a group differ and a judge can tell them apart.
 */
export function callingAgent(spread: number) {
  let played = 0;
  return async ({ baseURL, apiKey, model, task, signal }: AgentInput<string>): Promise<void> => {
    const n = 1 + (played++ % spread);
    for (let i = 0; i < n; i++) {
      const res = await fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: `${task} (${i})` }], max_tokens: 4 }),
        signal,
      });
      if (res.status !== 200) throw new Error(`gateway answered ${res.status}`);
    }
  };
}
