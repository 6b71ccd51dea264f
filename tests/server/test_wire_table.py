"""A wire format is its own modules plus one table entry: a test-only API ("parrot"),
registered here and nowhere else, gets its routes, its error body before and after the
stream head, its keep-alives, its credential sources, its model list on the shared path,
its metrics label, its log event and its ``/openapi.json`` path, with no edit to the edge.

The parrot is shaped like the next API the table must take (Google's ``generateContent``):
a route with a path parameter and a colon verb, a stream mode chosen by the query
(``?alt=sse``), a header that claims the shared ``GET /v1/models``, an API key in its own
header or in ``?key=``, keep-alives that are ``data:`` events, and an error body of its own
with a status name."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from pydantic import BaseModel

from cli_proxy.config import Settings
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.answer_events import AnswerEvent
from cli_proxy.run.call import Call
from cli_proxy.server import apidoc
from cli_proxy.server.delivery import Answer, Segment
from cli_proxy.server.errors import APIError
from cli_proxy.server.formats import format_for, formats, register, unregister
from cli_proxy.server.openapi import document
from cli_proxy.server.sse import SSE_MEDIA_TYPE
from cli_proxy.server.wire.fields import validated
from cli_proxy.server.wireformat import Inbound, ModelShape, Route, WireFormat, under
from tests.conftest import ServeFactory, fake

MODEL = "claude-sonnet-4-6"
STATUS_NAMES = {400: "BAD_PARROT", 401: "WHO_ARE_YOU", 404: "NO_SUCH_PERCH", 502: "SQUAWK"}
KEEPALIVE = b'data: {"said":""}\n\n'


# ------------------------------------------------------------------ the parrot's modules


class SayRequest(BaseModel):
    text: str


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def error_body(err: APIError) -> dict[str, Any]:
    status = STATUS_NAMES.get(err.status, "OTHER")
    return {"squawk": {"code": err.status, "message": err.message, "status": status}}


class ParrotFormat:
    """The answer as ``{"said": ...}``; streamed, one ``data:`` event per piece."""

    media_type = SSE_MEDIA_TYPE
    keepalive = KEEPALIVE

    def __init__(self) -> None:
        self.reasoning = False

    def body(self, answer: Answer) -> dict[str, Any]:
        return {"said": answer.text("text"), "finish": answer.end.finish_reason}

    def head(self) -> list[bytes]:
        return []

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]:
        return [_event({"said": seg.parts[-1]})] if seg.kind == "text" else []

    def tail(self, answer: Answer) -> list[bytes]:
        return [_event({"said": "", "finish": answer.end.finish_reason})]

    def fail(self, answer: Answer, err: APIError) -> list[bytes]:
        return [_event(error_body(err))]


def read_say(data: dict[str, Any], request: web.Request) -> Inbound:
    say = validated(SayRequest, data)
    conversation = ChatCompletionRequest.model_validate(
        {
            "model": request.match_info["model"],
            "messages": [{"role": "user", "content": say.text}],
            "stream": request.query.get("alt") == "sse",
        }
    )

    def answer(call: Call, settings: Settings) -> ParrotFormat:
        return ParrotFormat()

    return Inbound(conversation, answer, param=lambda p: p and f"parrot.{p}")


def credentials(request: web.Request) -> list[str]:
    sent = [request.headers.get("x-parrot-key"), request.query.get("key")]
    return [k for k in sent if k is not None]


def models_claim(headers: Mapping[str, str]) -> bool:
    return "x-parrot-key" in headers


_PATHS, _MODEL_PATHS = under("/vparrot"), under("/v1/models", "/models")

PARROT = WireFormat(
    name="parrot",
    routes=(
        # also under /v1, beside the chat entry's GET /v1/models/{model:.+}
        Route("POST", "/models/{model}:say", "call", read_say, prefixes=("/vparrot", "/v1")),
        Route("GET", "/perches", "models", prefixes=("/vparrot",)),
    ),
    claims=lambda path, headers: (
        _PATHS(path) or path.endswith(":say") or (models_claim(headers) and _MODEL_PATHS(path))
    ),
    error_status=lambda err: 418 if err.status == 404 else err.status,
    error_body=error_body,
    log_event="parrot_said",
    models=ModelShape(
        lambda cards: {"perches": [f"perches/{c.id}" for c in cards]},
        lambda card: {"perch": f"perches/{card.id}"},
    ),
    models_claim=models_claim,
    credentials=credentials,
    cors_headers=("X-Parrot-Key",),
    openapi_models=((SayRequest, "validation"),),
    openapi_paths=lambda ref: {
        "/vparrot/models/{model}:say": apidoc.post(
            "say",
            "Say it back",
            ref[SayRequest],
            apidoc.answer("What was said", {apidoc.JSON: {"schema": {"type": "object"}}}),
            apidoc.errors(apidoc.CALL_ERRORS, {"type": "object"}),
        )
    },
)


@pytest.fixture
def parrot() -> Iterator[WireFormat]:
    register(PARROT)
    yield PARROT
    unregister(PARROT.name)


def url(served: Any, path: str) -> str:
    return str(served.server.make_url(path))


# ------------------------------------------------------------------ what the edge gives it


async def test_a_registered_format_gets_its_route_and_metrics_label(
    serve: ServeFactory, parrot: WireFormat
) -> None:
    served = await serve()
    with structlog.testing.capture_logs() as logs:
        async with aiohttp.ClientSession() as session:
            for path in (f"/vparrot/models/{MODEL}:say", f"/v1/models/{MODEL}:say"):
                body = {"text": fake(answer="polly")}
                async with session.post(url(served, path), json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    assert await resp.json() == {"said": "polly", "finish": "stop"}
            async with session.get(url(served, f"/v1/models/{MODEL}")) as resp:
                assert (await resp.json())["id"] == MODEL  # the chat entry's route still
    done = [e for e in logs if e["event"] == "parrot_said"]
    assert [(e["api"], e["status"]) for e in done] == [("parrot", 200)] * 2
    scrape = served.metrics.scrape().decode()
    assert 'endpoint="parrot"' in scrape and f'model="{MODEL}"' in scrape


async def test_its_stream_mode_comes_from_the_query_with_its_own_keepalives(
    serve: ServeFactory, parrot: WireFormat
) -> None:
    served = await serve(keepalive_s=0.2, stream_head_hold_s=0.1)
    body = {"text": fake(answer="late", hang=1.0)}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url(served, f"/vparrot/models/{MODEL}:say?alt=sse"), json=body) as resp,
    ):
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = await resp.read()
    blocks = [b + b"\n\n" for b in raw.split(b"\n\n") if b]
    assert KEEPALIVE in blocks and b": keep-alive\n\n" not in blocks
    said = [json.loads(b[len(b"data: ") :]) for b in blocks]
    assert "".join(s["said"] for s in said) == "late" and said[-1]["finish"] == "stop"


async def test_its_error_body_before_and_after_the_stream_head(
    serve: ServeFactory, parrot: WireFormat
) -> None:
    served = await serve()
    async with aiohttp.ClientSession() as session:
        # before: a model no backend serves, the format's status (418 for a 404) and body,
        # under /v1 too
        async with session.post(
            url(served, "/v1/models/no-such-model:say"), json={"text": "hi"}
        ) as resp:
            assert resp.status == 418
            err = (await resp.json())["squawk"]
            assert err["code"] == 404 and err["status"] == "NO_SUCH_PERCH"
        # a field the parrot's reader refuses, and an unknown path under its prefix
        async with session.post(url(served, f"/vparrot/models/{MODEL}:say"), json={}) as resp:
            assert resp.status == 400
            assert (await resp.json())["squawk"]["status"] == "BAD_PARROT"
        async with session.get(url(served, "/vparrot/nowhere")) as resp:
            assert (await resp.json())["squawk"]["code"] == 404
        # after the head: the format's own error event
        spec = fake(answer="partial", chunks=2, no_result=True, exit=1, print_before_exit=True)
        async with session.post(
            url(served, f"/vparrot/models/{MODEL}:say?alt=sse"), json={"text": spec}
        ) as resp:
            assert resp.status == 200
            raw = await resp.read()
    events = [json.loads(b[len(b"data: ") :]) for b in raw.split(b"\n\n") if b]
    assert "".join(e.get("said", "") for e in events) == "partial"
    assert events[-1]["squawk"]["status"] == "SQUAWK"  # a 502: the CLI failed mid-answer


async def test_its_credentials_its_models_shape_and_its_openapi_path(
    serve: ServeFactory, parrot: WireFormat
) -> None:
    served = await serve(api_keys=["sekret"])
    async with aiohttp.ClientSession() as session:
        async with session.get(url(served, "/vparrot/perches")) as resp:
            assert resp.status == 401
            assert (await resp.json())["squawk"]["status"] == "WHO_ARE_YOU"
        async with session.get(url(served, "/vparrot/perches?key=sekret")) as resp:
            assert resp.status == 200
            assert f"perches/{MODEL}" in (await resp.json())["perches"]
        # the shared models path, claimed by the parrot's header; else OpenAI's shape
        headers = {"x-parrot-key": "sekret"}
        async with session.get(url(served, "/v1/models"), headers=headers) as resp:
            assert f"perches/{MODEL}" in (await resp.json())["perches"]
        headers = {"Authorization": "Bearer sekret"}
        async with session.get(url(served, "/v1/models"), headers=headers) as resp:
            assert (await resp.json())["object"] == "list"
        # its key is taken on its own paths only
        async with session.get(url(served, "/v1/chat/whatever?key=sekret")) as resp:
            assert resp.status == 401
    assert "/vparrot/models/{model}:say" in document()["paths"]
    assert "SayRequest" in document()["components"]["schemas"]


async def test_its_headers_are_allowed_in_a_browser_preflight(
    serve: ServeFactory, parrot: WireFormat
) -> None:
    origin = "https://app.example"
    served = await serve(cors_origins=[origin])
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    async with (
        aiohttp.ClientSession() as session,
        session.options(url(served, f"/vparrot/models/{MODEL}:say"), headers=headers) as resp,
    ):
        assert resp.status == 204
        allowed = [h.strip() for h in resp.headers["Access-Control-Allow-Headers"].split(",")]
    assert "X-Parrot-Key" in allowed and "Anthropic-Version" in allowed  # and the others'


def test_the_table_names_each_format_once_and_unregisters(parrot: WireFormat) -> None:
    names = [f.name for f in formats()]
    assert len(names) == len(set(names)) and "parrot" in names
    assert format_for("/vparrot/x", {}) is parrot
    assert format_for("/v1/models", {"x-parrot-key": "k"}) is parrot
    unregister("parrot")
    assert "parrot" not in [f.name for f in formats()]
    assert "/vparrot/models/{model}:say" not in document()["paths"]
