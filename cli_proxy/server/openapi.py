"""``GET /openapi.json``: the gateway's own OpenAPI 3.1 description (issue #13).

Generated, not written by hand: every request and JSON response schema comes from the
pydantic wire models (``protocol.py``, ``responses.py``; plus the models below for the
answers built as plain dicts: health, the Response object, stream chunks and events),
collected once with ``models_json_schema(ref_template=...)`` into ``components/schemas``.
What is written here is only the routing facts pydantic cannot know: which path takes which
model, and which statuses each path really returns (``errors.py``, ``guard.py``,
``server.py``). The document is built on the first request and cached;
``tests/server/test_openapi.py`` validates it and fuzzes the live gateway against it with
schemathesis.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from cli_proxy import __version__
from cli_proxy.backends.registry import backend_class, names
from cli_proxy.jsonbytes import json_bytes
from cli_proxy.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    ErrorBody,
    ModelCard,
    ModelList,
    Usage,
)
from cli_proxy.server.wire.anthropic import CountTokensRequest, MessagesRequest
from cli_proxy.server.wire.responses import ResponsesRequest

REF = "#/components/schemas/{model}"
SSE = "text/event-stream"
JSON = "application/json"


class HealthStatus(BaseModel):
    """``GET /health``: liveness and the admission counters (never needs an API key)."""

    status: Literal["ok", "draining"]
    running: int
    waiting: int
    max_concurrency: int
    bounds: dict[str, Any]
    """The process bounds in force (docs/configuration.md): max_processes and its source,
    the memory budget and CLI size it came from, max_starting, per-backend caps."""
    running_by_backend: dict[str, int]
    starting: int
    processes: int
    """CLI processes alive: calls' and spares, never above bounds.max_processes."""
    peak_processes: int
    queue: dict[str, Any]
    """waiting, max_queue, oldest_wait_s, queue_timeout_s."""
    warm: dict[str, Any]
    rate_limits: dict[str, dict[str, dict[str, Any]]]  # backend -> window -> state


class ReadyStatus(BaseModel):
    """``GET /health/ready``: readiness for a load balancer (503 ``shutting_down`` once the
    replica drains; never needs an API key)."""

    status: Literal["ready"]
    running: int


class ResponseObject(BaseModel):
    """The Responses API ``Response`` object, as far as the gateway fills it (the keys
    every client reads; the rest follow OpenAI's reference)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    model: str
    output: list[dict[str, Any]]
    output_text: str
    error: dict[str, Any] | None
    incomplete_details: dict[str, Any] | None
    usage: dict[str, Any] | None


class ChunkFunction(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChunkFunction


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None  # only with the setting reasoning_output
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    logprobs: None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed chat completion (``sse.ChunkBuilder``)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None
    choices: list[ChunkChoice]
    usage: Usage | None = None  # only with stream_options.include_usage


class ResponseStreamEvent(BaseModel):
    """One event of a streamed response: its ``type`` is also the SSE ``event:`` name."""

    model_config = ConfigDict(extra="allow")

    type: str
    sequence_number: int


class AnthropicMessage(BaseModel):
    """Anthropic's Messages API answer (``delivery/anthropic.py``); content blocks are
    ``text``, ``tool_use`` (``input`` an object) and, when asked for, ``thinking``."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    usage: dict[str, int]


class AnthropicStreamEvent(BaseModel):
    """One event of a streamed Message: its ``type`` is also the SSE ``event:`` name
    (message_start, content_block_start, ping, content_block_delta, content_block_stop,
    message_delta, message_stop; or error)."""

    model_config = ConfigDict(extra="allow")

    type: str


class TokenCount(BaseModel):
    """``POST /v1/messages/count_tokens``: an estimate (docs/anthropic-api.md)."""

    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorBody(BaseModel):
    """Every error on the Messages API's paths."""

    type: Literal["error"]
    error: AnthropicErrorDetail


# (model, mode): requests are read in validation mode, answers written in serialization mode
_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (ChatCompletionRequest, "validation"),
    (ResponsesRequest, "validation"),
    (MessagesRequest, "validation"),
    (CountTokensRequest, "validation"),
    (AnthropicMessage, "serialization"),
    (AnthropicStreamEvent, "serialization"),
    (TokenCount, "serialization"),
    (AnthropicErrorBody, "serialization"),
    (ChatCompletion, "serialization"),
    (ResponseObject, "serialization"),
    (ModelList, "serialization"),
    (ModelCard, "serialization"),
    (HealthStatus, "serialization"),
    (ReadyStatus, "serialization"),
    (ErrorBody, "serialization"),
    (ChatCompletionChunk, "serialization"),
    (ResponseStreamEvent, "serialization"),
]

# what each status means on this gateway (errors.py maps failures to them)
_STATUS_TEXT: dict[int, str] = {
    400: "Invalid request: bad JSON, a field that fails validation, nesting deeper than "
    "64 levels, or a prompt the CLI refused (context length)",
    401: "Missing or wrong API key (when api_keys is set)",
    402: "The CLI's subscription refused the call as billed outside the plan (extra usage); "
    "not worth retrying (docs/metrics.md)",
    403: "Host not served here, or a foreign browser Origin",
    404: "No such model (no enabled backend serves the name) or path",
    408: "The request body did not arrive within body_timeout_s",
    413: "The request body is larger than max_body_bytes",
    415: "A POST whose Content-Type is not application/json",
    429: "Every CLI slot is busy and the queue is full, or the CLI's provider rate-limited "
    "the call; Retry-After says when to retry",
    502: "The CLI failed or its answer was unusable (empty, too large, invalid tool call)",
    503: "The CLI binary is missing, its provider is overloaded, the gateway is draining, or "
    "the gateway's own credential for the CLI was refused or its login is gone "
    "(cli_auth_failed, login_expired: x-should-retry false)",
    504: "The CLI ran past the call's cap (timeout_s, or a non-streamed call's "
    "x-stainless-read-timeout) or printed nothing for idle_timeout_s",
    529: "The CLI's provider is overloaded (the Messages API's overloaded_error; on the "
    "OpenAI paths a 503)",
}

_CALL_ERRORS = (400, 401, 402, 403, 404, 408, 413, 415, 429, 502, 503, 504)
_MESSAGES_ERRORS = (*_CALL_ERRORS, 529)
_COUNT_ERRORS = (400, 401, 403, 404, 408, 413, 415)
_GET_ERRORS = (401, 403)


def _errors(statuses: tuple[int, ...], error_ref: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "description": _STATUS_TEXT[status],
            "content": {JSON: {"schema": error_ref}},
        }
        if status == 429:
            entry["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before retrying",
                    "schema": {"type": "string", "pattern": "^[0-9]+$"},
                }
            }
        out[str(status)] = entry
    return out


def _sse(data: dict[str, Any], event: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``text/event-stream`` media type; as OpenAPI 3.1 tools read it, ``schema`` is one
    event ({event, data, id, retry}), its ``data`` a JSON text described by ``contentSchema``."""
    props: dict[str, Any] = {"data": data}
    if event is not None:
        props["event"] = event
    return {"schema": {"type": "object", "required": ["data"], "properties": props}}


def _json_text(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "string", "contentMediaType": JSON, "contentSchema": schema}


def _backends() -> list[dict[str, Any]]:
    """What each registered backend serves, from the registry (``x-backends``)."""
    out = []
    for name in names():
        cls = backend_class(name)
        out.append(
            {
                "name": name,
                "model_prefixes": list(cls.model_prefixes),
                "aliases": list(cls.aliases),
                "models": list(cls.known_models),
                "explicit": f"{name}/<model>",
            }
        )
    return out


def _post(
    op: str, summary: str, request: Any, answer: dict[str, Any], errors: dict[str, Any]
) -> dict[str, Any]:
    """A POST operation: its JSON request body, its 200 answer, its error statuses."""
    body = {"required": True, "content": {JSON: {"schema": request}}}
    responses = {"200": answer, **errors}
    return {
        "post": {"summary": summary, "operationId": op, "requestBody": body, "responses": responses}
    }


def _get(
    op: str, summary: str, answer: dict[str, Any], errors: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """A GET operation (``extra``: its ``parameters`` or an open ``security``)."""
    return {
        "get": {
            "summary": summary,
            "operationId": op,
            **extra,
            "responses": {"200": answer, **errors},
        }
    }


def _answer(description: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": content}


def _call(
    ref: dict[type[BaseModel], Any],
    op: str,
    summary: str,
    models: tuple[type[BaseModel], type[BaseModel]],
    stream: str,
    events: dict[str, Any],
    errors: dict[str, Any],
) -> dict[str, Any]:
    """A call: one JSON answer, or with ``stream`` its server-sent events."""
    request, answer = models
    described = (
        f"The answer: a JSON object, or with stream=true a server-sent event stream: {stream}"
    )
    content = {JSON: {"schema": ref[answer]}, SSE: events}
    return _post(op, summary, ref[request], _answer(described, content), errors)


def _call_paths(ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    """The three call APIs and count_tokens: what runs a CLI (or estimates it)."""
    error, anthropic_error = ref[ErrorBody], ref[AnthropicErrorBody]
    chat_events = {"anyOf": [ref[ChatCompletionChunk], error]}
    return {
        "/v1/chat/completions": _call(
            ref,
            "createChatCompletion",
            "Create a chat completion (one CLI process per call)",
            (ChatCompletionRequest, ChatCompletion),
            "'data: {chat.completion.chunk}' events, then 'data: [DONE]'; a failure after "
            "the first event is a 'data: {\"error\": {...}}' event instead",
            _sse({"anyOf": [{"const": "[DONE]"}, _json_text(chat_events)]}),
            _errors(_CALL_ERRORS, error),
        ),
        "/v1/responses": _call(
            ref,
            "createResponse",
            "Create a model response (Responses API, stateless)",
            (ResponsesRequest, ResponseObject),
            "typed events ('event: response.created' ... 'event: response.completed'); a "
            "failure after the first event is 'response.failed' then an 'error' event",
            _sse(_json_text(ref[ResponseStreamEvent]), {"type": "string"}),
            _errors(_CALL_ERRORS, error),
        ),
        "/v1/messages": _call(
            ref,
            "createMessage",
            "Create a message (Anthropic's Messages API, on the same pipeline; "
            "docs/anthropic-api.md)",
            (MessagesRequest, AnthropicMessage),
            "Anthropic's events ('event: message_start' ... 'event: message_stop'); a failure "
            "after the first event is an 'error' event",
            _sse(_json_text(ref[AnthropicStreamEvent]), {"type": "string"}),
            _errors(_MESSAGES_ERRORS, anthropic_error),
        ),
        "/v1/messages/count_tokens": _post(
            "countTokens",
            "Estimate the input tokens of a Messages request (nothing runs)",
            ref[CountTokensRequest],
            _answer(
                "The estimate: the rendered prompt's characters / 4",
                {JSON: {"schema": ref[TokenCount]}},
            ),
            _errors(_COUNT_ERRORS, anthropic_error),
        ),
    }


def _other_paths(ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    """Models, health, metrics and this document."""
    error = ref[ErrorBody]

    def json_of(model: type[BaseModel]) -> dict[str, Any]:
        return {JSON: {"schema": ref[model]}}

    model_param = {"name": "model", "in": "path", "required": True}
    model_param["schema"] = {"type": "string", "minLength": 1}
    return {
        "/v1/models": _get(
            "listModels",
            "List the models of the enabled backends (in Anthropic's shape "
            "when the request carries anthropic-version)",
            _answer("The model list", json_of(ModelList)),
            _errors(_GET_ERRORS, error),
        ),
        "/v1/models/{model}": _get(
            "retrieveModel",
            "One model: a listed one, or any name a backend would route",
            _answer("The model", json_of(ModelCard)),
            _errors((*_GET_ERRORS, 404), error),
            parameters=[model_param],
        ),
        "/health": _get(
            "health",
            "Liveness and admission counters",
            _answer("ok, or draining after SIGTERM", json_of(HealthStatus)),
            _errors((403,), error),
            security=[],
        ),
        "/metrics": _get(
            "metrics",
            "Prometheus metrics (text exposition format; docs/metrics.md)",
            _answer(
                "The gateway's metric families", {"text/plain": {"schema": {"type": "string"}}}
            ),
            _errors(_GET_ERRORS, error),
        ),
        "/health/ready": _get(
            "ready",
            "Readiness: 503 from the moment the replica starts draining",
            _answer("ready: a load balancer may send calls here", json_of(ReadyStatus)),
            _errors((403, 503), error),
            security=[],
        ),
        "/openapi.json": _get(
            "openapi",
            "This document",
            _answer(
                "The OpenAPI description of the gateway", {JSON: {"schema": {"type": "object"}}}
            ),
            _errors(_GET_ERRORS, error),
        ),
    }


_SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "Required only when the gateway has api_keys set",
    },
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "The same keys, as Anthropic clients send them",
    },
}


def build_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (uncached; ``document()`` caches it): the wire models'
    schemas as components, and the paths that use them."""
    schemas, top = models_json_schema(_MODELS, ref_template=REF)
    ref = {model: schemas[(model, mode)] for model, mode in _MODELS}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cli-proxy",
            "version": __version__,
            "description": "OpenAI-compatible gateway that runs a CLI "
            f"({', '.join(names())}) as its model, and Anthropic's Messages API on the same "
            "pipeline. Every path is also served without the /v1 prefix. Errors are "
            '{"error": {message, type, param, code}}; on /v1/messages* (and /v1/models* '
            'with anthropic-version) {"type": "error", "error": {type, message}}.',
        },
        "x-backends": _backends(),
        "paths": {**_call_paths(ref), **_other_paths(ref)},
        "components": {"schemas": top.get("$defs", {}), "securitySchemes": _SECURITY_SCHEMES},
        "security": [{"bearer": []}, {"apiKey": []}, {}],
    }


def document() -> dict[str, Any]:
    """The document, built once per set of registered backends."""
    return _document(names())


@functools.cache
def _document(backends: tuple[str, ...]) -> dict[str, Any]:
    return build_document()


@functools.cache
def _encoded(backends: tuple[str, ...]) -> bytes:
    return json_bytes(_document(backends))


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=_encoded(names()), content_type=JSON)
