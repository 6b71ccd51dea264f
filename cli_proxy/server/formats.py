"""The table of wire formats: one ``WireFormat`` entry per API the gateway speaks, built
from that API's own modules (``wire/<name>.py``: request, translation, error body, OpenAPI;
``delivery/<name>.py``: its ``Format``). The edge loops over ``formats()``; adding an API is
its modules plus one entry here (or a ``register`` call: tests/server/test_wire_table.py).
How an entry is read: ``wireformat.py`` and docs/architecture.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from cli_proxy.config import Settings
from cli_proxy.run.call import Call
from cli_proxy.server.delivery import json_response
from cli_proxy.server.delivery.chat import ChatFormat
from cli_proxy.server.delivery.messages import MessagesFormat
from cli_proxy.server.delivery.responses import ResponsesFormat
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire import chat as chat_wire
from cli_proxy.server.wire import messages as messages_wire
from cli_proxy.server.wire import responses as responses_wire
from cli_proxy.server.wire.fields import validated
from cli_proxy.server.wireformat import Inbound, ModelShape, Route, WireFormat, under

# ------------------------------------------------------------------ chat completions


def _read_chat(data: dict[str, Any], request: web.Request) -> Inbound:
    req = chat_wire.chat_request(data)

    def answer(call: Call, settings: Settings) -> ChatFormat:
        return ChatFormat(req, call.plan.call.ids, settings.reasoning_output)

    return Inbound(req, answer)


CHAT = WireFormat(
    name="chat",
    routes=(
        Route("POST", "/chat/completions", "call", _read_chat),
        Route("GET", "/models", "models"),
        Route("GET", "/models/{model:.+}", "model"),
    ),
    claims=lambda path, headers: True,
    error_status=chat_wire.chat_error_status,
    error_body=chat_wire.chat_error_body,
    log_event="chat_completion",
    cors_headers=("OpenAI-Organization", "OpenAI-Project", "X-Stainless-Retry-Count"),
    models=ModelShape(chat_wire.chat_model_list, chat_wire.chat_model_card),
    openapi_models=chat_wire.OPENAPI_MODELS,
    openapi_paths=chat_wire.chat_openapi_paths,
    error_model=chat_wire.ErrorBody,
    fallback=True,
)

# ------------------------------------------------------------------ Responses


def _read_responses(data: dict[str, Any], request: web.Request) -> Inbound:
    rreq = validated(responses_wire.ResponsesRequest, data)
    req = responses_wire.responses_to_chat(rreq)

    def answer(call: Call, settings: Settings) -> ResponsesFormat:
        return ResponsesFormat(rreq, req, call.plan.call.ids)

    return Inbound(req, answer)


_RESPONSES_PATHS = under("/v1/responses", "/responses")

RESPONSES = WireFormat(
    name="responses",
    routes=(Route("POST", "/responses", "call", _read_responses),),
    claims=lambda path, headers: _RESPONSES_PATHS(path),
    error_status=chat_wire.chat_error_status,  # OpenAI's errors
    error_body=chat_wire.chat_error_body,
    log_event="response",
    openapi_models=responses_wire.OPENAPI_MODELS,
    openapi_paths=responses_wire.responses_openapi_paths,
    error_model=chat_wire.ErrorBody,
)

# ------------------------------------------------------------------ Messages


def _read_message(data: dict[str, Any], request: web.Request) -> Inbound:
    mreq = messages_wire.checked(messages_wire.MessagesRequest, data)
    chat = messages_wire.messages_to_chat(mreq)

    def answer(call: Call, settings: Settings) -> MessagesFormat:
        return MessagesFormat(mreq, call.plan.call.ids)

    return Inbound(chat.request, answer, param=chat.param)


def _read_token_count(data: dict[str, Any], request: web.Request) -> Inbound:
    creq = messages_wire.checked(messages_wire.CountTokensRequest, data)
    chat = messages_wire.messages_to_chat(creq)
    return Inbound(chat.request, count=lambda n: {"input_tokens": n}, param=chat.param)


MESSAGES = WireFormat(
    name="messages",
    routes=(
        Route("POST", "/messages", "call", _read_message),
        Route("POST", "/messages/count_tokens", "count", _read_token_count),
    ),
    claims=messages_wire.messages_claims,
    error_status=messages_wire.messages_error_status,
    error_body=messages_wire.messages_error_body,
    log_event="message",
    cors_headers=("Anthropic-Version", "Anthropic-Beta"),  # the anthropic SDKs' (browser use)
    models=ModelShape(messages_wire.messages_model_list, messages_wire.messages_model_card),
    models_claim=messages_wire.messages_models_claim,
    openapi_models=messages_wire.OPENAPI_MODELS,
    openapi_paths=messages_wire.messages_openapi_paths,
    error_model=messages_wire.AnthropicErrorBody,
)

# ------------------------------------------------------------------ the table

_TABLE: list[WireFormat] = [CHAT, RESPONSES, MESSAGES]


def formats() -> tuple[WireFormat, ...]:
    """Every registered format, in registration order."""
    return tuple(_TABLE)


def register(fmt: WireFormat) -> None:
    """Add (or, by name, replace) a format; apps created afterwards serve it."""
    _TABLE[:] = [f for f in _TABLE if f.name != fmt.name]
    _TABLE.append(fmt)


def unregister(name: str) -> None:
    _TABLE[:] = [f for f in _TABLE if f.name != name]


def fallback() -> WireFormat:
    """The entry whose body answers paths no entry claims (the gateway's own, unknown)."""
    return next(f for f in _TABLE if f.fallback)


def format_for(path: str, headers: Mapping[str, str]) -> WireFormat:
    """Which API a request speaks, so that its errors come in that API's body: the first
    entry that claims it, else the fallback (OpenAI's body)."""
    fallback = None
    for fmt in _TABLE:
        if fmt.fallback:
            fallback = fallback or fmt
        elif fmt.claims(path, headers):
            return fmt
    assert fallback is not None, "the table has no fallback format"
    return fallback


def models_shape(owner: WireFormat, headers: Mapping[str, str]) -> ModelShape:
    """The shape of a models answer: the route owner's, but on the fallback's shared paths
    the first format whose ``models_claim`` takes the request's headers."""
    if owner.fallback:
        for fmt in _TABLE:
            if fmt.models is not None and fmt.models_claim and fmt.models_claim(headers):
                return fmt.models
    assert owner.models is not None, f"{owner.name} has model routes but no ModelShape"
    return owner.models


def error_response(err: APIError, fmt: WireFormat) -> web.Response:
    """``err`` as ``fmt`` renders it, with its headers (Retry-After, ...)."""
    resp = json_response(fmt.error_body(err), fmt.error_status(err), err.headers)
    if err.status == 408:  # the rest of a half-sent body would be read as the next request
        resp.force_close()
    return resp
