"""A tool-calling agent written with the `openai` pip package, as test/gateway-tools.test.ts runs it
(`empo2 train --agent`'s path): two forced calls (a named function, then "required"), each result sent
back as a `tool` message, the assistant turns sent back as the pip client re-serialises them
(`model_dump`), the second call streamed and its tool-call deltas put together as agents do. It prints
what it saw on stderr (JSON) and the reward last."""
import json
import os
import sys

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "parameters": {"type": "object", "properties": {"room": {"type": "string", "enum": ["hall", "kitchen"]}}, "required": ["room"]},
        },
    },
    {"type": "function", "function": {"name": "look", "parameters": {"type": "object", "properties": {}}}},
]


def main() -> None:
    client = OpenAI(max_retries=0)
    model = os.environ["EMPO2_MODEL"]
    messages = [{"role": "user", "content": "Find the hat."}]
    r = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "move"}})
    first = r.choices[0]
    call = first.message.tool_calls[0]
    messages.append(first.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "You are in the " + json.loads(call.function.arguments)["room"] + "."})
    calls = {}
    finish = None
    for chunk in client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice="required", stream=True):
        for choice in chunk.choices:
            for d in choice.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                c["id"] = d.id or c["id"]
                if d.function:
                    c["name"] += d.function.name or ""
                    c["arguments"] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    print(json.dumps({"first": [first.finish_reason, call.function.name, call.function.arguments], "second": [finish, calls[0]["name"], calls[0]["arguments"]]}), file=sys.stderr)
    print("reward: 1")


if __name__ == "__main__":
    main()
