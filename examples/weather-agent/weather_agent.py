"""A small agent on the OpenAI SDK: one tool (the weather), one loop.

It knows nothing of cli-proxy: point its client at a gateway (``base_url``) and any of the
Claude Code, Gemini or Codex CLIs is its model. The tests replay recorded CLI runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

MODEL = os.environ.get("WEATHER_AGENT_MODEL", "claude-sonnet-4-6")

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def weather_service(city: str) -> str:
    """Stands in for a real weather API. Like many, its answer says where it came from:
    a URL with the caller's API key and a local cache path (the kind of thing a recording
    must not keep; cli-proxy scrubs both)."""
    key = os.environ.get("WEATHER_API_KEY", "")
    cache = Path.home() / ".cache" / "weather-agent" / f"{city.lower()}.json"
    return json.dumps(
        {
            "city": city,
            "temp_c": 18,
            "sky": "clear",
            "source": f"https://weather.example/v1/now?city={city}&key={key}",
            "cache": str(cache),
        }
    )


def run(
    client: openai.OpenAI,
    question: str,
    tool: Callable[[str], str] = weather_service,
    max_steps: int = 4,
) -> str:
    """Ask, run the tool calls the model makes, return its final answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a weather assistant. Use get_weather."},
        {"role": "user", "content": question},
    ]
    for _ in range(max_steps):
        reply = (
            client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
            .choices[0]
            .message
        )
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            city = json.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": tool(city)})
    raise RuntimeError(f"no answer after {max_steps} steps")
