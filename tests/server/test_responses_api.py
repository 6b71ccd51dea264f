"""The Responses API end to end, judged by the openai SDK's own models and stream helper."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from tests.conftest import Served, fake

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
TWO_CALLS = json.dumps(
    {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Oslo"}},
            {"name": "get_time", "arguments": {}},
        ]
    }
)


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "gemini-2.5-flash"])
async def test_text(strict: openai.AsyncOpenAI, model: str) -> None:
    r = await strict.responses.create(
        model=model, input="hello " + fake(answer="Hi there"), instructions="Be brief."
    )
    Response.model_validate(r.model_dump())
    assert r.status == "completed" and r.id.startswith("resp_")
    assert r.output_text == "Hi there"
    assert r.output[0].type == "message"
    assert r.usage is not None and r.usage.input_tokens > 0


async def test_function_calls_then_follow_up(strict: openai.AsyncOpenAI) -> None:
    r = await strict.responses.create(
        model="claude-sonnet-4-6",
        input=[{"role": "user", "content": "weather and time " + fake(answer=TWO_CALLS)}],
        tools=[WEATHER, TIME],  # type: ignore[list-item]
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].arguments) == {"city": "Oslo"}
    assert calls[0].call_id.startswith("call_") and calls[0].call_id != calls[1].call_id
    # the next turn: the calls and their outputs reach the CLI as turns tied by call id
    follow = await strict.responses.create(
        model="claude-sonnet-4-6",
        input=[
            {"role": "user", "content": "weather and time"},
            *[c.model_dump(exclude_none=True) for c in calls],
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
            {"type": "function_call_output", "call_id": calls[1].call_id, "output": "noon"},
            {"role": "user", "content": fake(echo_prompt=True)},
        ],
        tools=[WEATHER, TIME],  # type: ignore[list-item]
    )
    prompt = follow.output_text
    assert f'role="assistant_tool_call" name="get_weather" id="{calls[0].call_id}"' in prompt
    assert f'role="tool_result" id="{calls[0].call_id}" name="get_weather">sunny<' in prompt
    assert f'role="tool_result" id="{calls[1].call_id}" name="get_time">noon<' in prompt


@pytest.mark.parametrize("answer", ["streamed text here", TWO_CALLS])
async def test_stream_equals_non_stream(strict: openai.AsyncOpenAI, answer: str) -> None:
    kwargs: Any = {
        "model": "gemini-2.5-flash",
        "input": "go " + fake(answer=answer, chunks=6),
        "tools": [WEATHER, TIME],
    }
    full = await strict.responses.create(**kwargs)
    types: list[str] = []
    async with strict.responses.stream(**kwargs) as stream:
        async for event in stream:
            types.append(event.type)
        final = await stream.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"

    def essence(r: Response) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        for o in r.output:
            if o.type == "message":
                out.append(("message", o.status, *(c.text for c in o.content)))  # type: ignore[union-attr]
            elif o.type == "function_call":
                out.append(("function_call", str(o.status), o.name, o.arguments))
        return out

    assert essence(final) == essence(full) and essence(full)
    assert final.output_text == full.output_text


async def test_stream_event_order_for_text(served: Served) -> None:
    import aiohttp

    body = {"model": "claude-sonnet-4-6", "input": fake(answer="a b c", chunks=3), "stream": True}
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{served.base_url}/responses", json=body) as resp,
    ):
        raw = (await resp.read()).decode()
    events = [json.loads(b.split("data: ", 1)[1]) for b in raw.strip().split("\n\n")]
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert raw.startswith("event: response.created\ndata: ")


@pytest.mark.parametrize(
    ("kwargs", "status", "param"),
    [
        ({"previous_response_id": "resp_1"}, 400, "previous_response_id"),
        ({"tool_choice": {"type": "web_search"}}, 400, "tool_choice.type"),
        ({"model": "gpt-4o"}, 404, "model"),
        ({"input": [{"type": "computer_call_output"}]}, 400, "input[0].type"),
    ],
)
async def test_bad_requests(
    strict: openai.AsyncOpenAI, kwargs: dict[str, Any], status: int, param: str
) -> None:
    args: dict[str, Any] = {"model": "claude-sonnet-4-6", "input": "hi", **kwargs}
    with pytest.raises(openai.APIStatusError) as info:
        await strict.responses.create(**args)
    assert info.value.status_code == status
    assert info.value.body["param"] == param  # type: ignore[index]


async def test_cli_failure(strict: openai.AsyncOpenAI) -> None:
    bad = fake(is_error=True, api_error_status=429, error_message="API Error: 429 slow down")
    with pytest.raises(openai.RateLimitError):
        await strict.responses.create(model="claude-sonnet-4-6", input=bad)
    with pytest.raises(openai.APIError, match="429"):
        async with strict.responses.stream(model="claude-sonnet-4-6", input=bad) as stream:
            async for _ in stream:
                pass
