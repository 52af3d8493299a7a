"""An agent written with the `openai-agents` pip package on its default model (the Responses API), as
test/gateway-responses.test.ts runs it (`empo2 train --agent`'s path): a function tool whose argument is an
enum, calls forced with `tool_choice="required"` and kept forced (`reset_tool_choice=False`), a plain run of
two calls, then a streamed run of two more that continues it by `previous_response_id`. It prints what it
saw on stderr (JSON) and the reward last."""
import asyncio
import json
import os
import sys
from typing import Literal

from openai import AsyncOpenAI
from agents import Agent, ModelSettings, Runner, ToolsToFinalOutputResult, function_tool, set_default_openai_client, set_tracing_disabled

visited: list[str] = []


@function_tool
def move(room: Literal["hall", "kitchen", "garden"]) -> str:
    """Go to a room."""
    visited.append(room)
    return f"You are in the {room}, room {len(visited)}."


def every_second_call(_ctx, _results) -> ToolsToFinalOutputResult:
    done = len(visited) % 2 == 0
    return ToolsToFinalOutputResult(is_final_output=done, final_output=" ".join(visited) if done else None)


async def main() -> None:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(max_retries=0), use_for_tracing=False)
    agent = Agent(
        name="finder",
        instructions="Find the hat.",
        model=os.environ["EMPO2_MODEL"],
        tools=[move],
        model_settings=ModelSettings(tool_choice="required"),
        reset_tool_choice=False,
        tool_use_behavior=every_second_call,
    )
    first = await Runner.run(agent, "You are in the hall.")
    second = Runner.run_streamed(agent, "Go on.", previous_response_id=first.last_response_id)
    events = []
    async for e in second.stream_events():
        if e.type == "raw_response_event":
            events.append(e.data.type)
    seen = {"visited": visited, "first": first.final_output, "second": second.final_output, "events": events}
    print(json.dumps(seen), file=sys.stderr)
    print("reward: 1")


if __name__ == "__main__":
    asyncio.run(main())
