"""Hostile input never yields a 500, a text/plain page or a broken stream (issue: attack run)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.conftest import Served, ServeFactory, fake, stalled_stream

MODELS = ["claude-sonnet-4-6", "gemini-2.5-flash"]


async def post(served: Served, path: str, body: bytes, **headers: str) -> tuple[int, str, bytes]:
    hdrs = {"Content-Type": "application/json", **headers}
    async with (
        aiohttp.ClientSession() as s,
        s.post(served.server.make_url(path), data=body, headers=hdrs) as r,
    ):
        return r.status, r.content_type, await r.read()


def error_of(status: int, ctype: str, raw: bytes) -> dict[str, Any]:
    assert ctype == "application/json", raw
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err  # type: ignore[no-any-return]


@pytest.mark.parametrize("field", ["instructions", "user", "metadata"])
async def test_lone_surrogates_in_responses_fields(served: Served, field: str) -> None:
    value: Any = "bad \ud800 value"
    if field == "metadata":
        value = {"k": value}
    body = {"model": "claude-sonnet-4-6", "input": "hi", field: value}
    raw = json.dumps(body).encode()  # ASCII JSON carrying the \\ud800 escape
    status, ctype, out = await post(served, "/v1/responses", raw)
    assert status == 200 and ctype == "application/json"
    json.loads(out)
    status, ctype, out = await post(
        served, "/v1/responses", json.dumps({**body, "stream": True}).encode()
    )
    assert status == 200 and out.rstrip().endswith(b"}")  # a complete event stream
    assert b"response.completed" in out


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
async def test_a_lone_surrogate_in_the_models_output(
    served: Served, model: str, stream: bool
) -> None:
    body = {
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": fake(answer="a @SURROGATE@ b", chunks=1)}],
    }
    status, _, out = await post(served, "/v1/chat/completions", json.dumps(body).encode())
    assert status == 200
    text = out.decode("utf-8")  # valid UTF-8 throughout
    assert "\ufffd" in text
    if stream:
        assert text.endswith("data: [DONE]\n\n")


async def test_surrogate_tool_choice_name_is_a_json_400(served: Served) -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "\ud800"}},
    }
    status, ctype, out = await post(served, "/v1/chat/completions", json.dumps(body).encode())
    assert status == 400
    error_of(status, ctype, out)


async def test_invalid_utf8_authorization_is_401(serve: ServeFactory) -> None:
    served = await serve(api_keys=["k"])
    async with (
        aiohttp.ClientSession() as s,
        s.get(
            served.server.make_url("/v1/models"), headers={"Authorization": "Bearer \udcff"}
        ) as r,
    ):
        raw = await r.read()
        assert r.status == 401 and r.content_type == "application/json", raw


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("where", ["unknown_field", "tool_schema", "message"])
@pytest.mark.parametrize("depth", [100, 5000])
async def test_deep_nesting_is_a_400(served: Served, where: str, depth: int) -> None:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "x"}],
    }
    deep: Any = nested(depth) if depth < 900 else object()  # written by _deep_json
    if where == "unknown_field":
        body["extra"] = deep
    elif where == "tool_schema":
        schema = {"type": "object", "x": deep}
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    else:
        body["messages"][0]["content"] = [{"type": "text", "text": "x", "deep": deep}]
    raw = json.dumps(body).encode() if depth < 900 else _deep_json(body, depth)
    status, ctype, out = await post(served, "/v1/chat/completions", raw)
    assert status == 400
    assert error_of(status, ctype, out)["code"] == "nesting_too_deep"


def _deep_json(body: dict[str, Any], depth: int) -> bytes:
    """json.dumps itself recurses: write the deep value by hand, in place of a marker."""
    text = json.dumps(body, default=lambda _: "@DEEP@")
    return text.replace('"@DEEP@"', "[" * depth + "1" + "]" * depth).encode()


OPTION_MODELS = ["gemini/--version", "claude/--yolo", "codex/-c", "gemini/-", "claude/x/--acp"]


@pytest.mark.parametrize(
    "model",
    [
        "claude\x00-x",
        "c" * 200_000,
        "--dangerously-skip-permissions",
        "-p",
        "a b",
        "x\ny",
        "",
        *OPTION_MODELS,
    ],
    ids=["nul", "huge", "flag", "short-flag", "space", "newline", "empty", *OPTION_MODELS],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_names_that_are_not_names_are_refused(served: Served, model: str, path: str) -> None:
    """Issue 24 (D5) too: no part of a model name may start with "-" on any backend: the
    CLI would read it as an option (``gemini/--version`` printed gemini's version)."""
    if path == "/v1/chat/completions":
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "x"}]}
    else:
        body = {"model": model, "input": "x"}
    status, ctype, out = await post(served, path, json.dumps(body).encode())
    assert status == 400
    assert error_of(status, ctype, out)["param"] == "model"


@pytest.mark.parametrize("model", MODELS)
async def test_a_cli_that_lingers_after_its_result_does_not_hold_the_answer(
    serve: ServeFactory, model: str
) -> None:
    import time

    served = await serve(timeout_s=60, idle_timeout_s=30)
    t0 = time.monotonic()
    r = await served.client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": fake(answer="done", linger=60)}]
    )
    assert r.choices[0].message.content == "done"
    assert time.monotonic() - t0 < 10  # the result ended it: a short grace, then killed


async def test_closed_stdout_waits_the_idle_timeout_not_the_total(serve: ServeFactory) -> None:
    import time

    import openai

    served = await serve(timeout_s=60, idle_timeout_s=1)
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        await served.client.chat.completions.create(
            model="claude-sonnet-4-6",
            messages=[
                {"role": "user", "content": fake(answer="x", no_result=True, close_linger=60)}
            ],
        )
    assert info.value.status_code == 504
    assert time.monotonic() - t0 < 10


async def test_a_streaming_client_that_stops_reading_frees_its_slot(serve: ServeFactory) -> None:
    import time

    import structlog

    from tests.run.test_reliability import wait_until

    served = await serve(write_timeout_s=1.0, keepalive_s=0)
    supervisor = served.gateway.supervisor
    with structlog.testing.capture_logs() as logs:
        writer, head = await stalled_stream(served)  # then the client reads no more
        assert head.startswith(b"HTTP/1.1 200"), head
        assert supervisor.running == 1  # the call is under way
        t0 = time.monotonic()
        await wait_until(lambda: supervisor.running == 0, 15, "the slot to be freed")
        assert time.monotonic() - t0 < 10
    assert any(e["event"] == "slow_client_dropped" for e in logs)
    writer.close()
