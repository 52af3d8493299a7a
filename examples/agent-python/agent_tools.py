"""An agent written with the OpenAI Agents SDK for Python (`openai-agents`), on its default model (the
Responses API; AGENT_API=chat_completions for Chat Completions), whose moves are tool calls; run by
`empo2 train --agent "python agent_tools.py"`.

The task (EMPO2_TASK_JSON) names a room to find; the agent moves with one function tool, `move`, whose
`room` argument is one of the house's rooms, until it is in that room or has made three moves. The SDK
reads OPENAI_BASE_URL and OPENAI_API_KEY, which empo2 sets to the episode's base URL and key, so this
file holds nothing about empo2 but the last line it prints: the reward ("reward: 1").
"""
import asyncio
import json
import os
from typing import Literal

from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_default_openai_api, set_tracing_disabled
from agents.agent import StopAtTools

ROOMS = ("hall", "kitchen", "garden")
MAX_MOVES = 3


async def main() -> None:
    task = json.loads(os.environ["EMPO2_TASK_JSON"])
    goal = task["room"]
    moves: list[str] = []

    @function_tool
    def move(room: Literal["hall", "kitchen", "garden"]) -> str:
        """Go to a room of the house."""
        moves.append(room)
        return f"You are in the {room}." + (" You found it." if room == goal else "")

    agent = Agent(
        name="finder",
        instructions=f"Find the {goal}. Move between rooms with the move tool.",
        model=os.environ["EMPO2_MODEL"],
        tools=[move],
        model_settings=ModelSettings(tool_choice="required", max_tokens=int(os.environ.get("AGENT_MAX_TOKENS", "120"))),
        reset_tool_choice=False,
        # One run per move: the run ends at the tool's result, and the next move is a new run on the history.
        tool_use_behavior=StopAtTools(stop_at_tool_names=["move"]),
    )
    history: list = [{"role": "user", "content": "You are in the hall."}]
    stream = os.environ.get("AGENT_STREAM") == "1"
    while len(moves) < MAX_MOVES and goal not in moves:
        if stream:
            result = Runner.run_streamed(agent, history, max_turns=2, run_config=RunConfig(tracing_disabled=True))
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, history, max_turns=2, run_config=RunConfig(tracing_disabled=True))
        history = result.to_input_list()
    print(f"reward: {1 if goal in moves else 0}")


if __name__ == "__main__":
    set_tracing_disabled(True)
    if os.environ.get("AGENT_API") == "chat_completions":
        set_default_openai_api("chat_completions")
    asyncio.run(main())
