"""Answers a client can trust: a tool call reaches the client only when its function is in
``tools``, one call at most with ``parallel_tool_calls: false``, and a cut-off call is never
returned as a finished one (both backends, stream and not, through the openai SDK)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.conftest import Served, fake
from tests.server.test_chat import TIME, WEATHER, user

MODELS = ["claude-sonnet-4-6", "gemini-2.5-flash"]
CUT = '{"tool_call":{"name":"get_weather","arguments":{"city":"Par'
TWO = json.dumps(
    {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Oslo"}},
            {"name": "get_time", "arguments": {"tz": "CET"}},
        ]
    }
)
UNKNOWN_THEN_KNOWN = json.dumps(
    {
        "tool_calls": [
            {"name": "delete_everything", "arguments": {}},
            {"name": "get_weather", "arguments": {"city": "Rome"}},
        ]
    }
)


class Streamed:
    """A streamed answer accumulated the way OpenAI clients do (indexes, concatenation)."""

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.calls: dict[int, dict[str, str]] = {}

    def feed(self, chunk: Any) -> None:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                call = self.calls.setdefault(tc.index, {"name": "", "arguments": ""})
                call["name"] += tc.function.name or "" if tc.function else ""
                call["arguments"] += tc.function.arguments or "" if tc.function else ""
            self.finish_reason = choice.finish_reason or self.finish_reason

    @property
    def names(self) -> list[str]:
        assert sorted(self.calls) == list(range(len(self.calls)))  # contiguous from 0
        return [self.calls[i]["name"] for i in sorted(self.calls)]


async def both(served: Served, model: str, answer: str, **kw: Any) -> tuple[Any, Streamed]:
    """(non-streaming completion, streamed answer)."""
    args: dict[str, Any] = {"model": model, "messages": user("go" + fake(answer=answer)), **kw}
    plain = await served.client.chat.completions.create(**args)
    streamed = Streamed()
    async for chunk in await served.client.chat.completions.create(stream=True, **args):
        streamed.feed(chunk)
    return plain, streamed


@pytest.mark.parametrize("model", MODELS)
async def test_a_cut_off_call_is_not_returned_as_a_finished_one(served: Served, model: str) -> None:
    plain, streamed = await both(served, model, CUT, tools=[WEATHER])
    assert plain.choices[0].finish_reason == "length"
    assert not plain.choices[0].message.tool_calls  # no half-made call
    assert streamed.finish_reason == "length"
    # issue 24 (D3): streamed, not even the call's start (it was held until complete)
    assert streamed.calls == {}


@pytest.mark.parametrize("model", MODELS)
async def test_responses_api_leaves_a_cut_off_call_out(served: Served, model: str) -> None:
    """The Responses API too: a cut-off answer is ``incomplete`` and its final output holds
    no half-made ``function_call`` (the Agents SDK runs every call in the final output)."""
    tool = {"type": "function", **WEATHER["function"]}
    args: dict[str, Any] = {"model": model, "input": "go" + fake(answer=CUT), "tools": [tool]}
    plain = await served.client.responses.create(**args)
    assert plain.status == "incomplete"
    assert plain.incomplete_details is not None
    assert plain.incomplete_details.reason == "max_output_tokens"
    assert not [item for item in plain.output if item.type == "function_call"]
    final: Any = None
    done_items: list[Any] = []
    # (as with OpenAI, the stream ends in response.incomplete, not response.completed)
    async for event in await served.client.responses.create(stream=True, **args):
        if event.type == "response.output_item.done":
            done_items.append(event.item)
        if event.type == "response.function_call_arguments.done":
            pytest.fail("a cut-off call was reported as done")
        if event.type == "response.incomplete":
            final = event.response
    assert final is not None and final.status == "incomplete"
    assert not [item for item in final.output if item.type == "function_call"]
    # issue 24 (D3): the call was held until complete, so no item of it was ever sent
    assert not [item for item in done_items if item.type == "function_call"]


@pytest.mark.parametrize("model", MODELS)
async def test_only_the_cut_off_call_is_left_out(served: Served, model: str) -> None:
    """Issue 24 (D3): cut inside the second call, the first (complete) reaches the client,
    the second never does: chat and Responses, streaming and not."""
    cut = TWO[: TWO.index('"tz": "C') + len('"tz": "C')]
    plain, streamed = await both(served, model, cut, tools=[WEATHER, TIME])
    assert plain.choices[0].finish_reason == streamed.finish_reason == "length"
    calls = plain.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", '{"city": "Oslo"}')
    ]
    assert [(c["name"], c["arguments"]) for c in streamed.calls.values()] == [
        ("get_weather", '{"city": "Oslo"}')
    ]
    tools = [{"type": "function", **t["function"]} for t in (WEATHER, TIME)]
    args: dict[str, Any] = {"model": model, "input": "go" + fake(answer=cut), "tools": tools}
    final = await served.client.responses.create(**args)
    streamed_final: Any = None
    async for event in await served.client.responses.create(stream=True, **args):
        if event.type == "response.output_item.added":
            assert event.item.type != "function_call" or event.item.name == "get_weather"
        if event.type == "response.incomplete":
            streamed_final = event.response
    for resp in (final, streamed_final):
        assert resp.status == "incomplete"
        assert [(i.name, i.arguments) for i in resp.output if i.type == "function_call"] == [
            ("get_weather", '{"city": "Oslo"}')
        ]


@pytest.mark.parametrize("model", MODELS)
async def test_parallel_false_returns_at_most_one_call(served: Served, model: str) -> None:
    tools = [WEATHER, TIME]
    plain, streamed = await both(served, model, TWO, tools=tools, parallel_tool_calls=False)
    assert [c.function.name for c in plain.choices[0].message.tool_calls] == ["get_weather"]
    assert plain.choices[0].finish_reason == streamed.finish_reason == "tool_calls"
    assert streamed.names == ["get_weather"]
    plain, _ = await both(served, model, TWO, tools=tools)
    assert len(plain.choices[0].message.tool_calls) == 2


@pytest.mark.parametrize("model", MODELS)
async def test_a_call_to_a_function_not_in_tools_never_reaches_the_client(
    served: Served, model: str
) -> None:
    plain, streamed = await both(served, model, UNKNOWN_THEN_KNOWN, tools=[WEATHER])
    calls = plain.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Rome"})
    ]
    assert streamed.names == ["get_weather"]
    assert json.loads(streamed.calls[0]["arguments"]) == {"city": "Rome"}
    only = '{"tool_call":{"name":"delete_everything","arguments":{}}}'
    for stream in (False, True):
        with pytest.raises(openai.InternalServerError) as info:
            await served.client.chat.completions.create(
                model=model, messages=user("go" + fake(answer=only)), tools=[WEATHER], stream=stream
            )
        assert info.value.status_code == 502  # a real status: SDKs retry it with a new process
        assert "delete_everything" in str(info.value)


@pytest.mark.parametrize("described", [0, 20, 40])
@pytest.mark.parametrize("model", MODELS)
async def test_forty_tools_reach_the_model_by_name(
    served: Served, model: str, described: int
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i:02d}",
                "description": f"Does thing {i}.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
        for i in range(40)
    ]
    system = " ".join(f"tool_{i:02d} does thing {i}." for i in range(described))
    r = await served.client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": system or "Be helpful."},
            {"role": "user", "content": "go" + fake(echo_prompt=True)},
        ],
        tools=tools,  # type: ignore[arg-type]
    )
    prompt = r.choices[0].message.content or ""  # the fake CLI answers with the prompt it got
    instructions = prompt.split("</instructions>")[0]
    assert all(f"tool_{i:02d}" in instructions for i in range(40))
    assert instructions.count("<signature>") == 40 - described
