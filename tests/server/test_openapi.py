"""``GET /openapi.json`` (issue #13): a valid OpenAPI 3.1 document generated from the wire
models, whose request schemas accept what the official SDK sends, and which the live
gateway keeps: schemathesis fuzzes every operation over loopback HTTP against it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.server.app import create_app
from cli_proxy.server.listener import GatewayRunner
from cli_proxy.server.openapi import build_document, document
from tests.conftest import Served, fake, fake_settings

MODELS = ["claude-sonnet-4-6", "gemini-2.5-flash"]
EXAMPLES = 60  # per operation and generation mode: bounded, the whole file stays under ~60 s


def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator for one component schema, its ``#/components/...`` refs resolvable."""
    doc = document()
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema.Draft202012Validator(root)


# ------------------------------------------------------------------ the document


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    schema = schemathesis.openapi.from_dict(doc)
    schema.validate()  # schemathesis's OpenAPI 3.1 meta-schema; raises on an invalid document
    for component in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(component)
    ops = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    assert ops == {
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages/count_tokens"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/{model}"),
        ("GET", "/health"),
        ("GET", "/metrics"),
        ("GET", "/health/ready"),
        ("GET", "/openapi.json"),
        *{
            ("POST", f"{prefix}/models/{{model}}:{verb}")
            for prefix in ("/v1beta", "/v1")
            for verb in ("generateContent", "streamGenerateContent", "countTokens")
        },
        ("GET", "/v1beta/models"),
        ("GET", "/v1beta/models/{model}"),
        ("GET", "/v1/usage"),
    }


def test_statuses_and_media_types_are_the_servers() -> None:
    paths = document()["paths"]
    chat = paths["/v1/chat/completions"]["post"]["responses"]
    assert set(chat) == {"200", "400", "401", "402", "403", "404", "408", "413", "415", "429"} | {
        "502",
        "503",
        "504",
    }
    assert set(chat["200"]["content"]) == {"application/json", "text/event-stream"}
    assert chat["429"]["headers"]["Retry-After"]
    for name, path in paths.items():
        body = "AnthropicErrorBody" if name.startswith("/v1/messages") else "ErrorBody"
        if name.startswith("/v1beta/") or name.endswith(
            (":generateContent", ":streamGenerateContent", ":countTokens")
        ):
            body = "GoogleErrorBody"
        for op in path.values():
            for status, answer in op["responses"].items():
                if status.startswith(("4", "5")):
                    ref = answer["content"]["application/json"]["schema"]["$ref"]
                    assert ref == f"#/components/schemas/{body}"
    assert "404" in paths["/v1/models/{model}"]["get"]["responses"]
    assert paths["/health"]["get"]["security"] == []  # /health never needs a key
    assert paths["/health/ready"]["get"]["security"] == []


def test_generated_from_the_models_and_cached() -> None:
    assert document() is document()
    assert build_document() == document()
    comps = document()["components"]["schemas"]
    # the request model's constraints, as pydantic states them
    model = comps["ChatCompletionRequest"]["properties"]["model"]
    assert model["maxLength"] == 128 and model["pattern"].startswith("^[A-Za-z0-9]")
    assert set(comps["ErrorDetail"]["properties"]) == {"message", "type", "param", "code"}
    assert {"message", "type"} <= set(comps["ErrorDetail"]["required"])
    # the discriminated message union keeps its discriminator, with component refs
    mapping = comps["ChatCompletionRequest"]["properties"]["messages"]["items"]["discriminator"]
    assert mapping["mapping"]["user"] == "#/components/schemas/UserMessage"


async def test_served_at_openapi_json(served: Served) -> None:
    async with httpx.AsyncClient() as client:
        r = await client.get(str(served.server.make_url("/openapi.json")))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == json.loads(json.dumps(document()))


async def test_openapi_json_needs_the_key_like_every_route(serve: Any) -> None:
    served = await serve(api_keys=["k"])
    url = str(served.server.make_url("/openapi.json"))
    async with httpx.AsyncClient() as client:
        r = await client.get(url)
        assert r.status_code == 401 and set(r.json()["error"]) == {
            "message",
            "type",
            "param",
            "code",
        }
        ok = await client.get(url, headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200 and ok.json()["openapi"].startswith("3.1")


# ------------------------------------------------- what the official SDK sends


def sdk_bodies() -> list[tuple[str, dict[str, Any]]]:
    """The request bodies openai-python really sends, captured by a mock transport."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def capture(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, json.loads(request.content)))
        return httpx.Response(500, json={"error": {"message": "captured", "type": "x"}})

    client = OpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(capture)),
    )
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    calls: list[Any] = [
        lambda: client.chat.completions.create(
            model="claude-sonnet-4-6", messages=[{"role": "user", "content": "hi"}]
        ),
        lambda: client.chat.completions.create(
            model="gemini-2.5-flash",
            messages=[
                {"role": "developer", "content": "be brief"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                        },
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            ],
            tools=[weather],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            stream=True,
            stream_options={"include_usage": True},
            temperature=0.2,
            top_p=0.9,
            max_completion_tokens=100,
            stop=["\n\n"],
            seed=7,
            n=1,
            user="u-1",
            reasoning_effort="low",
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True},
            },
            extra_body={"vendor_extra": {"a": 1}},
        ),
        lambda: client.responses.create(model="claude-sonnet-4-6", input="hi"),
        lambda: client.responses.create(
            model="gemini-2.5-flash",
            instructions="be brief",
            input=[
                {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": "{}",
                },
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
            tools=[
                {
                    "type": "function",
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {}},
                    "strict": False,
                }
            ],
            text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            reasoning={"effort": "low"},
            max_output_tokens=50,
            metadata={"k": "v"},
            stream=True,
        ),
    ]
    for call in calls:
        with pytest.raises(Exception, match="captured"):
            call()
    client.close()
    return sent


def test_the_request_schemas_accept_what_the_sdk_sends() -> None:
    chat, responses = validator("ChatCompletionRequest"), validator("ResponsesRequest")
    bodies = sdk_bodies()
    assert [p for p, _ in bodies] == ["/v1/chat/completions"] * 2 + ["/v1/responses"] * 2
    for path, body in bodies:
        v = chat if path.endswith("/chat/completions") else responses
        errors = [e.message for e in v.iter_errors(body)]
        assert not errors, (path, body, errors)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "-rf", "messages": [{"role": "user", "content": "x"}]},  # argv flag
        {"model": "claude-sonnet-4-6", "messages": []},
        {"model": "claude-sonnet-4-6", "messages": [{"role": "robot", "content": "x"}]},
        {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "x"}], "n": 2},
    ],
)
def test_the_request_schema_rejects_what_the_gateway_rejects(body: dict[str, Any]) -> None:
    assert list(validator("ChatCompletionRequest").iter_errors(body))


# ------------------------------------------------------ schemathesis over loopback


class LiveGateway:
    """The gateway with fake CLIs on 127.0.0.1, on its own event loop in a thread, so the
    synchronous schemathesis/requests calls of the tests reach it over real HTTP."""

    def __init__(self, **overrides: Any) -> None:
        self.overrides = {"timeout_s": 20, "idle_timeout_s": 10, "max_concurrency": 4, **overrides}
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.runner: GatewayRunner | None = None
        self.thread = threading.Thread(target=self._run, name="live-gateway", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._stop())
        self.loop.close()

    async def _start(self) -> None:
        settings = fake_settings(**self.overrides)
        app = create_app(Gateway(settings, live_backends(settings)))
        self.runner = GatewayRunner(app, header_timeout_s=settings.header_timeout_s)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def __enter__(self) -> LiveGateway:
        self.thread.start()
        assert self.ready.wait(10), "the gateway did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(15)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def live() -> Iterator[LiveGateway]:
    with LiveGateway() as gw:
        yield gw


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


SCHEMA = schemathesis.openapi.from_dict(document())
OPERATIONS = {
    f"{op.ok().method.upper()} {op.ok().path}": op.ok() for op in SCHEMA.get_all_operations()
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# answers the fake CLI cannot give for a fuzzed request (a random response_format schema
# the answer "ok" does not meet): documented 502s, not gateway bugs
ANSWER_CODES = {"invalid_json_answer", "invalid_tool_call", "empty_answer"}
STATS: dict[str, int] = {}  # requests sent per operation
STATUSES: dict[tuple[str, int], int] = {}  # (operation, status) -> how many


def header(resp: schemathesis.Response, name: str) -> str:
    for key, values in resp.headers.items():
        if key.lower() == name.lower() and values:
            return values[0]
    return ""


def assert_openai_shaped(status: int, ctype: str, content: bytes, label: str) -> None:
    """Every answer: a JSON body whose shape the status promises; SSE ends properly."""
    if status == 200 and ctype.startswith("text/event-stream"):
        text = content.decode("utf-8")  # valid UTF-8 throughout
        events = [e for e in text.split("\n\n") if e.strip()]
        assert events, label
        for event in events:
            for line in event.splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
                else:
                    assert line.startswith(("event: ", ": ", "data: ")), (label, line)
        last = events[-1]
        assert (
            last == "data: [DONE]"
            or "response.completed" in last
            or "response.incomplete" in last
            or '"error"' in last
        ), (label, text[-500:])
        return
    if status == 200 and ctype.startswith("text/plain"):  # GET /metrics: Prometheus text
        assert "# TYPE cli_proxy_" in content.decode("utf-8"), label
        return
    assert ctype.startswith("application/json"), (label, status, ctype, content[:300])
    body = json.loads(content)
    if status >= 400:
        assert set(body) == {"error"}, (label, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}, (label, body)
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def assert_anthropic_shaped(status: int, ctype: str, content: bytes, label: str) -> None:
    """The Messages API's answers: its events, ended by message_stop or an error event; its
    error body, never OpenAI's."""
    if status == 200 and ctype.startswith("text/event-stream"):
        events = [e for e in content.decode("utf-8").split("\n\n") if e.strip()]
        names = [e.split("\n")[0] for e in events if not e.startswith(":")]
        assert all(n.startswith("event: ") for n in names), (label, names)
        assert names[0] == "event: message_start", label
        assert names[-1] in ("event: message_stop", "event: error"), label
        return
    assert ctype.startswith("application/json"), (label, status, ctype, content[:300])
    body = json.loads(content)
    if status >= 400:
        assert set(body) == {"type", "error"} and body["type"] == "error", (label, body)
        assert set(body["error"]) == {"type", "message"}, (label, body)
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def assert_google_shaped(status: int, ctype: str, content: bytes, label: str) -> None:
    """The Gemini API's answers: ``data:`` events only (keep-alives too: never a comment
    line), or a JSON array, ended by a chunk with ``finishReason`` or an error; its error
    body, never another API's."""
    if status == 200 and ctype.startswith("text/event-stream"):
        lines = [ln for ln in content.decode("utf-8").splitlines() if ln]
        assert lines and all(ln.startswith("data: ") for ln in lines), (label, lines[:3])
        last = json.loads(lines[-1][6:])
        assert "error" in last or last["candidates"][0].get("finishReason"), (label, last)
        return
    assert ctype.startswith("application/json"), (label, status, ctype, content[:300])
    body = json.loads(content)
    if status == 200 and isinstance(body, list):  # the JSON-array stream
        assert "error" in body[-1] or body[-1]["candidates"][0].get("finishReason"), label
        return
    if status >= 400:
        assert set(body) == {"error"}, (label, body)
        assert set(body["error"]) == {"code", "message", "status", "details"}, (label, body)
        assert body["error"]["code"] == status and body["error"]["status"].isupper(), label


def google_path(op: str) -> bool:
    return "/v1beta/" in op or op.endswith(
        (":generateContent", ":streamGenerateContent", ":countTokens")
    )


def chat_code(live: LiveGateway, http: requests.Session, body: Any) -> str:
    """The gateway's error code for a Messages request, from the same request on the chat
    path (the fake CLI answers a prompt the same way every time)."""
    from cli_proxy.server.wire.messages import MessagesRequest, messages_to_chat

    req = messages_to_chat(MessagesRequest.model_validate(body)).request
    chat = req.model_dump(exclude_none=True, mode="json") | {"stream": False}
    r = http.post(f"{live.base_url}/v1/chat/completions", json=chat, timeout=30)
    return str(r.json()["error"]["code"])


def run_case(case: schemathesis.Case, live: LiveGateway, http: requests.Session, op: str) -> None:
    started = time.monotonic()
    resp = case.call(base_url=live.base_url, session=http, timeout=30)
    assert time.monotonic() - started < 25, (op, case.body)
    label = f"{op} {resp.status_code} body={json.dumps(case.body, default=str)[:400]}"
    STATS[op] = STATS.get(op, 0) + 1
    STATUSES[(op, resp.status_code)] = STATUSES.get((op, resp.status_code), 0) + 1
    anthropic_path = op.startswith("POST /v1/messages")
    shaped = assert_anthropic_shaped if anthropic_path else assert_openai_shaped
    if google_path(op):
        shaped = assert_google_shaped
    shaped(resp.status_code, header(resp, "Content-Type"), resp.content, label)
    if resp.status_code == 502 and google_path(op):
        reason = json.loads(resp.content)["error"]["details"][0]["reason"].lower()
        assert reason in ANSWER_CODES, label
        case.validate_response(
            resp,
            checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
        )
        return
    if resp.status_code == 502 and anthropic_path:
        assert chat_code(live, http, case.body) in ANSWER_CODES, label
        case.validate_response(
            resp,
            checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
        )
        return
    if resp.status_code == 502:  # the only 5xx a fake CLI that always answers may cause
        assert json.loads(resp.content)["error"]["code"] in ANSWER_CODES, label
        case.validate_response(
            resp,
            checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
        )
        return
    case.validate_response(resp, checks=CHECKS)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOL_ANSWER = json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]})
ANSWERS = {  # request bodies whose (fake) answers cover each kind of answer
    "text": {"messages": [{"role": "user", "content": fake(answer="one two three")}]},
    "usage": {
        "messages": [{"role": "user", "content": fake(answer="x", cached=3)}],
        "stream_options": {"include_usage": True},
    },
    "tool_call": {
        "messages": [{"role": "user", "content": fake(answer=TOOL_ANSWER, chunks=5)}],
        "tools": [WEATHER],
    },
    "cli_429": {
        "messages": [
            {
                "role": "user",
                "content": fake(is_error=True, error_message="API Error: 429 rate limited"),
            }
        ]
    },
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_real_answers_conform_to_the_document(
    kind: str, model: str, api: str, stream: bool, live: LiveGateway, http: requests.Session
) -> None:
    """Every kind of answer, streamed or not, validated by schemathesis against the document
    (SSE events one by one: each chunk or Responses event against its component schema)."""
    body: dict[str, Any] = {"model": model, "stream": stream, **ANSWERS[kind]}
    path = "/v1/chat/completions"
    if api == "responses":
        path = "/v1/responses"
        tools = [{"type": "function", **t["function"]} for t in body.pop("tools", [])]
        body = {"model": model, "stream": stream, "input": body["messages"][0]["content"]}
        if tools:
            body["tools"] = tools
    case = SCHEMA[path]["POST"].Case(body=body, media_type="application/json")
    resp = case.call(base_url=live.base_url, session=http, timeout=30)
    ctype = header(resp, "Content-Type")
    assert_openai_shaped(resp.status_code, ctype, resp.content, f"{kind} {api} {model}")
    case.validate_response(resp, checks=CHECKS[1:])  # 429 is the expected answer there
    if kind == "cli_429":
        assert resp.status_code == 429 and header(resp, "Retry-After")
    else:
        assert resp.status_code == 200
        assert ctype.startswith("text/event-stream" if stream else "application/json")
        if kind == "tool_call":  # a call was made, not just the tool list echoed
            made = b'"tool_calls"' if api == "chat" else b'"type":"function_call"'
            assert made in resp.content.replace(b": ", b":")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_real_messages_answers_conform_to_the_document(
    kind: str, model: str, stream: bool, live: LiveGateway, http: requests.Session
) -> None:
    """The same answers through the Messages API, checked against its own schemas."""
    chat = ANSWERS[kind]
    body: dict[str, Any] = {
        "model": model,
        "stream": stream,
        "max_tokens": 1024,
        "messages": chat["messages"],
    }
    if "tools" in chat:
        body["tools"] = [
            {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
            for t in chat["tools"]
        ]
    case = SCHEMA["/v1/messages"]["POST"].Case(body=body, media_type="application/json")
    resp = case.call(base_url=live.base_url, session=http, timeout=30)
    ctype = header(resp, "Content-Type")
    assert_anthropic_shaped(resp.status_code, ctype, resp.content, f"{kind} {model}")
    case.validate_response(resp, checks=CHECKS[1:])
    if kind == "cli_429":
        assert resp.status_code == 429 and header(resp, "Retry-After")
    else:
        assert resp.status_code == 200
        if kind == "tool_call":
            assert b'"type":"tool_use"' in resp.content.replace(b": ", b":")


@pytest.mark.parametrize("sep", ["\x85", "\u2028", "\u2029"])
def test_unicode_line_separators_reach_the_claude_cli(
    sep: str, live: LiveGateway, http: requests.Session
) -> None:
    """Found by the fuzz: these are raw-legal in JSON but split lines for some readers; the
    claude encoder escapes them (its stdin is one JSON line)."""
    body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": f"a{sep}b"}]}
    r = http.post(f"{live.base_url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["message"]["content"] == "ok"


def fuzz(op_name: str, mode: schemathesis.GenerationMode) -> Any:
    op = OPERATIONS[op_name]
    strategy = st.tuples(
        op.as_strategy(generation_mode=mode),
        st.sampled_from([None, *MODELS]),
        st.none() | st.text(max_size=40),
        st.none() | st.booleans(),
    )

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=strategy)
    def test(
        drawn: tuple[schemathesis.Case, str | None, str | None, bool | None],
        live: LiveGateway,
        http: Any,
    ) -> None:
        case, model, text, stream = drawn
        # most positive examples get a model that routes, so they reach a (fake) CLI
        if model is not None and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = model
        if stream is not None and isinstance(case.body, dict) and "model" in case.body:
            case.body["stream"] = stream  # streams are answered and checked event by event
        if text is not None and isinstance(case.body, dict) and "input" in case.body:
            case.body["input"] = text  # random input items are mostly refused (400)
        # likewise random content blocks are mostly refused (under pytest-xdist, where the
        # examples drawn differ, none of 60 count_tokens bodies was valid)
        messages = isinstance(case.body, dict) and "messages" in case.body
        if text is not None and model is not None and messages and "/v1/messages" in op_name:
            case.body["messages"] = [{"role": "user", "content": text or "hi"}]
        contents = isinstance(case.body, dict) and "contents" in case.body
        if text is not None and model is not None and contents:  # likewise random parts
            case.body["contents"] = [{"role": "user", "parts": [{"text": text or "hi"}]}]
        if model is not None and case.path_parameters and "model" in case.path_parameters:
            case.path_parameters["model"] = model
        run_case(case, live, http, op_name)

    return test


# usage per key is kept only with a keys file (tests/server/test_keys.py has one); the fuzzed
# gateway has none, so its documented answer is 404 usage_not_kept
WITHOUT_KEYS = {"GET /v1/usage": 404}
POSITIVE, NEGATIVE = schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE
# negative data needs something to make invalid: a body (a path parameter that is any
# non-empty string has no invalid value schemathesis can send)
# The Gemini API's operations under /v1/ are those under /v1beta/ (one route, one request
# and response schema: test_v1_and_v1beta_gemini_operations_are_one below), so the fuzz draws
# for /v1beta/ only: a Gemini request body is the slowest schema to draw (~0.4 s an example),
# and drawing it twice doubled the fuzz's time for no new request.
SAME_AS_V1BETA = {op for op in OPERATIONS if op.startswith("POST /v1/models/{model}:")}
FUZZED = [(op, POSITIVE) for op in sorted(OPERATIONS) if op not in SAME_AS_V1BETA] + [
    (op, NEGATIVE)
    for op in sorted(OPERATIONS)
    if op.startswith("POST") and op not in SAME_AS_V1BETA
]


def test_v1_and_v1beta_gemini_operations_are_one() -> None:
    """What lets the fuzz skip the /v1/ copies: the same document below the prefix."""
    paths = document()["paths"]
    assert len(SAME_AS_V1BETA) == 3
    for op in SAME_AS_V1BETA:
        path = op.removeprefix("POST ")
        beta = "/v1beta" + path.removeprefix("/v1")
        one, other = dict(paths[path]["post"]), dict(paths[beta]["post"])
        assert one.pop("operationId").endswith("_v1") and other.pop("operationId")
        assert one == other, path


@pytest.mark.parametrize(("op_name", "mode"), FUZZED, ids=[f"{o}-{m.value}" for o, m in FUZZED])
def test_schemathesis_fuzz(
    op_name: str, mode: schemathesis.GenerationMode, live: LiveGateway, http: requests.Session
) -> None:
    before, answered = STATS.get(op_name, 0), STATUSES.get((op_name, 200), 0)
    fuzz(op_name, mode)(live=live, http=http)
    assert STATS[op_name] > before  # it really sent requests
    if op_name in WITHOUT_KEYS:  # this gateway has no keys file: the documented refusal
        assert STATUSES.get((op_name, WITHOUT_KEYS[op_name]), 0) > 0
    elif mode is POSITIVE:  # and valid ones were answered, by a CLI for the POSTs
        assert STATUSES.get((op_name, 200), 0) > answered
