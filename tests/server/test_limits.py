"""Limits, bad input and auth over real HTTP: every refusal is an OpenAI error body.

Raw aiohttp requests are used wherever the openai SDK would refuse to send the payload.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from tests.conftest import Served, ServeFactory, fake

MODEL = "claude-sonnet-4-6"
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def assert_error_body(body: Any) -> dict[str, Any]:
    """The exact OpenAI error envelope: {"error": {message, type, param, code}}."""
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    assert err["param"] is None or isinstance(err["param"], str)
    assert err["code"] is None or isinstance(err["code"], str)
    return dict(err)


async def raw(
    served: Served,
    method: str,
    path: str,
    *,
    data: bytes | None = None,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One raw request; returns status, headers and the decoded JSON body."""
    url = served.server.make_url(path)
    hdrs = {"Authorization": "Bearer test", **(headers or {})}
    if json_body is not None:
        data = json.dumps(json_body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=hdrs) as resp,
    ):
        raw_body = await resp.read()
        assert resp.content_type == "application/json", (resp.status, resp.content_type, raw_body)
        return resp.status, dict(resp.headers), json.loads(raw_body)


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": user("hi"), **fields}


# ------------------------------------------------------------------ body-level


async def test_body_too_large_is_413(serve: ServeFactory) -> None:
    s = await serve(max_body_bytes=4096)
    body = json.dumps(chat(messages=user("x" * 10_000))).encode()
    status, _, resp = await raw(
        s, "POST", "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    assert status == 413
    err = assert_error_body(resp)
    assert err["code"] == "request_too_large"
    assert err["type"] == "invalid_request_error"


async def test_body_too_large_via_sdk(serve: ServeFactory) -> None:
    s = await serve(max_body_bytes=4096)
    with pytest.raises(openai.APIStatusError) as info:
        await s.client.chat.completions.create(model=MODEL, messages=user("x" * 10_000))  # type: ignore[arg-type]
    assert info.value.status_code == 413


@pytest.mark.parametrize(
    "data",
    [b"{not json", b"", b"\xff\xfe garbage", b'{"model": "x", "messages": [}'],
    ids=["broken", "empty", "binary", "truncated"],
)
async def test_malformed_json_is_400(served: Served, data: bytes) -> None:
    status, _, resp = await raw(
        served,
        "POST",
        "/v1/chat/completions",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    assert status == 400
    err = assert_error_body(resp)
    assert err["code"] == "invalid_json"


@pytest.mark.parametrize("payload", [[], [1, 2], "a string", 42, None], ids=repr)
async def test_non_object_json_is_400(served: Served, payload: Any) -> None:
    status, _, resp = await raw(
        served,
        "POST",
        "/v1/chat/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert status == 400
    assert_error_body(resp)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "r"}]},
            "messages[1].tool_call_id",
        ),
        ({"temperature": "x"}, "temperature"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"n": 3}, "n"),
        ({"stream": "yes please"}, "stream"),
        ({"model": ""}, "model"),
        ({"model": 7}, "model"),
        ({"tools": "all"}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, None),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"stop": 5}, "stop"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else str(v),
)
async def test_wrong_types_name_the_param(
    served: Served, fields: dict[str, Any], param: str | None
) -> None:
    status, _, resp = await raw(served, "POST", "/v1/chat/completions", json_body=chat(**fields))
    assert status == 400, resp
    err = assert_error_body(resp)
    assert err["type"] == "invalid_request_error"
    if param is None:
        assert err["param"] is not None and err["param"].startswith("tools[0]")
    else:
        assert err["param"] == param, err
        assert param in err["message"]


async def test_missing_model_and_messages(served: Served) -> None:
    status, _, resp = await raw(served, "POST", "/v1/chat/completions", json_body={})
    assert status == 400
    err = assert_error_body(resp)
    assert err["param"] in {"model", "messages"}


async def test_empty_messages_is_400(served: Served) -> None:
    status, _, resp = await raw(served, "POST", "/v1/chat/completions", json_body=chat(messages=[]))
    assert status == 400
    assert assert_error_body(resp)["param"] == "messages"


async def test_too_many_messages_is_400(serve: ServeFactory) -> None:
    s = await serve(max_messages=3)
    with pytest.raises(openai.BadRequestError) as info:
        await s.client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": str(i)} for i in range(4)],  # type: ignore[misc]
        )
    body: Any = info.value.body
    assert body["param"] == "messages"
    assert body["code"] == "too_many_messages"


async def test_prompt_too_long_is_400(serve: ServeFactory) -> None:
    s = await serve(max_prompt_chars=500)
    with pytest.raises(openai.BadRequestError) as info:
        await s.client.chat.completions.create(model=MODEL, messages=user("y" * 1000))  # type: ignore[arg-type]
    body: Any = info.value.body
    assert body["code"] == "context_length_exceeded"


async def test_unknown_model_is_404(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await served.client.chat.completions.create(model="gpt-9-ultra", messages=user("hi"))  # type: ignore[arg-type]
    body: Any = info.value.body
    assert body["code"] == "model_not_found"
    assert body["param"] == "model"
    with pytest.raises(openai.NotFoundError) as info2:
        await served.client.models.retrieve("gpt-9-ultra")
    assert info2.value.status_code == 404


async def test_tool_choice_naming_missing_function(served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await served.client.chat.completions.create(
            model=MODEL,
            messages=user("hi"),  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
    body: Any = info.value.body
    assert body["param"] == "tool_choice"


async def test_tool_choice_without_tools(served: Served) -> None:
    status, _, resp = await raw(
        served, "POST", "/v1/chat/completions", json_body=chat(tool_choice="required")
    )
    assert status == 400
    assert assert_error_body(resp)["param"] == "tool_choice"


async def test_duplicate_tool_names(served: Served) -> None:
    status, _, resp = await raw(
        served, "POST", "/v1/chat/completions", json_body=chat(tools=[WEATHER, WEATHER])
    )
    assert status == 400
    assert assert_error_body(resp)["param"] == "tools"


async def test_invalid_tool_schema_is_400(served: Served) -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}
    with pytest.raises(openai.BadRequestError) as info:
        await served.client.chat.completions.create(
            model=MODEL,
            messages=user("hi"),  # type: ignore[arg-type]
            tools=[bad],  # type: ignore[list-item]
        )
    body: Any = info.value.body
    assert body["param"] == "tools[0].function.parameters"
    assert "object" in body["message"]


async def test_extra_body_fields_are_accepted(served: Served) -> None:
    r = await served.client.chat.completions.create(
        model=MODEL,
        messages=user(fake(answer="extras ok")),  # type: ignore[arg-type]
        extra_body={"vendor_knob": {"deep": [1, 2]}, "top_k": 5, "reasoning_effort": "low"},
        temperature=0.2,
        max_tokens=50,
        seed=1,
        stop=["\n\n"],
        user="someone",
    )
    assert r.choices[0].message.content == "extras ok"


# ------------------------------------------------------------------ routes


@pytest.mark.parametrize("path", ["/v1/nothing", "/v2/chat/completions", "/v1/chat"])
async def test_unknown_route_is_404(served: Served, path: str) -> None:
    status, _, resp = await raw(served, "GET", path)
    assert status == 404
    assert assert_error_body(resp)["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/chat/completions"), ("PUT", "/v1/chat/completions"), ("POST", "/v1/models")],
)
async def test_wrong_method_is_405(served: Served, method: str, path: str) -> None:
    status, headers, resp = await raw(served, method, path)
    assert status == 405
    assert_error_body(resp)
    assert "Allow" in headers


async def test_success_answers_are_json(served: Served) -> None:
    for path in ("/health", "/v1/models", f"/v1/models/{MODEL}", "/models"):
        status, _, body = await raw(served, "GET", path)
        assert status == 200, path
        assert isinstance(body, dict)
    status, headers, body = await raw(
        served, "POST", "/v1/chat/completions", json_body=chat(messages=user(fake(answer="j")))
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    assert body["choices"][0]["message"]["content"] == "j"


# ------------------------------------------------------------------ auth


async def test_auth(serve: ServeFactory) -> None:
    s = await serve(api_keys=["k1"])
    url = s.server.make_url("/v1/chat/completions")
    payload = json.dumps(chat(messages=user(fake(answer="authed")))).encode()
    cases: list[tuple[dict[str, str], int]] = [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer k1x"}, 401),
        ({"Authorization": "Basic k1"}, 401),
        ({"Authorization": "k1"}, 401),
        ({"Authorization": "Bearer k1"}, 200),
        ({"Authorization": "bearer  k1 "}, 200),
    ]
    async with aiohttp.ClientSession() as session:
        for headers, want in cases:
            async with session.post(
                url, data=payload, headers={"Content-Type": "application/json", **headers}
            ) as resp:
                assert resp.status == want, headers
                assert resp.content_type == "application/json"
                body = await resp.json()
                if want == 401:
                    err = assert_error_body(body)
                    assert err["code"] == "invalid_api_key"
                    assert err["type"] == "authentication_error"
                else:
                    assert body["choices"][0]["message"]["content"] == "authed"
        async with session.get(s.server.make_url("/health")) as resp:
            assert resp.status == 200
            assert (await resp.json())["status"] == "ok"
        async with session.get(s.server.make_url("/v1/models")) as resp:
            assert resp.status == 401
        # an unknown route is not a way to probe without a key
        async with session.get(s.server.make_url("/v1/secret")) as resp:
            assert resp.status == 401


async def test_auth_with_sdk(serve: ServeFactory) -> None:
    s = await serve(api_keys=["k1", "k2"])
    bad = AsyncOpenAI(base_url=s.base_url, api_key="nope", max_retries=0)
    good = AsyncOpenAI(base_url=s.base_url, api_key="k2", max_retries=0)
    try:
        with pytest.raises(openai.AuthenticationError) as info:
            await bad.chat.completions.create(model=MODEL, messages=user("hi"))  # type: ignore[arg-type]
        body: Any = info.value.body
        assert body["code"] == "invalid_api_key"
        r = await good.chat.completions.create(model=MODEL, messages=user(fake(answer="ok2")))  # type: ignore[arg-type]
        assert r.choices[0].message.content == "ok2"
        models = await good.models.list()
        assert models.data
    finally:
        await bad.close()
        await good.close()


@pytest.mark.parametrize("backend_model", [MODEL, "gemini-2.5-pro"])
@pytest.mark.parametrize("stream", [False, True])
async def test_answer_beyond_max_answer_bytes_is_refused_and_the_cli_killed(
    serve: ServeFactory, backend_model: str, stream: bool
) -> None:
    """An answer that outgrows ``max_answer_bytes`` ends the call with 502 answer_too_large
    (a real status before any answer byte; else an SSE error event) and the CLI is gone."""
    s = await serve(max_answer_bytes=4096)
    spec = fake(answer="x" * 1000, repeat=20, chunks=40, linger=30)  # 20 kB, 40 deltas
    if not stream:
        with pytest.raises(openai.APIStatusError) as info:
            await s.client.chat.completions.create(model=backend_model, messages=user(spec))  # type: ignore[arg-type]
        assert info.value.status_code == 502
        body: Any = info.value.body
        assert body["code"] == "answer_too_large"
    else:
        got = ""
        with pytest.raises(openai.APIError) as sinfo:
            stream_ = await s.client.chat.completions.create(
                model=backend_model,
                messages=user(spec),
                stream=True,  # type: ignore[arg-type]
            )
            async for chunk in stream_:
                if chunk.choices and chunk.choices[0].delta.content:
                    got += chunk.choices[0].delta.content
        assert "answer_too_large" in str(sinfo.value) or "max_answer_bytes" in str(sinfo.value)
        assert len(got) <= 4096  # nothing beyond the limit was sent
    for _ in range(100):  # the slot is freed once the killed CLI is reaped
        if s.gateway.supervisor.running == 0:
            break
        await asyncio.sleep(0.05)
    assert s.gateway.supervisor.running == 0
