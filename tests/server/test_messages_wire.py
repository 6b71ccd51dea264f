"""The Messages API on the wire: the raw event stream event by event, every error type with
its status (the anthropic SDK's exception classes), each API's error body on its own paths
only, keys from ``x-api-key`` or ``Bearer``, Claude Code's real request, count_tokens,
models in Anthropic's shape, LiteLLM's ``anthropic/`` provider as a third client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import httpx2  # the anthropic SDK's HTTP client
import openai
import pytest
from anthropic.types import ModelInfo, RawMessageStreamEvent
from pydantic import TypeAdapter

from cli_proxy.server.errors import APIError
from cli_proxy.server.formats import MESSAGES, error_response
from cli_proxy.server.wire.messages import MessagesRequest, checked, messages_to_chat
from tests.conftest import Served, ServeFactory, fake
from tests.server.test_listener import exchange, parse
from tests.server.test_messages import CLAUDE, CODEX, GEMINI, MODELS, WEATHER, calls, root_url
from tests.server.test_messages import thought as thought_of

EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
VERSION = {"anthropic-version": "2023-06-01"}


def sdk(served: Served, **kw: Any) -> anthropic.AsyncAnthropic:
    kw.setdefault("api_key", "x")
    return anthropic.AsyncAnthropic(base_url=root_url(served), max_retries=0, **kw)


@pytest.fixture
async def client(served: Served) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = sdk(served, _strict_response_validation=True)
    yield c
    await c.close()


async def raw_stream(
    served: Served, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every event of a streamed answer, as sent."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{root_url(served)}/v1/messages",
            json={"max_tokens": 1024, **body, "stream": True},
            headers={**VERSION, **(headers or {})},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = (await resp.read()).decode()
    out = []
    for block in raw.strip().split("\n\n"):
        lines = [ln for ln in block.split("\n") if not ln.startswith(":")]
        if not lines:
            continue  # a keep-alive comment
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name  # the event line names the data's type
        out.append((name, data))
    return out


def deltas(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [d["delta"]["type"] for n, d in events if n == "content_block_delta"]


# ------------------------------------------------------------------ the event stream


@pytest.mark.parametrize("model", MODELS)
async def test_text_stream_event_by_event(served: Served, model: str) -> None:
    events = await raw_stream(
        served, {"model": model, "messages": [{"role": "user", "content": fake(answer="a b c")}]}
    )
    assert [n for n, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    for name, data in events:
        if name != "ping":
            EVENTS.validate_python(data)  # each against the SDK's own event model
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["model"] == model
    assert start["stop_reason"] is None and start["role"] == "assistant"
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "a b c" and set(deltas(events)) == {"text_delta"}
    assert events[-3][1] == {"type": "content_block_stop", "index": 0}
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] > 0 and final["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("model", MODELS)
async def test_thinking_then_tool_use_stream(served: Served, model: str) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    events = await raw_stream(
        served,
        {
            "model": model,
            "thinking": {"type": "adaptive"},
            "tools": [WEATHER],
            "messages": [
                {
                    "role": "user",
                    "content": "w" + fake(**calls(model, call), **thought_of(model, "Use it.")),
                }
            ],
        },
    )
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    starts = [d for n, d in events if n == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "thinking"),
        (1, "tool_use"),
    ]
    assert starts[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    use = starts[1]["content_block"]
    assert use["name"] == "get_weather" and use["input"] == {} and use["id"].startswith("toolu_")
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1]
    # every block: start, its deltas, stop; the next block only after
    order = [(n, d.get("index")) for n, d in events if n.startswith("content_block")]
    assert order == sorted(order, key=lambda e: e[1])
    thinking = "".join(
        d["delta"]["thinking"] for n, d in events if n == "content_block_delta" and d["index"] == 0
    )
    args = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["index"] == 1
    )
    assert thinking == "Use it." and json.loads(args) == {"city": "Paris"}
    assert set(deltas(events)) == {"thinking_delta", "input_json_delta"}
    assert names[-2:] == ["message_delta", "message_stop"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    for name, data in events:
        if name != "ping":
            EVENTS.validate_python(data)


async def test_a_failure_after_the_start_is_an_error_event(
    served: Served, client: anthropic.AsyncAnthropic
) -> None:
    spec = fake(
        answer="partial words",
        chunks=3,
        no_result=True,
        exit=1,
        print_before_exit=True,
        stderr="API Error: 500",
    )
    body = {"model": CLAUDE, "messages": [{"role": "user", "content": spec}]}
    events = await raw_stream(served, body)
    assert [n for n, _ in events][:3] == ["message_start", "content_block_start", "ping"]
    name, data = events[-1]
    assert name == "error" and "message_stop" not in [n for n, _ in events]
    assert set(data) == {"type", "error"} and set(data["error"]) == {"type", "message"}
    assert data["error"]["type"] == "api_error" and "500" in data["error"]["message"]
    text = ""
    with pytest.raises(anthropic.APIStatusError, match="500"):
        async with client.messages.stream(max_tokens=10, **body) as stream:  # type: ignore[arg-type]
            async for piece in stream.text_stream:
                text += piece
    assert text == "partial words"


async def test_a_failure_before_any_answer_has_its_real_status(
    client: anthropic.AsyncAnthropic,
) -> None:
    """As on the chat path, the stream's head waits for the first answer event: a 429 is a
    real 429 the SDK can retry, not an event."""
    with pytest.raises(anthropic.RateLimitError) as info:
        async with client.messages.stream(
            model=CLAUDE,
            max_tokens=10,
            messages=[
                {
                    "role": "user",
                    "content": fake(
                        is_error=True,
                        api_error_status=429,
                        error_message="API Error: 429 rate limited, retry after 7 seconds",
                    ),
                }
            ],
        ) as stream:
            await stream.get_final_message()
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"


# ------------------------------------------------------------------ errors


def assert_anthropic_error(body: Any, kind: str) -> None:
    assert body == {"type": "error", "error": {"type": kind, "message": body["error"]["message"]}}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def assert_openai_error(body: Any) -> None:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}


def say(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


CLI_FAILURES = [  # (fake CLI directive, status, exception class, Anthropic type)
    (
        {"exit": 1, "stderr": "Error: something broke"},
        502,
        anthropic.InternalServerError,
        "api_error",
    ),
    (  # the gateway's credential, not the client's key: 503, no retry (errors.py)
        {"exit": 1, "stderr": "Invalid API key · Please run /login"},
        503,
        anthropic.InternalServerError,
        "api_error",
    ),
    (
        {"is_error": True, "api_error_status": 429, "error_message": "rate_limit"},
        429,
        anthropic.RateLimitError,
        "rate_limit_error",
    ),
    (
        {"is_error": True, "error_message": "API Error: 529 Overloaded"},
        529,
        anthropic.OverloadedError,
        "overloaded_error",
    ),
    ({"answer": ""}, 502, anthropic.InternalServerError, "api_error"),
]


@pytest.mark.parametrize(("spec", "status", "error", "kind"), CLI_FAILURES)
@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
async def test_cli_failures_map_to_anthropic_errors(
    client: anthropic.AsyncAnthropic,
    model: str,
    spec: dict[str, Any],
    status: int,
    error: type[Exception],
    kind: str,
) -> None:
    with pytest.raises(error) as info:
        await client.messages.create(model=model, max_tokens=10, messages=say(fake(**spec)))
    assert isinstance(info.value, anthropic.APIStatusError)
    assert info.value.status_code == status
    assert_anthropic_error(info.value.body, kind)
    if status == 429:
        assert int(info.value.response.headers["retry-after"]) >= 1
    if status == 503:
        assert info.value.response.headers["x-should-retry"] == "false"


async def test_codex_failures_map_to_anthropic_errors(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.InternalServerError) as info:
        await client.messages.create(
            model=CODEX,
            max_tokens=10,
            messages=say(fake(error_message="unexpected status 401", error_info="unauthorized")),
        )
    assert info.value.status_code == 503  # the gateway's credential refused (errors.py)
    assert_anthropic_error(info.value.body, "api_error")
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client.messages.create(
            model=CODEX,
            max_tokens=10,
            messages=say(fake(error_message="usage limit", error_info="usageLimitExceeded")),
        )
    assert_anthropic_error(limited.value.body, "rate_limit_error")


async def test_gateway_refusals_are_anthropic_errors(
    serve: ServeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = await serve(api_keys=["k"], max_body_bytes=20_000)
    c = sdk(served, api_key="k")
    try:
        with pytest.raises(anthropic.BadRequestError) as bad:  # 400: no max_tokens
            await c.post("/v1/messages", body={"model": CLAUDE, "messages": say("x")}, cast_to=dict)
        assert_anthropic_error(bad.value.body, "invalid_request_error")
        assert "max_tokens" in bad.value.body["error"]["message"]  # type: ignore[index]
        with pytest.raises(anthropic.AuthenticationError) as auth:  # 401: a wrong key
            await sdk(served, api_key="wrong").messages.create(
                model=CLAUDE, max_tokens=5, messages=say("x")
            )
        assert_anthropic_error(auth.value.body, "authentication_error")
        with pytest.raises(anthropic.PermissionDeniedError) as origin:  # 403: a foreign page
            await c.messages.create(
                model=CLAUDE,
                max_tokens=5,
                messages=say("x"),
                extra_headers={"Origin": "https://evil.example"},
            )
        assert_anthropic_error(origin.value.body, "permission_error")
        with pytest.raises(anthropic.NotFoundError) as missing:  # 404: no such model
            await c.messages.create(model="llama-3-70b", max_tokens=5, messages=say("x"))
        assert_anthropic_error(missing.value.body, "not_found_error")
        with pytest.raises(anthropic.ContentTooLargeError) as large:  # 413: max_body_bytes
            await c.messages.create(model=CLAUDE, max_tokens=5, messages=say("x" * 30_000))
        assert_anthropic_error(large.value.body, "request_too_large")

        async def boom(*a: Any, **k: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr(served.gateway, "open_call", boom)
        with pytest.raises(anthropic.InternalServerError) as internal:  # 500: a bug of ours
            await c.messages.create(model=CLAUDE, max_tokens=5, messages=say("x"))
        assert internal.value.status_code == 500
        assert_anthropic_error(internal.value.body, "api_error")
    finally:
        await c.close()


async def test_missing_binary_and_timeout(serve: ServeFactory) -> None:
    served = await serve(claude_bin="/nonexistent/claude", timeout_s=60, idle_timeout_s=1)
    c = sdk(served)
    try:
        with pytest.raises(anthropic.ServiceUnavailableError) as unavailable:  # 503
            await c.messages.create(model=CLAUDE, max_tokens=5, messages=say("x"))
        assert_anthropic_error(unavailable.value.body, "api_error")
        assert "not found" in unavailable.value.message
        with pytest.raises(anthropic.GatewayTimeoutError) as late:  # 504: idle timeout
            await c.messages.create(
                model=GEMINI,
                max_tokens=5,
                messages=say(fake(answer="x", no_result=True, close_linger=60)),
            )
        assert_anthropic_error(late.value.body, "timeout_error")
    finally:
        await c.close()


async def test_billing_refusal_is_a_billing_error(client: anthropic.AsyncAnthropic) -> None:
    from tests.server.test_metrics import BILLING

    with pytest.raises(anthropic.PaymentRequiredError) as info:
        await client.messages.create(
            model=CLAUDE,
            max_tokens=5,
            messages=say(fake(is_error=True, api_error_status=400, error_message=BILLING)),
        )
    assert_anthropic_error(info.value.body, "billing_error")


def test_login_expired_keeps_should_retry_false() -> None:
    err = APIError(503, "log in again", code="login_expired", headers={"x-should-retry": "false"})
    resp = error_response(err, MESSAGES)
    assert resp.status == 503 and resp.headers["x-should-retry"] == "false"
    assert resp.body is not None
    assert_anthropic_error(json.loads(bytes(resp.body)), "api_error")  # type: ignore[arg-type]


RAW_CASES = [  # (method, path, headers, body, status): refusals before any handler's work
    ("GET", "/v1/messages", {}, None, 405),
    ("POST", "/v1/messages", {"Content-Type": "text/plain"}, b"{}", 415),
    ("POST", "/v1/messages", {"Content-Type": "application/json"}, b"{not json", 400),
    ("POST", "/v1/messages", {"Content-Type": "application/json"}, b"[" * 100 + b"]" * 100, 400),
    ("POST", "/v1/messages/batches", {"Content-Type": "application/json"}, b"{}", 404),
    ("POST", "/messages", {"Content-Type": "application/json"}, b"{}", 400),
    ("POST", "/v1/messages/count_tokens", {"Content-Type": "application/json"}, b"{}", 400),
    ("GET", "/v1/models/no-such-model", VERSION, None, 404),
]


@pytest.mark.parametrize(("method", "path", "headers", "body", "status"), RAW_CASES)
async def test_each_path_answers_its_own_error_body(
    served: Served,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
    status: int,
) -> None:
    """Never an OpenAI body on an Anthropic path, never an Anthropic one on the OpenAI
    paths: the same refusal, both ways."""
    url = root_url(served)
    async with aiohttp.ClientSession() as s:
        async with s.request(method, url + path, data=body, headers=headers) as resp:
            assert resp.status == status
            assert resp.headers["Content-Type"].startswith("application/json")
            assert_anthropic_error(await resp.json(), ANTHROPIC_TYPES[status])
        openai_path = path.replace("/messages/count_tokens", "/chat/completions")
        openai_path = openai_path.replace("/messages", "/chat/completions")
        plain = {k: v for k, v in headers.items() if k != "anthropic-version"}
        async with s.request(method, url + openai_path, data=body, headers=plain) as resp:
            assert resp.status == (404 if "batches" in path else status)
            assert_openai_error(await resp.json())


ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    415: "invalid_request_error",
}


async def stalled_head(served: Served, start: bytes) -> bytes:
    """Send the start of a head, then nothing: the header deadline's answer."""
    assert served.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    try:
        writer.write(start)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


async def test_the_listener_picks_the_body_by_path(serve: ServeFactory) -> None:
    """Below the app, before aiohttp has a request: a chunked body its parser refuses, and
    a head trickled in past the header deadline, answered in the body of the path's API."""
    served = await serve(header_timeout_s=1.0)
    for path, anthropic_body in (("/v1/messages", True), ("/v1/chat/completions", False)):
        head = f"POST {path}?beta=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        data = (
            head + "Content-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
        ).encode()
        status, _, body = parse(await exchange(served.server.port, data))
        assert status == 400
        late, _, late_body = parse(await stalled_head(served, head.encode()))
        assert late == 408
        if anthropic_body:
            assert_anthropic_error(body, "invalid_request_error")
            assert_anthropic_error(late_body, "timeout_error")
        else:
            assert_openai_error(body)
            assert_openai_error(late_body)


# ------------------------------------------------------------------ keys and headers


async def test_keys_from_x_api_key_or_bearer_on_every_route(serve: ServeFactory) -> None:
    served = await serve(api_keys=["secret-key"])
    url = root_url(served)
    body = {"model": CLAUDE, "max_tokens": 5, "messages": say(fake(answer="ok"))}
    chat = {"model": CLAUDE, "messages": say(fake(answer="ok"))}
    async with aiohttp.ClientSession() as s:
        for auth in ({"x-api-key": "secret-key"}, {"Authorization": "Bearer secret-key"}):
            for path, payload in (("/v1/messages", body), ("/v1/chat/completions", chat)):
                async with s.post(url + path, json=payload, headers=auth) as resp:
                    assert resp.status == 200, await resp.text()
            for path in ("/v1/models", "/metrics", "/openapi.json"):
                async with s.get(url + path, headers=auth) as resp:
                    assert resp.status == 200
        for wrong in ({}, {"x-api-key": "nope"}, {"Authorization": "Bearer nope"}):
            async with s.post(url + "/v1/messages", json=body, headers=wrong) as resp:
                assert resp.status == 401
                assert_anthropic_error(await resp.json(), "authentication_error")
            async with s.post(url + "/v1/chat/completions", json=chat, headers=wrong) as resp:
                assert resp.status == 401
                assert_openai_error(await resp.json())
        # Claude Code's start-up probe carries no key
        async with s.head(url + "/") as resp:
            assert resp.status == 200
        async with s.get(url + "/") as resp:
            assert resp.status == 401
            assert_openai_error(await resp.json())
    # both SDKs with their own auth header
    for kw in ({"api_key": "secret-key"}, {"auth_token": "secret-key"}):
        c = anthropic.AsyncAnthropic(base_url=url, max_retries=0, **kw)  # type: ignore[arg-type]
        try:
            m = await c.messages.create(**body)  # type: ignore[arg-type]
            assert m.content[0].text == "ok"  # type: ignore[union-attr]
        finally:
            await c.close()


# ------------------------------------------------------------------ what Claude Code sends


def claude_code_tools() -> list[dict[str, Any]]:
    """24 tools with large nested schemas, by the names Claude Code 2.1.197 declares."""
    names = [
        "Agent",
        "Bash",
        "CronCreate",
        "CronDelete",
        "CronList",
        "Edit",
        "EnterWorktree",
        "ExitWorktree",
        "NotebookEdit",
        "Read",
        "ReportFindings",
        "ScheduleWakeup",
        "SendMessage",
        "Skill",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "TaskStop",
        "TaskUpdate",
        "WebFetch",
        "WebSearch",
        "Workflow",
        "Write",
    ]
    tools = []
    for i, name in enumerate(names):
        item = {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": f"Where {name} works. " * 8},
                "mode": {"type": "string", "enum": ["a", "b", "c"]},
                "options": {
                    "type": "object",
                    "properties": {
                        "depth": {"type": "integer", "minimum": 0},
                        "filters": {
                            "type": "array",
                            "items": {
                                "anyOf": [
                                    {"type": "string"},
                                    {
                                        "type": "object",
                                        "properties": {"k": {"type": "string"}},
                                        "additionalProperties": False,
                                    },
                                ]
                            },
                        },
                    },
                },
            },
            "required": ["path"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        }
        tools.append(
            {
                "name": name,
                "description": f"{name}: " + "Use this tool carefully and precisely. " * 60,
                "input_schema": item,
                **({"cache_control": {"type": "ephemeral"}} if i == 23 else {}),
            }
        )
    return tools


def claude_code_body(model: str, text: str) -> dict[str, Any]:
    cached = {"type": "ephemeral"}
    return {
        "model": model,
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
            {
                "type": "text",
                "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                "cache_control": cached,
            },
            {"type": "text", "text": "Instructions. " * 400, "cache_control": cached},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                    {"type": "text", "text": text, "cache_control": cached},
                ],
            },
            {"role": "system", "content": "Mid-conversation system note."},
        ],
        "tools": claude_code_tools(),
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "user_abc_account__session_123"},
    }


CLAUDE_CODE_HEADERS = {
    "x-api-key": "gateway-key",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
    "thinking-token-count-2026-05-13,context-management-2025-06-27,"
    "prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,effort-2025-11-24",
    "User-Agent": "claude-cli/2.1.197 (external, sdk-cli)",
}


@pytest.mark.parametrize("model", MODELS)
async def test_claude_codes_real_request_is_answered(serve: ServeFactory, model: str) -> None:
    served = await serve(api_keys=["gateway-key"])
    body = claude_code_body(
        model, "say hi" + fake(answer=json.dumps({"tool_call": None, "response": "hi!"}))
    )
    if model == CODEX:
        body = claude_code_body(model, "say hi" + fake(answer="hi!"))
    assert len(json.dumps(body)) > 70_000
    async with aiohttp.ClientSession() as s:
        async with s.head(root_url(served) + "/") as probe:
            assert probe.status == 200
        async with s.post(
            root_url(served) + "/v1/messages?beta=true", json=body, headers=CLAUDE_CODE_HEADERS
        ) as resp:
            assert resp.status == 200, await resp.text()
            raw = (await resp.read()).decode()
    names = [ln[7:] for ln in raw.split("\n") if ln.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    text = "".join(
        json.loads(ln[6:])["delta"].get("text", "")
        for ln in raw.split("\n")
        if ln.startswith("data: ") and '"text_delta"' in ln
    )
    assert text == "hi!"


async def test_claude_codes_effort_reaches_the_cli(served: Served) -> None:
    """``output_config.effort`` is the call's reasoning effort (claude's ``--effort``)."""
    body = claude_code_body(CLAUDE, "hi" + fake(answer="ok"))
    body["stream"] = False
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            root_url(served) + "/v1/messages?beta=true", json=body, headers=CLAUDE_CODE_HEADERS
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
    req = messages_to_chat(checked(MessagesRequest, body)).request
    assert req.reasoning_effort == "high"
    argv = served.gateway.plan(req).launch.argv
    assert argv[argv.index("--effort") + 1] == "high"


# ------------------------------------------------------------------ count_tokens, models


async def test_count_tokens_is_an_estimate_and_runs_nothing(
    client: anthropic.AsyncAnthropic, served: Served
) -> None:
    short = await client.messages.count_tokens(model=CLAUDE, messages=say("hi"))
    longer = await client.messages.count_tokens(
        model=GEMINI, messages=say("hi " * 400), system="Be brief.", tools=[WEATHER]
    )
    assert 0 < short.input_tokens < longer.input_tokens
    assert longer.input_tokens >= 1200 // 4
    assert served.gateway.supervisor.status()["peak_processes"] == 0  # no CLI ran
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.count_tokens(model="llama-3-70b", messages=say("hi"))


async def test_models_in_anthropics_shape(client: anthropic.AsyncAnthropic, served: Served) -> None:
    page = await client.models.list()
    ids = [m.id for m in page.data]
    assert CLAUDE in ids or any(i.startswith("claude") for i in ids)
    for m in page.data:
        ModelInfo.model_validate(m.model_dump())
        assert m.type == "model" and m.display_name
    one = await client.models.retrieve(ids[0])
    assert one.id == ids[0] and one.type == "model"
    routed = await client.models.retrieve("gemini-3-pro")  # not listed, but routed
    assert routed.id == "gemini-3-pro"
    with pytest.raises(anthropic.NotFoundError) as info:
        await client.models.retrieve("llama-3-70b")
    assert_anthropic_error(info.value.body, "not_found_error")
    # without anthropic-version: OpenAI's list, as before
    oa = openai.AsyncOpenAI(base_url=served.base_url, api_key="x", max_retries=0)
    try:
        assert [m.id for m in (await oa.models.list()).data] == ids
        with pytest.raises(openai.NotFoundError) as missing:
            await oa.models.retrieve("llama-3-70b")
        assert missing.value.code == "model_not_found"
    finally:
        await oa.close()


# ------------------------------------------------------------------ other clients


async def test_the_request_model_accepts_what_the_sdk_sends() -> None:
    """Every body the anthropic SDK sends for the calls of these tests validates."""
    sent: list[dict[str, Any]] = []

    def capture(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(500, json={"type": "error", "error": {"type": "x", "message": "c"}})

    c = anthropic.Anthropic(
        base_url="http://127.0.0.1:9",
        api_key="k",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(capture)),
    )
    for kwargs in (
        {"messages": say("hi")},
        {
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "x"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
                    ],
                },
            ],
            "tools": [WEATHER],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u"},
            "output_config": {"effort": "low"},
            "stream": True,
        },
    ):
        with pytest.raises(Exception, match="c"):
            c.messages.create(model=CLAUDE, max_tokens=4096, **kwargs)  # type: ignore[call-overload]
    c.close()
    assert len(sent) == 2
    for body in sent:
        MessagesRequest.model_validate(body)


async def test_litellm_anthropic_provider(served: Served) -> None:
    """LiteLLM's ``anthropic/`` provider (x-api-key, 2023-06-01) as a third client:
    text, a stream, and a tool call in OpenAI's shape from Anthropic's."""
    import litellm

    base = root_url(served)
    r = await litellm.acompletion(
        model=f"anthropic/{GEMINI}",
        api_base=base,
        api_key="k",
        messages=say("hi" + fake(answer="Hello from LiteLLM")),
        max_tokens=100,
    )
    assert r.choices[0].message.content == "Hello from LiteLLM"  # type: ignore[union-attr]
    assert r.usage.prompt_tokens > 0  # type: ignore[attr-defined]
    stream = await litellm.acompletion(
        model=f"anthropic/{CLAUDE}",
        api_base=base,
        api_key="k",
        messages=say("hi" + fake(answer="streamed reply", chunks=3)),
        max_tokens=100,
        stream=True,
    )
    text = ""
    async for chunk in stream:  # type: ignore[union-attr]
        text += chunk.choices[0].delta.content or ""
    assert text == "streamed reply"
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": WEATHER["input_schema"],
        },
    }
    r = await litellm.acompletion(
        model=f"anthropic/{CODEX}",
        api_base=base,
        api_key="k",
        messages=say("weather?" + fake(**calls(CODEX, call))),
        tools=[tool],
        max_tokens=100,
    )
    made = r.choices[0].message.tool_calls  # type: ignore[union-attr]
    assert made and made[0].function.name == "get_weather"
    assert json.loads(made[0].function.arguments) == {"city": "Paris"}
    assert r.choices[0].finish_reason == "tool_calls"  # type: ignore[union-attr]


async def test_messages_are_counted_under_their_own_endpoint(served: Served) -> None:
    c = sdk(served)
    try:
        await c.messages.create(model=CLAUDE, max_tokens=5, messages=say(fake(answer="ok")))
        with pytest.raises(anthropic.BadRequestError):
            await c.messages.create(model=CLAUDE, max_tokens=0, messages=say("x"))
    finally:
        await c.close()
    async with aiohttp.ClientSession() as s, s.get(root_url(served) + "/metrics") as resp:
        text = await resp.text()
    assert 'endpoint="messages"' in text
    served_line = [ln for ln in text.splitlines() if ln.startswith("cli_proxy_requests_total{")]
    assert any('endpoint="messages"' in ln and 'status="200"' in ln for ln in served_line)
    assert any('endpoint="messages"' in ln and 'status="400"' in ln for ln in served_line)


async def test_concurrent_streams_stay_apart(client: anthropic.AsyncAnthropic) -> None:
    async def one(i: int) -> str:
        async with client.messages.stream(
            model=[CLAUDE, GEMINI, CODEX][i % 3],
            max_tokens=50,
            messages=say(fake(answer=f"answer {i}", chunks=4)),
        ) as stream:
            return await stream.get_final_text()

    assert await asyncio.gather(*(one(i) for i in range(6))) == [f"answer {i}" for i in range(6)]
