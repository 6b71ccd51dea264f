"""Anthropic's Messages API end to end, judged by the official ``anthropic`` SDK (strict
response validation): anthropic SDK -> real HTTP -> gateway -> fake claude / gemini / codex
CLI processes. Text, streams, tool round trips, images and thinking on every backend."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import Message

from tests.conftest import Served, fake

CLAUDE, GEMINI, CODEX = "claude-sonnet-4-6", "gemini-2.5-flash", "gpt-5.5"
MODELS = [CLAUDE, GEMINI, CODEX]
IMAGES = Path(__file__).resolve().parents[1] / "data" / "images"
PNG = (IMAGES / "red-8x8.png").read_bytes()
JPEG = (IMAGES / "blue-8x8.jpg").read_bytes()

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}


def root_url(served: Served) -> str:
    """What an Anthropic client takes: the root (it adds ``/v1/messages`` itself)."""
    return str(served.server.make_url("/")).rstrip("/")


@pytest.fixture
async def client(served: Served) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """An anthropic client that validates every response against the SDK's own models."""
    c = anthropic.AsyncAnthropic(
        base_url=root_url(served), api_key="x", max_retries=0, _strict_response_validation=True
    )
    yield c
    await c.close()


def calls(model: str, *spec: dict[str, Any]) -> dict[str, Any]:
    """The fake directive by which ``model``'s CLI answers with these tool calls: JSON in
    the prompt-JSON tools mode (claude, gemini), native calls on codex."""
    if model == CODEX:
        return {"tool_calls": list(spec)}
    if len(spec) == 1:
        return {"answer": json.dumps({"tool_call": spec[0]})}
    return {"answer": json.dumps({"tool_calls": list(spec)})}


def thought(model: str, text: str) -> dict[str, Any]:
    """The fake directive by which ``model``'s CLI thinks ``text`` before answering."""
    return {CLAUDE: {"think": text}, GEMINI: {"thought": text}, CODEX: {"reasoning": text}}[model]


def essence(m: Message) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for b in m.content:
        if b.type == "text":
            out.append(("text", b.text))
        elif b.type == "tool_use":
            out.append(("tool_use", b.name, b.input))
        elif b.type == "thinking":
            out.append(("thinking", b.thinking))
    return out


# ------------------------------------------------------------------ text and streams


@pytest.mark.parametrize("model", MODELS)
async def test_text(client: anthropic.AsyncAnthropic, model: str) -> None:
    m = await client.messages.create(
        model=model,
        max_tokens=1024,
        system="Be brief.",
        messages=[{"role": "user", "content": "hello " + fake(answer="Hi there")}],
    )
    Message.model_validate(m.model_dump())
    assert m.type == "message" and m.role == "assistant" and m.model == model
    assert m.id.startswith("msg_")
    assert [(b.type, getattr(b, "text", None)) for b in m.content] == [("text", "Hi there")]
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert m.usage.cache_read_input_tokens == 0 and m.usage.cache_creation_input_tokens == 0


@pytest.mark.parametrize("model", MODELS)
async def test_stream_equals_create(client: anthropic.AsyncAnthropic, model: str) -> None:
    kwargs: Any = {
        "model": model,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "go " + fake(answer="streamed words", chunks=4)}],
    }
    whole = await client.messages.create(**kwargs)
    pieces: list[str] = []
    async with client.messages.stream(**kwargs) as stream:
        async for text in stream.text_stream:
            pieces.append(text)
        final = await stream.get_final_message()
    assert "".join(pieces) == "streamed words" and len(pieces) == 4
    assert essence(final) == essence(whole) == [("text", "streamed words")]
    assert final.stop_reason == whole.stop_reason == "end_turn"
    assert final.id.startswith("msg_") and final.model == model
    assert final.usage.output_tokens == whole.usage.output_tokens > 0
    assert final.usage.input_tokens == whole.usage.input_tokens > 0  # from message_delta


async def test_cached_tokens_are_cache_reads(client: anthropic.AsyncAnthropic) -> None:
    """chat's prompt_tokens include cached tokens; Anthropic's input_tokens do not."""
    m = await client.messages.create(
        model=CLAUDE,
        max_tokens=100,
        messages=[{"role": "user", "content": "x" * 400 + fake(answer="ok", cached=40)}],
    )
    assert m.usage.cache_read_input_tokens == 40
    assert m.usage.input_tokens > 0
    async with client.messages.stream(
        model=CLAUDE,
        max_tokens=100,
        messages=[{"role": "user", "content": "x" * 400 + fake(answer="ok", cached=40)}],
    ) as stream:
        final = await stream.get_final_message()
    assert final.usage.cache_read_input_tokens == 40
    assert final.usage.input_tokens == m.usage.input_tokens


async def test_max_tokens_stop_reason(client: anthropic.AsyncAnthropic) -> None:
    m = await client.messages.create(
        model=CLAUDE,
        max_tokens=100,
        messages=[{"role": "user", "content": fake(answer="cut off here", max_tokens=True)}],
    )
    assert m.stop_reason == "max_tokens"
    assert essence(m) == [("text", "cut off here")]


async def test_stop_sequences_are_accepted(client: anthropic.AsyncAnthropic) -> None:
    """Accepted like chat's ``stop``: the CLIs cannot apply them, so the answer ends as it
    ends (``end_turn``), never ``stop_sequence`` (docs/anthropic-api.md)."""
    m = await client.messages.create(
        model=CLAUDE,
        max_tokens=100,
        stop_sequences=["\n\nHuman:"],
        metadata={"user_id": "u-1"},
        service_tier="auto",
        cache_control={"type": "ephemeral"},
        # older SDKs' sampling knobs (2.x sends them only as extras)
        extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40},
        messages=[{"role": "user", "content": fake(answer="fine")}],
    )
    assert m.stop_reason == "end_turn" and m.stop_sequence is None


# ------------------------------------------------------------------ tools


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("model", MODELS)
async def test_tool_round_trip(client: anthropic.AsyncAnthropic, model: str, stream: bool) -> None:
    """tool_use -> the client runs it -> tool_result -> the final text; the result reaches
    the CLI as the answer to that call."""
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Paris?" + fake(**calls(model, paris))}
    ]

    async def ask(msgs: list[Any]) -> Message:
        kwargs: Any = {"model": model, "max_tokens": 500, "tools": [WEATHER], "messages": msgs}
        if not stream:
            return await client.messages.create(**kwargs)
        async with client.messages.stream(**kwargs) as s:
            return await s.get_final_message()

    first = await ask(messages)
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris"})]
    assert uses[0].id.startswith("toolu_")
    echo = {"echo_channel": True} if model == CODEX else {"echo_prompt": True}
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny, 24 C"},
                {"type": "text", "text": "and so?" + fake(**echo)},
            ],
        },
    ]
    second = await ask(messages)
    assert second.stop_reason == "end_turn"
    seen = "".join(b.text for b in second.content if b.type == "text")
    if model == CODEX:  # the call and its output as the channel's items
        items = json.loads(seen)["items"]
        assert [i["type"] for i in items] == ["message", "function_call", "function_call_output"]
        assert items[1]["call_id"] == items[2]["call_id"] == uses[0].id
        assert "sunny, 24 C" in json.dumps(items[2])
    else:
        assert f'role="assistant_tool_call" name="get_weather" id="{uses[0].id}"' in seen
        assert f'role="tool_result" id="{uses[0].id}" name="get_weather">sunny, 24 C<' in seen


@pytest.mark.parametrize("model", MODELS)
async def test_two_calls_and_their_ids(client: anthropic.AsyncAnthropic, model: str) -> None:
    two = (
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
        {"name": "get_time", "arguments": {}},
    )
    m = await client.messages.create(
        model=model,
        max_tokens=100,
        tools=[WEATHER, TIME],
        messages=[{"role": "user", "content": "both" + fake(**calls(model, *two))}],
    )
    uses = [b for b in m.content if b.type == "tool_use"]
    assert sorted(u.name for u in uses) == ["get_time", "get_weather"]
    assert len({u.id for u in uses}) == 2 and all(u.id.startswith("toolu_") for u in uses)
    one = await client.messages.create(
        model=model,
        max_tokens=100,
        tools=[WEATHER, TIME],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "both" + fake(**calls(model, *two))}],
    )
    assert len([b for b in one.content if b.type == "tool_use"]) == 1


async def test_tool_choice_reaches_the_prompt(client: anthropic.AsyncAnthropic) -> None:
    async def prompt(choice: Any) -> str:
        m = await client.messages.create(
            model=CLAUDE,
            max_tokens=100,
            tools=[WEATHER, TIME],
            tool_choice=choice,
            messages=[{"role": "user", "content": "x" + fake(echo_prompt=True)}],
        )
        return "".join(b.text for b in m.content if b.type == "text")

    assert "<json_format>" not in await prompt({"type": "none"})
    forced = await prompt({"type": "tool", "name": "get_time"})
    assert "get_time" in forced and "must call" in forced
    assert "must call" in await prompt({"type": "any"})


# ------------------------------------------------------------------ images


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def image(raw: bytes, media_type: str = "image/png") -> dict[str, Any]:
    data = base64.b64encode(raw).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


@pytest.mark.parametrize("model", MODELS)
async def test_images_reach_the_cli_in_place(client: anthropic.AsyncAnthropic, model: str) -> None:
    """A user image and an image inside a tool result, as the backend carries images."""
    echo = {"echo_channel": True} if model == CODEX else {"echo_blocks": True}
    m = await client.messages.create(
        model=model,
        max_tokens=100,
        tools=[{"name": "screenshot", "input_schema": {"type": "object", "properties": {}}}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "look"}, image(PNG)]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "here"}, image(JPEG, "image/jpeg")],
                    },
                    {"type": "text", "text": "what colours?" + fake(**echo)},
                ],
            },
        ],
    )
    seen = json.loads("".join(b.text for b in m.content if b.type == "text"))
    if model == CODEX:
        dumped = json.dumps(seen)
        assert base64.b64encode(PNG).decode() in dumped
        assert base64.b64encode(JPEG).decode() in dumped
        assert seen["items"][0]["content"][1]["type"] == "input_image"
    else:
        got = [(b["image"], b["sha256"]) for b in seen if "image" in b]
        assert got == [("image/png", sha(PNG)), ("image/jpeg", sha(JPEG))]
        i = next(i for i, b in enumerate(seen) if b.get("sha256") == sha(JPEG))
        assert 'role="tool_result"' in seen[i - 1]["text"]


async def test_image_errors_name_the_clients_field(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(
            model=CLAUDE,
            max_tokens=100,
            messages=[
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "x"}, image(b"not an image")],
                },
            ],
        )
    error = info.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("messages[2].content[1].source: ")


# ------------------------------------------------------------------ thinking


@pytest.mark.parametrize("model", MODELS)
async def test_thinking_blocks(client: anthropic.AsyncAnthropic, model: str) -> None:
    """With ``thinking`` on, what the model thought is a thinking block before the text,
    streamed or not; without it, no thinking block and the thought never becomes text."""
    content = "hi " + fake(answer="hello there", **thought(model, "Keep it short."))
    kwargs: Any = {
        "model": model,
        "max_tokens": 2048,
        "messages": [{"role": "user", "content": content}],
    }
    plain = await client.messages.create(**kwargs)
    assert essence(plain) == [("text", "hello there")]
    for thinking in ({"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}):
        m = await client.messages.create(**kwargs, thinking=thinking)
        assert essence(m) == [("thinking", "Keep it short."), ("text", "hello there")]
        assert m.content[0].type == "thinking" and m.content[0].signature == ""
        async with client.messages.stream(**kwargs, thinking=thinking) as stream:
            kinds = [e.type for e in [ev async for ev in stream] if e.type in ("thinking", "text")]
            final = await stream.get_final_message()
        assert essence(final) == essence(m)
        assert kinds.index("text") > kinds.index("thinking")
    omitted = await client.messages.create(
        **kwargs, thinking={"type": "adaptive", "display": "omitted"}
    )
    assert essence(omitted) == [("text", "hello there")]


async def test_thinking_sent_back_is_not_shown_to_the_model(
    client: anthropic.AsyncAnthropic,
) -> None:
    m = await client.messages.create(
        model=CLAUDE,
        max_tokens=100,
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "SECRET-THOUGHT", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "hello"},
                ],
            },
            {"role": "user", "content": "again" + fake(echo_prompt=True)},
        ],
    )
    prompt = m.content[0].text  # type: ignore[union-attr]
    assert "SECRET-THOUGHT" not in prompt and "opaque" not in prompt
    assert 'role="assistant">hello<' in prompt


# ------------------------------------------------------------------ system and structure


async def test_system_blocks_and_a_system_message_inside_messages(
    client: anthropic.AsyncAnthropic,
) -> None:
    m = await client.messages.create(
        model=CLAUDE,
        max_tokens=100,
        system=[
            {"type": "text", "text": "First rule.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Second rule."},
        ],
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Mid-conversation rule."},  # type: ignore[typeddict-item]
            {"role": "user", "content": "x" + fake(echo_prompt=True)},
        ],
    )
    prompt = m.content[0].text  # type: ignore[union-attr]
    context = prompt.split("<system_context>")[1].split("</system_context>")[0]
    assert "First rule." in context and "Second rule." in context
    assert "Mid-conversation rule." in context


async def test_structured_output(client: anthropic.AsyncAnthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    m = await client.messages.create(
        model=CLAUDE,
        max_tokens=100,
        output_config={"format": {"type": "json_schema", "schema": schema}},
        messages=[{"role": "user", "content": "Ada" + fake(answer='{"name":"Ada","age":36}')}],
    )
    assert json.loads(m.content[0].text) == {"name": "Ada", "age": 36}  # type: ignore[union-attr]
