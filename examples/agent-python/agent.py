"""An agent written with the `openai` pip package, run by `empo2 train --agent "python agent.py"`.

It plays the word game of examples/agent-openai: the task (EMPO2_TASK, JSON) names a word, the agent
has three tries to say it. The OpenAI client reads OPENAI_BASE_URL and OPENAI_API_KEY, which empo2
sets to the episode's base URL and key, so this file holds nothing about empo2 but the last line it
prints: the reward ("reward: 0.5").
"""
import json
import os

from openai import OpenAI


def word_reward(answer: str, word: str) -> float:
    a = answer.lower()
    if word.lower() in a:
        return 1.0
    letters = set(word.lower())
    return sum(1 for l in letters if l in a) / len(letters) / 2


def main() -> None:
    task = json.loads(os.environ["EMPO2_TASK_JSON"])
    word = task["word"]
    client = OpenAI(max_retries=0)
    model = os.environ["EMPO2_MODEL"]
    stream = os.environ.get("AGENT_STREAM") == "1"
    messages = [
        {"role": "system", "content": "You are playing a word game. Answer with one word."},
        {"role": "user", "content": f'Say the word "{word}".'},
    ]
    best = 0.0
    for _ in range(3):
        if stream:
            answer = ""
            for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=8, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    answer += chunk.choices[0].delta.content
        else:
            r = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
            answer = r.choices[0].message.content or ""
        best = max(best, word_reward(answer, word))
        if best == 1.0:
            break
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f'No. Say the word "{word}".'}]
    print(f"reward: {best}")


if __name__ == "__main__":
    main()
