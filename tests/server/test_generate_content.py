"""Google's Gemini API end to end, judged by the official ``google-genai`` SDK: SDK -> real
HTTP -> gateway -> fake claude / gemini / codex CLI processes. Text, streams, function
calling round trips (manual and automatic), images, thinking, every error, the model list,
under ``/v1beta/`` (the Gemini CLI, google-genai 2.x) and ``/v1/`` (google-genai 3.x).
Every body is also validated against the SDK's own response types, which forbid unknown
keys (``extra="forbid"``)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog
from google import genai
from google.genai import errors, types

from tests.conftest import Served, ServeFactory, fake
from tests.server.test_messages import CODEX, GEMINI, JPEG, MODELS, PNG, calls, thought

CLAUDE = "claude-sonnet-4-6"
VERSIONS = ["v1beta", "v1"]


def root_url(served: Served) -> str:
    return str(served.server.make_url("/")).rstrip("/")


def make_client(served: Served, version: str = "v1beta", **options: Any) -> genai.Client:
    return genai.Client(
        api_key=options.pop("api_key", "test-key"),
        http_options=types.HttpOptions(base_url=root_url(served), api_version=version, **options),
    )


@pytest.fixture(params=VERSIONS)
async def client(served: Served, request: pytest.FixtureRequest) -> AsyncIterator[genai.Client]:
    c = make_client(served, request.param)
    yield c
    await c.aio.aclose()


def strict(raw: dict[str, Any]) -> types.GenerateContentResponse:
    """A body as the SDK's own model reads it with unknown keys forbidden."""
    return types.GenerateContentResponse.model_validate(raw)


async def raw_post(
    served: Served, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    url = str(served.server.make_url(path))
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.read()


def sse_payloads(raw: bytes) -> list[dict[str, Any]]:
    text = raw.decode()
    assert ":" not in [line[:1] for line in text.splitlines()], "an SSE comment line"
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Current weather for a city",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"city": types.Schema(type=types.Type.STRING)},
        required=["city"],
    ),
)


# ------------------------------------------------------------------ text and streams


@pytest.mark.parametrize("model", MODELS)
async def test_text(client: genai.Client, model: str) -> None:
    r = await client.aio.models.generate_content(
        model=model,
        contents="hello " + fake(answer="Hi there"),
        config=types.GenerateContentConfig(system_instruction="Be brief."),
    )
    assert r.text == "Hi there"
    cand = r.candidates[0]  # type: ignore[index]
    assert cand.finish_reason == types.FinishReason.STOP and cand.content.role == "model"  # type: ignore[union-attr]
    u = r.usage_metadata
    assert u is not None and u.prompt_token_count and u.candidates_token_count
    assert u.total_token_count == u.prompt_token_count + u.candidates_token_count + (
        u.thoughts_token_count or 0
    )
    assert r.model_version == model and r.response_id


@pytest.mark.parametrize("model", MODELS)
async def test_models_prefix_and_raw_body_is_strict(served: Served, model: str) -> None:
    body = {"contents": [user("hi " + fake(answer="strict"))]}
    status, headers, raw = await raw_post(
        served,
        f"/v1beta/models/models/{model}:generateContent".replace("models/models/", "models/"),
        body,
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert strict(json.loads(raw)).text == "strict"
    status, _, raw = await raw_post(served, f"/v1/models/{model}:generateContent", body)
    assert status == 200 and strict(json.loads(raw)).text == "strict"


@pytest.mark.parametrize("model", MODELS)
async def test_stream_equals_whole(client: genai.Client, model: str) -> None:
    contents = "go " + fake(answer="streamed words", chunks=4)
    whole = await client.aio.models.generate_content(model=model, contents=contents)
    pieces: list[str] = []
    last: types.GenerateContentResponse | None = None
    async for chunk in await client.aio.models.generate_content_stream(
        model=model, contents=contents
    ):
        pieces.append(chunk.text or "")
        last = chunk
    assert "".join(pieces) == whole.text == "streamed words"
    assert last is not None and last.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert last.usage_metadata.candidates_token_count == whole.usage_metadata.candidates_token_count  # type: ignore[union-attr]


async def test_sse_stream_raw(served: Served) -> None:
    body = {"contents": [user("go " + fake(answer="abc def", chunks=2))]}
    status, headers, raw = await raw_post(
        served, f"/v1beta/models/{CLAUDE}:streamGenerateContent?alt=sse", body
    )
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    chunks = sse_payloads(raw)
    for c in chunks:
        strict(c)
    assert (
        "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"])
        == "abc def"
    )
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "usageMetadata" in chunks[-1]
    assert len({c["responseId"] for c in chunks}) == 1


async def test_json_array_stream_without_alt_sse(served: Served) -> None:
    body = {"contents": [user("go " + fake(answer="abc def", chunks=2))]}
    status, headers, raw = await raw_post(
        served, f"/v1beta/models/{GEMINI}:streamGenerateContent", body
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    chunks = json.loads(raw)
    assert isinstance(chunks, list) and len(chunks) >= 3
    for c in chunks:
        strict(c)
    text = "".join(
        p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"]
    )
    assert text == "abc def"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_keepalives_are_data_events(serve: ServeFactory) -> None:
    """A long silence: keep-alives are empty-text chunks the SDK takes, never ``:`` lines."""
    served = await serve(keepalive_s=0.2, stream_head_hold_s=0.05)
    body = {"contents": [user("slow " + fake(answer="late", hang=1.2))]}
    status, _, raw = await raw_post(
        served, f"/v1beta/models/{CLAUDE}:streamGenerateContent?alt=sse", body
    )
    assert status == 200
    chunks = sse_payloads(raw)  # asserts no comment line
    empties = [c for c in chunks if c["candidates"][0]["content"]["parts"] == [{"text": ""}]]
    assert len(empties) >= 3  # keep-alives (and the empty last chunk)
    c = make_client(served)
    texts = [
        ch.text
        async for ch in await c.aio.models.generate_content_stream(
            model=CLAUDE, contents="slow " + fake(answer="late", hang=1.2)
        )
    ]
    assert "".join(t or "" for t in texts) == "late"
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:streamGenerateContent", body)
    assert json.loads(raw)[-1]["candidates"][0]["finishReason"] == "STOP"  # array keep-alives


# ------------------------------------------------------------------ function calling


@pytest.mark.parametrize("model", MODELS)
async def test_function_call_round_trip_manual(client: genai.Client, model: str) -> None:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER])])
    ask = "weather in Paris? " + fake(
        **calls(model, {"name": "get_weather", "arguments": {"city": "Paris"}})
    )
    r = await client.aio.models.generate_content(model=model, contents=ask, config=config)
    call = r.function_calls[0]  # type: ignore[index]
    assert call.name == "get_weather" and call.args == {"city": "Paris"} and call.id
    assert r.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    # the documented way back: Part.from_function_response, which carries no id
    history = [
        types.Content(role="user", parts=[types.Part(text=ask)]),
        r.candidates[0].content,  # type: ignore[index]
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(name="get_weather", response={"temp_c": 21}),
                types.Part(
                    text="so? " + fake(echo_prompt=True)
                    if model != CODEX
                    else "so? " + fake(echo_channel=True)
                ),
            ],
        ),
    ]
    r2 = await client.aio.models.generate_content(model=model, contents=history, config=config)
    seen = r2.text or ""
    assert '"temp_c":21' in seen.replace(" ", "").replace("\\", "")
    assert "get_weather" in seen


@pytest.mark.parametrize("model", [CLAUDE, CODEX])
async def test_function_call_streamed(client: genai.Client, model: str) -> None:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER])])
    ask = "go " + fake(**calls(model, {"name": "get_weather", "arguments": {"city": "Oslo"}}))
    got = []
    async for chunk in await client.aio.models.generate_content_stream(
        model=model, contents=ask, config=config
    ):
        got += chunk.function_calls or []
    assert [(c.name, c.args) for c in got] == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])  # the codex fake has no "steps"
async def test_automatic_function_calling(client: genai.Client, model: str) -> None:
    """The SDK runs the function itself and sends its result back; the model (a fake
    agent whose answer follows the number of tool results) answers with what it got."""
    ran: list[str] = []

    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return "sunny"

    call = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "Rome"}}})
    r = await client.aio.models.generate_content(
        model=model,
        contents="weather in Rome? " + fake(steps=[call, "It is sunny in Rome."]),
        config=types.GenerateContentConfig(tools=[get_weather]),
    )
    assert ran == ["Rome"]
    assert not r.function_calls and r.text == "It is sunny in Rome."
    history = r.automatic_function_calling_history or []
    assert [c.role for c in history] == ["user", "model", "user"]
    sent = history[2].parts[0].function_response  # type: ignore[index]
    assert sent is not None and sent.name == "get_weather" and sent.response == {"result": "sunny"}


async def test_function_response_matched_by_name_and_order(served: Served) -> None:
    """Two calls of one function and one of another, answered without ids: each result
    reaches the call of its name, in order."""
    body = {
        "contents": [
            user("go"),
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "f", "args": {"n": 1}}},
                    {"functionCall": {"name": "g", "args": {}}},
                    {"function_call": {"name": "f", "args": {"n": 2}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "g", "response": {"r": "G"}}},
                    {"functionResponse": {"name": "f", "response": {"r": "F1"}}},
                    {"function_response": {"name": "f", "response": {"r": "F2"}}},
                    {"text": "next " + fake(echo_prompt=True)},
                ],
            },
        ],
        "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}],
    }
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:generateContent", body)
    assert status == 200, raw
    prompt = strict(json.loads(raw)).text or ""
    assert prompt.index('"n":1') < prompt.index('"n":2')
    # each result follows its own call's id
    assert (
        prompt.count("call_g0") == 2
        and prompt.count("call_g1") == 2
        and prompt.count("call_g2") == 2
    )
    assert prompt.index("F1") < prompt.index("F2")


async def test_function_calling_config(served: Served) -> None:
    body: dict[str, Any] = {
        "contents": [user("x " + fake(echo_prompt=True))],
        "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "g"}, {"name": "h"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["g"]}},
    }
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:generateContent", body)
    assert status == 200
    prompt = strict(json.loads(raw)).text or ""
    assert '"g"' in prompt or 'name="g"' in prompt or ">g<" in prompt
    assert '"h"' not in prompt and 'name="h"' not in prompt
    body["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"] = ["nope"]
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:generateContent", body)
    assert status == 400 and json.loads(raw)["error"]["status"] == "INVALID_ARGUMENT"


# ------------------------------------------------------------------ images and thinking


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("model", MODELS)
async def test_images_reach_the_cli(client: genai.Client, model: str) -> None:
    """google-genai sends inline bytes as URL-safe base64; the CLI gets the same bytes."""
    echo = {"echo_channel": True} if model == CODEX else {"echo_blocks": True}
    r = await client.aio.models.generate_content(
        model=model,
        contents=[
            types.Part.from_bytes(data=PNG, mime_type="image/png"),
            types.Part.from_bytes(data=JPEG, mime_type="image/jpeg"),
            "what colours? " + fake(**echo),
        ],
    )
    seen = json.loads(r.text or "")
    if model == CODEX:
        dumped = json.dumps(seen)
        assert base64.b64encode(PNG).decode() in dumped
        assert base64.b64encode(JPEG).decode() in dumped
    else:
        got = [(b["image"], b["sha256"]) for b in seen if "image" in b]
        assert got == [("image/png", sha(PNG)), ("image/jpeg", sha(JPEG))]


async def test_url_safe_base64_and_mixed_keys(served: Served) -> None:
    data = base64.urlsafe_b64encode(PNG).decode().rstrip("=")
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"inline_data": {"data": data, "mimeType": "image/png"}},
                    {"inlineData": {"data": data, "mime_type": "image/png"}},
                    {"text": "look " + fake(echo_blocks=True)},
                ],
            }
        ],
        "system_instruction": {"role": "user", "parts": [{"text": "sys"}]},
        "generationConfig": {
            "thinkingConfig": {"include_thoughts": False},
            "max_output_tokens": 50,
        },
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "cachedContent": "cachedContents/abc",
    }
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:generateContent", body)
    assert status == 200, raw
    seen = json.loads(strict(json.loads(raw)).text or "")
    assert [b["sha256"] for b in seen if "image" in b] == [sha(PNG), sha(PNG)]


@pytest.mark.parametrize("model", MODELS)
async def test_thoughts_when_asked(client: genai.Client, model: str) -> None:
    contents = "think " + fake(answer="42", **thought(model, "pondering"))
    asked = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=1024)
    )
    r = await client.aio.models.generate_content(model=model, contents=contents, config=asked)
    parts = r.candidates[0].content.parts  # type: ignore[index,union-attr]
    assert [(bool(p.thought), p.text) for p in parts] == [(True, "pondering"), (False, "42")]  # type: ignore[union-attr]
    streamed = [
        (bool(p.thought), p.text)
        async for ch in await client.aio.models.generate_content_stream(
            model=model, contents=contents, config=asked
        )
        for p in ch.candidates[0].content.parts  # type: ignore[index,union-attr]
        if p.text
    ]
    assert "".join(t for th, t in streamed if th) == "pondering"
    assert "".join(t for th, t in streamed if not th) == "42"
    plain = await client.aio.models.generate_content(model=model, contents=contents)
    assert [p.thought for p in plain.candidates[0].content.parts] == [None]  # type: ignore[index,union-attr]
    assert plain.text == "42"


# ------------------------------------------------------------------ errors


def google_error(body: Any, status: int, name: str) -> None:
    assert set(body) == {"error"}
    err = body["error"]
    assert err["code"] == status and err["status"] == name
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err.get("details", []), list)


async def test_400_names_the_field(client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as info:
        await client.aio.models.generate_content(
            model=CLAUDE,
            contents="hi",
            config=types.GenerateContentConfig(candidate_count=2),
        )
    assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
    assert "candidateCount" in (info.value.message or "")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"contents": []}, "contents"),
        ({"contents": [{"role": "robot", "parts": [{"text": "x"}]}]}, "contents[0].role"),
        (
            {"contents": [{"parts": [{"fileData": {"fileUri": "gs://b/x.png"}}]}]},
            "contents[0].parts[0].fileData.fileUri",
        ),
        (
            {
                "contents": [
                    {"parts": [{"inlineData": {"data": "AAAA", "mimeType": "application/pdf"}}]}
                ]
            },
            "application/pdf",
        ),
        (
            {"contents": [{"parts": [{"functionResponse": {"name": "f", "response": {}}}]}]},
            "answers no functionCall",
        ),
        (
            {"contents": [user("x")], "generationConfig": {"responseMimeType": "text/x.enum"}},
            "responseMimeType",
        ),
    ],
)
async def test_bad_requests_in_googles_shape(served: Served, body: Any, words: str) -> None:
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:generateContent", body)
    assert status == 400
    err = json.loads(raw)
    google_error(err, 400, "INVALID_ARGUMENT")
    assert words in err["error"]["message"]


async def test_401_unauthenticated_and_key_sources(serve: ServeFactory) -> None:
    served = await serve(api_keys=["sekrit"])
    bad = make_client(served, api_key="wrong")
    with pytest.raises(errors.ClientError) as info:
        await bad.aio.models.generate_content(model=CLAUDE, contents="hi")
    assert info.value.code == 401 and info.value.status == "UNAUTHENTICATED"
    good = make_client(served, api_key="sekrit")
    r = await good.aio.models.generate_content(model=CLAUDE, contents="hi " + fake(answer="in"))
    assert r.text == "in"
    body = {"contents": [user("hi " + fake(answer="by query"))]}
    with structlog.testing.capture_logs() as logs:
        status, _, raw = await raw_post(
            served, f"/v1beta/models/{CLAUDE}:generateContent?key=sekrit", body
        )
        bad_status, _, _ = await raw_post(
            served, f"/v1beta/models/{CLAUDE}:generateContent?key=wrong", body
        )
    assert status == 200 and strict(json.loads(raw)).text == "by query"
    assert bad_status == 401
    assert "sekrit" not in repr(logs) and "wrong" not in repr(logs)
    # ?key= is a Gemini-API thing only
    status, _, _ = await raw_post(served, "/v1/chat/completions?key=sekrit", {"model": CLAUDE})
    assert status == 401


async def test_403_permission_denied(served: Served) -> None:
    c = make_client(served, headers={"Origin": "https://evil.example"})
    with pytest.raises(errors.ClientError) as info:
        await c.aio.models.generate_content(model=CLAUDE, contents="hi")
    assert info.value.code == 403 and info.value.status == "PERMISSION_DENIED"


async def test_404_not_found(client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as info:
        await client.aio.models.generate_content(model="gpt-4o", contents="hi")
    assert info.value.code == 404 and info.value.status == "NOT_FOUND"
    with pytest.raises(errors.ClientError) as info:
        await client.aio.models.get(model="no-such-model")
    assert info.value.code == 404 and info.value.status == "NOT_FOUND"


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
async def test_429_resource_exhausted_with_retry_after(client: genai.Client, model: str) -> None:
    spec = fake(is_error=True, api_error_status=429, error_message="API Error: 429 rate_limit")
    with pytest.raises(errors.ClientError) as info:
        await client.aio.models.generate_content(model=model, contents=spec)
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert int(info.value.response.headers["retry-after"]) >= 1  # type: ignore[union-attr]
    retry = [d for d in info.value.details["error"]["details"] if "RetryInfo" in d["@type"]]
    assert retry and retry[0]["retryDelay"].endswith("s")


async def test_503_unavailable(serve: ServeFactory) -> None:
    served = await serve(claude_bin="/nonexistent/claude")
    c = make_client(served)
    with pytest.raises(errors.ServerError) as info:
        await c.aio.models.generate_content(model=CLAUDE, contents="hi")
    assert info.value.code == 503 and info.value.status == "UNAVAILABLE"


async def test_a_failure_after_the_head_is_an_error_the_sdk_raises(serve: ServeFactory) -> None:
    served = await serve(stream_head_hold_s=0)
    spec = fake(
        answer="partial words",
        chunks=3,
        no_result=True,
        exit=1,
        print_before_exit=True,
        stderr="API Error: 500",
    )
    body = {"contents": [user(spec)]}
    status, _, raw = await raw_post(
        served, f"/v1beta/models/{CLAUDE}:streamGenerateContent?alt=sse", body
    )
    assert status == 200
    events = sse_payloads(raw)
    google_error(events[-1], events[-1]["error"]["code"], events[-1]["error"]["status"])
    assert events[-1]["error"]["code"] >= 500
    c = make_client(served)
    got = ""
    with pytest.raises(errors.APIError):
        async for ch in await c.aio.models.generate_content_stream(model=CLAUDE, contents=spec):
            got += ch.text or ""
    status, _, raw = await raw_post(served, f"/v1beta/models/{CLAUDE}:streamGenerateContent", body)
    assert "error" in json.loads(raw)[-1]  # the JSON array stays an array


# ------------------------------------------------------------------ models and counting


async def test_models_list_and_get(client: genai.Client, served: Served) -> None:
    names = [m.name async for m in await client.aio.models.list()]
    ids = [m for m, _ in served.gateway.source.models()]
    assert names == ["models/" + m for m in ids]
    m = await client.aio.models.get(model=CLAUDE)
    assert m.name == "models/" + CLAUDE
    assert m.supported_actions == ["generateContent", "streamGenerateContent", "countTokens"]
    assert m.input_token_limit and m.output_token_limit


async def test_v1_models_keeps_openais_shape_without_google_headers(served: Served) -> None:
    page = await served.client.models.list()
    assert page.data and page.data[0].object == "model"


@pytest.mark.parametrize("model", [CLAUDE, "models/" + GEMINI, CODEX])
async def test_count_tokens_is_an_estimate(client: genai.Client, model: str) -> None:
    short = await client.aio.models.count_tokens(model=model, contents="hi")
    longer = await client.aio.models.count_tokens(model=model, contents="hello there " * 50)
    assert short.total_tokens and longer.total_tokens
    assert longer.total_tokens > short.total_tokens
