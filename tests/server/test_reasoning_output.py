"""Reasoning out: what the model thought reaches the client on request, never as content.

Chat completions carry it as ``reasoning_content`` (message and deltas) with the setting
``reasoning_output``; the Responses API as a ``reasoning`` item when the request asks for a
summary. The fake claude CLI thinks (``think``) the way the real one prints it: thinking
deltas, then the whole thinking block with its signature."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from tests.conftest import Served, ServeFactory, fake
from tests.server.test_responses import raw_events

THOUGHT = "The user wants a greeting. Keep it short."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})


def ask(answer: str = "hello there", **extra: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "hi " + fake(answer=answer, think=THOUGHT, **extra)}]


@pytest.fixture
async def reasoning(serve: ServeFactory) -> Served:
    return await serve(reasoning_output=True)


async def test_chat_message_carries_reasoning_content(reasoning: Served) -> None:
    r = await reasoning.client.chat.completions.create(model="claude-sonnet-4-6", messages=ask())
    message = r.choices[0].message
    assert message.content == "hello there"
    assert message.model_extra is not None
    assert message.model_extra["reasoning_content"] == THOUGHT


async def test_chat_stream_reasoning_deltas_come_before_the_content(reasoning: Served) -> None:
    stream = await reasoning.client.chat.completions.create(
        model="claude-sonnet-4-6", messages=ask(), stream=True
    )
    kinds: list[str] = []
    thought, content = "", ""
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            kinds.append("reasoning")
            thought += extra["reasoning_content"]
        if delta.content:
            kinds.append("content")
            content += delta.content
    assert thought == THOUGHT and content == "hello there"
    assert kinds.index("content") > max(i for i, k in enumerate(kinds) if k == "reasoning")


async def test_thinking_is_never_content_nor_a_tool_call(reasoning: Served) -> None:
    """A thought that looks like a tool call is not parsed as one; the answer's call is."""
    lookalike = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "Rome"}}})
    messages = [{"role": "user", "content": "w " + fake(answer=CALL, think=lookalike)}]
    r = await reasoning.client.chat.completions.create(
        model="claude-sonnet-4-6", messages=messages, tools=[WEATHER_TOOL]
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert choice.message.model_extra is not None
    assert choice.message.model_extra["reasoning_content"] == lookalike


async def test_setting_off_changes_nothing_on_the_wire(served: Served) -> None:
    body = {"model": "claude-sonnet-4-6", "messages": ask()}
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{served.base_url}/chat/completions", json=body) as resp:
            whole = await resp.json()
        async with s.post(
            f"{served.base_url}/chat/completions", json={**body, "stream": True}
        ) as resp:
            raw = (await resp.read()).decode()
    assert "reasoning_content" not in whole["choices"][0]["message"]
    assert whole["choices"][0]["message"]["content"] == "hello there"
    assert "reasoning_content" not in raw and THOUGHT not in raw


async def test_client_sent_reasoning_is_accepted_and_not_rendered(reasoning: Served) -> None:
    secret = "PRIVATE-THOUGHT-7f3a"
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok", "reasoning_content": secret},
        {"role": "user", "content": "again " + fake(echo_prompt=True)},
    ]
    r = await reasoning.client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=messages,  # type: ignore[arg-type]
    )
    assert r.choices[0].message.content is not None
    assert "again" in r.choices[0].message.content and secret not in r.choices[0].message.content


async def test_responses_reasoning_item_when_a_summary_is_asked(served: Served) -> None:
    r = await served.client.responses.create(
        model="claude-sonnet-4-6",
        input="hi " + fake(answer="hello there", think=THOUGHT),
        reasoning={"summary": "auto"},
    )
    kinds = [item.type for item in r.output]
    assert kinds == ["reasoning", "message"]
    item = r.output[0]
    assert item.type == "reasoning"
    assert [s.text for s in item.summary] == [THOUGHT]
    assert r.output_text == "hello there"


async def test_responses_no_reasoning_item_without_the_request(served: Served) -> None:
    r = await served.client.responses.create(
        model="claude-sonnet-4-6", input="hi " + fake(answer="hello there", think=THOUGHT)
    )
    assert [item.type for item in r.output] == ["message"]
    assert THOUGHT not in r.model_dump_json()


async def test_responses_stream_reasoning_events_in_order(served: Served) -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "input": "hi " + fake(answer="hello there", think=THOUGHT),
        "reasoning": {"summary": "detailed"},
    }
    events = await raw_events(f"{served.base_url}/responses", body)  # each checked by the SDK
    types = [e["type"] for e in events]
    reasoning = [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
    ]
    assert types[2:5] == reasoning
    done = types.index("response.reasoning_summary_text.done")
    assert types[done : done + 3] == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    assert done < types.index("response.output_text.delta")
    text = "".join(
        e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"
    )
    assert text == THOUGHT
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]


async def test_responses_stream_through_the_sdk_accumulator(strict: AsyncOpenAI) -> None:
    """openai-python's own stream accumulator with strict validation takes the events."""
    async with strict.responses.stream(
        model="claude-sonnet-4-6",
        input="hi " + fake(answer="hello there", think=THOUGHT),
        reasoning={"summary": "concise"},
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output_text == "hello there"


async def test_litellm_sees_reasoning_content(reasoning: Served) -> None:
    litellm = pytest.importorskip("litellm", reason="litellm is a dev dependency")
    r = await litellm.acompletion(
        model="openai/claude-sonnet-4-6",
        api_base=reasoning.base_url,
        api_key="unused",
        messages=ask(),
    )
    assert r.choices[0].message.content == "hello there"
    assert r.choices[0].message.reasoning_content == THOUGHT
