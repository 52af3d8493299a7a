/**
 * An agent written with the official `openai` npm client, unchanged from how it would talk to OpenAI:
 * it plays a small word game (the task names a word; the agent has three tries to say it, told what
 * was wrong after each) and returns its reward, 1 for the word, else the share of its letters it got.
 * trainAgent() hands it the episode's baseURL and apiKey; nothing else in it knows about empo2.
 */
import OpenAI from 'openai';

export interface WordTask {
  word: string;
}

export interface AgentInput {
  baseURL: string;
  apiKey: string;
  model: string;
  task: WordTask;
  signal: AbortSignal;
}

/** 1 when `answer` holds `word`, else the share of the word's letters it holds. */
export function wordReward(answer: string, word: string): number {
  const a = answer.toLowerCase();
  if (a.includes(word.toLowerCase())) return 1;
  const letters = [...new Set(word.toLowerCase())];
  return letters.filter((l) => a.includes(l)).length / letters.length / 2;
}

/** The agent; `stream: true` reads each answer as a stream of chunks. */
export function wordAgent(o: { stream?: boolean; tries?: number } = {}) {
  return async ({ baseURL, apiKey, model, task, signal }: AgentInput): Promise<number> => {
    const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'system', content: 'You are playing a word game. Answer with one word.' },
      { role: 'user', content: `Say the word "${task.word}".` },
    ];
    let best = 0;
    for (let turn = 0; turn < (o.tries ?? 3); turn++) {
      let answer = '';
      if (o.stream) {
        const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, stream: true }, { signal });
        for await (const chunk of stream) answer += chunk.choices[0]?.delta?.content ?? '';
      } else {
        const r = await client.chat.completions.create({ model, messages, max_tokens: 8 }, { signal });
        answer = r.choices[0].message.content ?? '';
      }
      best = Math.max(best, wordReward(answer, task.word));
      if (best === 1) break;
      messages.push({ role: 'assistant', content: answer }, { role: 'user', content: `No. Say the word "${task.word}".` });
    }
    return best;
  };
}
