"""Deeply nested JSON never breaks a call (issue 24, D1), wherever it comes from: tool-call
arguments in a request's history (nested up to 100,000 deep) and a model's tool call (whole
or cut off), in both APIs, streaming and not. No 500, every stream ends with ``[DONE]`` or
its terminal event, and no log line holds the prompt's text at any nesting."""

from __future__ import annotations

import json
import random
from typing import Any

import aiohttp
import pytest
import structlog

from cli_proxy import jsondepth
from cli_proxy.read.json_output import SCHEMA_CHECK_DEPTH
from tests.conftest import Served, fake
from tests.server.test_chat import WEATHER

MODEL = "claude-sonnet-4-6"
DEPTHS = [100, 990, 3000, 100_000]
RESPONSES_TOOL = {"type": "function", **WEATHER["function"]}


def deep_array(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


async def post(served: Served, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(served.server.make_url(path), json=body) as r,
    ):
        return r.status, r.content_type, await r.read()


def sse_data(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


def chat_body(messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, "tools": [WEATHER], "stream": stream}


def responses_body(items: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "input": items, "tools": [RESPONSES_TOOL], "stream": stream}


class Answer:
    """What a client got: the calls (name, arguments), the text, how it ended."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.text = ""
        self.end = ""


def read_chat(stream: bool, ctype: str, raw: bytes) -> Answer:
    out = Answer()
    if not stream:
        assert ctype == "application/json", raw[:300]
        choice = json.loads(raw)["choices"][0]
        msg = choice["message"]
        out.text = msg.get("content") or ""
        out.calls = [
            (c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls") or []
        ]
        out.end = choice["finish_reason"]
        return out
    assert ctype == "text/event-stream", raw[:300]
    data = sse_data(raw)
    assert data[-1] == "[DONE]", data[-3:]
    calls: dict[int, list[str]] = {}
    for item in data[:-1]:
        chunk = json.loads(item)
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            out.text += choice["delta"].get("content") or ""
            for tc in choice["delta"].get("tool_calls") or []:
                call = calls.setdefault(tc["index"], ["", ""])
                call[0] += tc["function"].get("name") or ""
                call[1] += tc["function"].get("arguments") or ""
            out.end = choice.get("finish_reason") or out.end
    out.calls = [(c[0], c[1]) for _, c in sorted(calls.items())]
    return out


def read_responses(stream: bool, ctype: str, raw: bytes) -> Answer:
    out = Answer()
    if stream:
        assert ctype == "text/event-stream", raw[:300]
        events = [json.loads(d) for d in sse_data(raw)]
        assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
        added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
        # a call the client saw start: it must also end, with arguments that are an object
        assert all(item["type"] != "function_call" for item in added) or any(
            e["type"] == "response.function_call_arguments.done" for e in events
        )
        final = events[-1]["response"]
    else:
        assert ctype == "application/json", raw[:300]
        final = json.loads(raw)
    out.end = final["status"]
    out.text = final["output_text"]
    out.calls = [
        (i["name"], i["arguments"]) for i in final["output"] if i["type"] == "function_call"
    ]
    return out


async def ask(served: Served, api: str, stream: bool, secret: str, answer: str) -> Answer:
    """One call whose model answers ``answer``, the user's text holding ``secret``."""
    text = secret + fake(answer=answer)
    if api == "chat":
        body = chat_body([{"role": "user", "content": text}], stream)
        return read_chat(stream, *(await ok(served, "/v1/chat/completions", body)))
    body = responses_body([{"role": "user", "content": text}], stream)
    return read_responses(stream, *(await ok(served, "/v1/responses", body)))


async def ok(served: Served, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
    status, ctype, raw = await post(served, path, body)
    assert status == 200, raw[:500]
    return ctype, raw


def no_prompt_in(logs: list[dict[str, Any]], secret: str) -> None:
    assert not [e for e in logs if e.get("log_level") in ("error", "critical")], logs
    assert secret not in repr(logs)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("depth", [100, 3000, 100_000])
async def test_deep_arguments_in_the_history(
    served: Served, depth: int, api: str, stream: bool
) -> None:
    """A client's earlier call with arguments nested ``depth`` deep: the call answers, and
    the arguments reach the model as the client sent them (too deep to decode: opaque)."""
    secret = f"user-secret-{random.random()}"
    args = deep_array(depth)
    with structlog.testing.capture_logs() as logs:
        if api == "chat":
            messages = [
                {"role": "system", "content": f"system-{secret}"},
                {"role": "user", "content": secret + fake(echo_prompt=True)},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": args},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ]
            got = read_chat(
                stream, *(await ok(served, "/v1/chat/completions", chat_body(messages, stream)))
            )
        else:
            items = [
                {"role": "user", "content": secret + fake(echo_prompt=True)},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": args,
                },
                {"type": "function_call_output", "call_id": "c1", "output": "r"},
            ]
            got = read_responses(
                stream, *(await ok(served, "/v1/responses", responses_body(items, stream)))
            )
    assert got.end in ("stop", "completed")
    assert args in got.text  # the echoed prompt holds them, unchanged
    no_prompt_in(logs, secret)


def tool_answer(args: str) -> str:
    return '{"tool_call":{"name":"get_weather","arguments":' + args


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_call_cut_off_never_reaches_the_client(
    served: Served, depth: int, api: str, stream: bool
) -> None:
    """The model's call is cut off inside arguments nested ``depth`` deep: the answer ends
    ``length`` / ``incomplete`` with no call, and streams end properly."""
    secret = f"user-secret-{random.random()}"
    with structlog.testing.capture_logs() as logs:
        got = await ask(served, api, stream, secret, tool_answer('{"a":' + "[" * depth + "1"))
    assert got.calls == []
    assert got.end in ("length", "incomplete")
    no_prompt_in(logs, secret)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_call_that_completes_is_passed_on_as_written(
    served: Served, depth: int, api: str, stream: bool
) -> None:
    """A complete call with arguments nested ``depth`` deep reaches the client exactly as
    the model wrote them (the gateway reads them without recursion, never decodes them)."""
    secret = f"user-secret-{random.random()}"
    args = '{"a":' + deep_array(depth) + "}"
    with structlog.testing.capture_logs() as logs:
        got = await ask(served, api, stream, secret, tool_answer(args) + "}}")
    assert got.calls == [("get_weather", args)]
    assert got.end in ("tool_calls", "completed")
    no_prompt_in(logs, secret)


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("depth", [100, 3000])
async def test_deep_arguments_as_a_json_string(served: Served, depth: int, api: str) -> None:
    """Arguments given as a string are decoded to check they are an object: within the
    gateway's decoding depth they are; deeper, they count as no object (``{}``)."""
    inner = '{"a":' * depth + "1" + "}" * depth
    got = await ask(served, api, False, "s", tool_answer(json.dumps(inner)) + "}}")
    expected = inner if depth <= jsondepth.MAX_DEPTH else "{}"
    assert got.calls == [("get_weather", expected)]


# a schema that recurses with the answer: jsonschema then recurses too, several frames a level
NESTED_ARRAYS = {
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/t"}},
    "$defs": {
        "t": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/t"}}, {"type": "integer"}]}
    },
}


@pytest.mark.parametrize("depth", [50, 150, 3000])
async def test_a_deep_json_answer_to_a_strict_schema_is_a_502_not_a_500(
    served: Served, depth: int
) -> None:
    """A ``response_format`` answer is checked against its strict schema only when it is
    shallow enough to check; a deeper one is an invalid answer (502), never a 500."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": fake(answer='{"a":' + deep_array(depth) + "}")}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "strict": True, "schema": NESTED_ARRAYS},
        },
    }
    status, _, raw = await post(served, "/v1/chat/completions", body)
    if depth <= SCHEMA_CHECK_DEPTH:
        assert status == 200, raw[:300]
    else:
        assert status == 502, raw[:300]
        assert json.loads(raw)["error"]["code"] == "invalid_json_answer"


def test_depth_is_measured_without_recursion() -> None:
    assert jsondepth.depth("") == 0
    assert jsondepth.depth('{"a":"[[[[{{"}') == 1  # brackets in strings do not nest
    assert jsondepth.depth('["\\"[[", [[]]]') == 3  # an escaped quote does not end a string
    assert jsondepth.depth(deep_array(1_000_000)) == 1_000_000
    with pytest.raises(jsondepth.TooDeep):
        jsondepth.loads(deep_array(jsondepth.MAX_DEPTH + 1))
    assert jsondepth.loads(deep_array(jsondepth.MAX_DEPTH)) is not None
