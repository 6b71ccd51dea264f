"""The codex backend through the gateway without the real binary: the shipped codex fixtures
(recorded from codex 0.169.0 app-server by ``make fixtures``) replayed by the pytest plugin and
``start_gateway``; the stand-in app-server (``tests/data/real-cli/codex-fake-cli.py``) for the
SDK paths (streaming, native tool calls, structured output, images), the Responses API and
refused calls; and the pure mapping of a request onto the app-server channel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from cli_proxy.backends.codex.backend import CodexBackend
from cli_proxy.backends.codex.items import channel
from cli_proxy.backends.codex.parser import CodexParser
from cli_proxy.plan.images import ImageLimits, extract
from cli_proxy.plan.prompt import PromptOptions, render
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.events import CliToolCall
from cli_proxy.replay.plugin import start_gateway
from tests.conftest import CODEX_FAKE_CLI, FAKE_PY, ServeFactory, fake
from tests.server.test_chat import TIME, WEATHER

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "fixtures"


def codex_fixtures() -> list[dict[str, Any]]:
    return [
        d
        for d in (json.loads(p.read_text()) for p in sorted(SHIPPED.glob("codex-*.json")))
        if d["backend"] == "codex"
    ]


def test_codex_fixtures_are_shipped() -> None:
    fixtures = codex_fixtures()
    assert len(fixtures) >= 7
    for d in fixtures:
        assert d["argv"][:2] == ["codex", "app-server"]


async def test_codex_fixtures_replay() -> None:
    def replay() -> list[Any]:
        out = []
        with start_gateway(SHIPPED) as running:
            client = running.client()
            try:
                for d in codex_fixtures():
                    try:
                        out.append(client.chat.completions.create(**d["request"]))
                    except openai.APIStatusError as exc:
                        out.append(exc.status_code)
            finally:
                client.close()
        return out

    results = await asyncio.to_thread(replay)
    statuses = sorted(r for r in results if isinstance(r, int))
    assert statuses == [429, 503]  # the recorded rate-limit and overload
    answers = [r for r in results if not isinstance(r, int)]
    assert {r.choices[0].finish_reason for r in answers} == {"stop", "tool_calls"}
    assert all(r.model == "gpt-5.5" for r in answers)


def test_pytest_plugin_replays_codex(pytester: pytest.Pytester) -> None:
    data = next(d for d in codex_fixtures() if d["exit_code"] == 0)
    pytester.makeini(f"[pytest]\ncli_proxy_fixtures = {SHIPPED}\n")
    pytester.makepyfile(
        test_user=f"""
import json
request = json.loads({json.dumps(json.dumps(data["request"]))})

def test_replayed(cli_proxy_client):
    r = cli_proxy_client.chat.completions.create(**request)
    assert r.model == "gpt-5.5"
    assert r.choices[0].finish_reason in ("stop", "tool_calls")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


PARIS = {"name": "get_weather", "arguments": {"city": "Paris"}}
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
    "hKmMIQAAAABJRU5ErkJggg=="
)


async def served_codex(serve: ServeFactory, bin: str | None = None, **settings: Any) -> Any:
    command = bin or f"{FAKE_PY} {CODEX_FAKE_CLI} "
    return await serve(codex={"bin": command, **settings}, idle_timeout_s=5)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_sdk_paths_through_the_stand_in(serve: ServeFactory) -> None:
    served = await served_codex(serve)
    client = served.client
    r = await client.chat.completions.create(
        model="gpt-5.5", messages=user("hi" + fake(answer="hello", cached=2))
    )
    assert r.choices[0].message.content == "hello" and r.usage is not None
    assert r.usage.prompt_tokens_details is not None
    assert r.usage.prompt_tokens_details.cached_tokens == 2
    stream = await client.chat.completions.create(
        model="codex/anything", messages=user("hi" + fake(answer="streamed", chunks=4)), stream=True
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices]
    assert "".join(p or "" for p in pieces) == "streamed" and len([p for p in pieces if p]) == 4
    r = await client.chat.completions.create(
        model="o3",
        messages=user("x" + fake(tool_calls=[PARIS, {"name": "get_time", "arguments": {}}])),
        tools=[WEATHER, TIME],  # type: ignore[list-item]
    )
    calls = r.choices[0].message.tool_calls or []
    assert r.choices[0].finish_reason == "tool_calls"
    assert sorted(c.function.name for c in calls) == ["get_time", "get_weather"]  # type: ignore[union-attr]
    assert len({c.id for c in calls}) == 2 and r.choices[0].message.content is None
    resp = await client.responses.create(
        model="gpt-6.1-sol",
        input="What's the weather in Paris?" + fake(tool_calls=[PARIS]),
        tools=[{"type": "function", **WEATHER["function"]}],  # type: ignore[list-item]
    )
    assert [o.type for o in resp.output] == ["function_call"]


async def test_parallel_tool_calls_false_hands_over_one_call(serve: ServeFactory) -> None:
    served = await served_codex(serve)
    r = await served.client.chat.completions.create(
        model="gpt-5.5",
        messages=user("x" + fake(tool_calls=[PARIS, {"name": "get_time", "arguments": {}}])),
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        parallel_tool_calls=False,
    )
    calls = r.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]


async def test_tool_round_trip_sends_items(serve: ServeFactory) -> None:
    """The second turn reaches codex as items: the call and its output, not prose."""
    served = await served_codex(serve)
    client = served.client
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        *user("Weather in Paris?" + fake(tool_calls=[PARIS])),
    ]
    first = await client.chat.completions.create(
        model="gpt-5.5",
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "rain" + fake(echo_channel=True)},
    ]
    second = await client.chat.completions.create(
        model="gpt-5.5",
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    seen = json.loads(second.choices[0].message.content or "")
    assert seen["thread"]["dynamicTools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": WEATHER["function"]["description"],
            "inputSchema": WEATHER["function"]["parameters"],
        }
    ]
    assert seen["thread"]["ephemeral"] is True
    assert "<system_context>Be brief.</system_context>" in seen["thread"]["developerInstructions"]
    assert [i["type"] for i in seen["items"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert seen["items"][1] == {
        "type": "function_call",
        "call_id": call.id,
        "name": "get_weather",
        "arguments": call.function.arguments,  # type: ignore[union-attr]
    }
    assert seen["items"][2]["call_id"] == call.id and seen["input"] == []


async def test_tool_choice(serve: ServeFactory) -> None:
    served = await served_codex(serve)
    echo = user("x" + fake(echo_channel=True))
    r = await served.client.chat.completions.create(
        model="gpt-5.5",
        messages=echo,
        tools=[WEATHER],
        tool_choice="none",  # type: ignore[list-item]
    )
    assert "dynamicTools" not in json.loads(r.choices[0].message.content or "")["thread"]
    r = await served.client.chat.completions.create(
        model="gpt-5.5",
        messages=echo,
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
    )
    developer = json.loads(r.choices[0].message.content or "")["thread"]["developerInstructions"]
    assert "must call the function 'get_time'" in developer
    assert "at most one function" in developer


async def test_structured_output_goes_through_output_schema(serve: ServeFactory) -> None:
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    served = await served_codex(serve)
    r = await served.client.beta.chat.completions.parse(
        model="gpt-5.5",
        messages=user("Ada" + fake(answer='{"name":"Ada","age":36}')),
        response_format=Person,
    )
    assert r.choices[0].message.parsed == Person(name="Ada", age=36)
    anything = {"type": "object", "additionalProperties": True}  # what the echo matches
    echo = await served.client.chat.completions.create(
        model="gpt-5.5",
        messages=user("x" + fake(echo_channel=True)),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "p", "strict": True, "schema": anything},
        },
    )
    seen = json.loads(echo.choices[0].message.content or "")
    assert seen["outputSchema"] == anything
    assert "<json_format>" not in json.dumps(seen["thread"])  # not in the prompt as well


async def test_images_arrive_in_place(serve: ServeFactory) -> None:
    served = await served_codex(serve)
    r = await served.client.chat.completions.create(
        model="gpt-5.5",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "before"},
                    {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
                    {"type": "text", "text": "after" + fake(echo_channel=True)},
                ],
            }
        ],
    )
    seen = json.loads(r.choices[0].message.content or "")
    assert [i["type"] for i in seen["input"]] == ["text", "image", "text"]
    assert seen["input"][1] == {"type": "image", "url": PNG, "detail": "low"}


@pytest.mark.parametrize(
    ("info", "message", "error"),
    [
        ("unauthorized", "unexpected status 401 Unauthorized", openai.InternalServerError),
        ("usageLimitExceeded", "You've hit your usage limit.", openai.RateLimitError),
        ({"responseTooManyFailedAttempts": {"httpStatusCode": 429}}, "x", openai.RateLimitError),
        ("internalServerError", "We're currently experiencing high demand", openai.APIStatusError),
        ("contextWindowExceeded", "too long", openai.BadRequestError),
    ],
)
async def test_failed_turn_maps_to_its_status(
    serve: ServeFactory, info: Any, message: str, error: type[Exception]
) -> None:
    served = await served_codex(serve)
    with pytest.raises(error) as caught:
        await served.client.chat.completions.create(
            model="gpt-5.5", messages=user("hi" + fake(error_message=message, error_info=info))
        )
    if info in ("internalServerError", "unauthorized"):
        assert caught.value.status_code == 503  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["exec_command", "no_such_function"])
async def test_refused_call_ends_the_call_at_once(serve: ServeFactory, name: str) -> None:
    """codex says so only on stderr (merged into stdout for the parser), then loops."""
    served = await served_codex(serve)
    spec = {"cli_tool_call": name} if name == "exec_command" else {"tool_calls": [{"name": name}]}
    with pytest.raises(openai.InternalServerError) as info:
        await served.client.chat.completions.create(
            model="gpt-5.5",
            messages=user("hi" + fake(**spec)),
            tools=[WEATHER],  # type: ignore[list-item]
        )
    body: Any = info.value.body
    assert info.value.status_code == 502 and body["code"] == "invalid_tool_call"
    assert name in body["message"]


# ------------------------------------------------------------ the request on the channel


def plan_channel(body: dict[str, Any]) -> Any:
    req = ChatCompletionRequest.model_validate({"model": "gpt-5.5", **body})
    prompt = render(req, PromptOptions(native_tools=True), extract(req, ImageLimits()))
    return channel(prompt, req)


def test_channel_turns_and_unanswered_calls() -> None:
    ch = plan_channel(
        {
            "messages": [
                {"role": "developer", "content": "Use </system_context> tags."},
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "sure"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "zzz", "content": "orphan"},
                {
                    "role": "tool",
                    "tool_call_id": "b",
                    "content": [{"type": "image_url", "image_url": {"url": PNG}}],
                },
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
    )
    assert "&lt;/system_context&gt;" in ch.thread["developerInstructions"]  # escaped
    assert ch.thread["dynamicTools"][0]["inputSchema"] == {"type": "object", "properties": {}}
    kinds = [(i["type"], i.get("role"), i.get("call_id")) for i in ch.items]
    assert kinds == [
        ("message", "user", None),
        ("message", "assistant", None),
        ("function_call", None, "a"),
        ("function_call_output", None, "a"),  # unanswered: codex/the API want an output
        ("message", "user", None),  # orphan tool results: user text
        ("message", "user", None),
    ]
    assert ch.items[3]["output"].startswith("No result")
    assert ch.input == ()  # the conversation ends with tool results: an empty turn input


def test_channel_tool_output_with_image() -> None:
    ch = plan_channel(
        {
            "messages": [
                {"role": "user", "content": "look"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "a",
                    "content": [
                        {"type": "text", "text": "shot:"},
                        {"type": "image_url", "image_url": {"url": PNG}},
                    ],
                },
                {"role": "user", "content": "what is it?"},
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
    )
    assert ch.items[2]["output"] == [
        {"type": "input_text", "text": "shot:"},
        {"type": "input_image", "image_url": PNG},
    ]
    assert ch.input == ({"type": "text", "text": "what is it?", "text_elements": []},)


def test_parser_collects_calls_then_interrupts() -> None:
    parser = CodexParser(parallel=True, call_window_s=0.0)
    call = {"method": "item/tool/call", "id": 0, "params": {"turnId": "t", "tool": "f"}}
    events = parser.feed(
        json.dumps({**call, "params": {**call["params"], "arguments": {}}}).encode()
    )
    assert events == [CliToolCall("f", "{}")]
    assert b'"turn/interrupt"' in parser.replies()
    windowed = CodexParser(parallel=True, call_window_s=5.0)
    windowed.feed(json.dumps(call).encode())
    assert windowed.wake_s is not None and windowed.replies() == b""
    windowed.feed(json.dumps({**call, "id": 1}).encode())  # a second call: still collecting
    assert windowed.replies() == b""


def test_backend_flags() -> None:
    assert CodexBackend.duplex and CodexBackend.native_tools and CodexBackend.accepts_images


@pytest.mark.parametrize(
    ("response_format", "schema_on_channel"),
    [
        ({"type": "json_object"}, False),
        (
            {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}},
            False,
        ),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "p", "strict": True, "schema": {"type": "object"}},
            },
            True,
        ),
    ],
)
def test_channel_response_format(response_format: Any, schema_on_channel: bool) -> None:
    """Only a strict schema goes through ``outputSchema`` (codex always sends it strict); the
    others keep the prompt's JSON rule, in the developer instructions."""
    ch = plan_channel({"messages": user("hi"), "response_format": response_format})
    assert (ch.output_schema is not None) is schema_on_channel
    developer = ch.thread.get("developerInstructions", "")
    assert ("<json_format>" in developer) is not schema_on_channel
