"""Building blocks of the OpenAPI document (``openapi.py``) that each wire format's
``openapi_paths`` uses to describe its own paths: operations, error statuses, SSE media
types. Nothing here names a wire format."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

SSE = "text/event-stream"
JSON = "application/json"
CALL_ERRORS = (400, 401, 402, 403, 404, 408, 413, 415, 429, 502, 503, 504)
COUNT_ERRORS = (400, 401, 403, 404, 408, 413, 415)
GET_ERRORS = (401, 403)
ModelSchemas = tuple[tuple[type[BaseModel], JsonSchemaMode], ...]  # (model, mode): requests are
# read in validation mode, answers written in serialization mode

# what each status means on this gateway (errors.py maps failures to them)
STATUS_TEXT: dict[int, str] = {
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


def errors(statuses: tuple[int, ...], error_ref: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "description": STATUS_TEXT[status],
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


def sse(data: dict[str, Any], event: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``text/event-stream`` media type; as OpenAPI 3.1 tools read it, ``schema`` is one
    event ({event, data, id, retry}), its ``data`` a JSON text described by ``contentSchema``."""
    props: dict[str, Any] = {"data": data}
    if event is not None:
        props["event"] = event
    return {"schema": {"type": "object", "required": ["data"], "properties": props}}


def json_text(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "string", "contentMediaType": JSON, "contentSchema": schema}


def post(
    op: str, summary: str, request: Any, answer: dict[str, Any], errors: dict[str, Any]
) -> dict[str, Any]:
    """A POST operation: its JSON request body, its 200 answer, its error statuses."""
    body = {"required": True, "content": {JSON: {"schema": request}}}
    responses = {"200": answer, **errors}
    return {
        "post": {"summary": summary, "operationId": op, "requestBody": body, "responses": responses}
    }


def get(
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


def answer(description: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": content}


def call(
    ref: dict[type[BaseModel], Any],
    op: str,
    summary: str,
    models: tuple[type[BaseModel], type[BaseModel]],
    stream: str,
    events: dict[str, Any],
    errors: dict[str, Any],
) -> dict[str, Any]:
    """A call: one JSON answer, or with ``stream`` its server-sent events."""
    request, reply = models
    described = (
        f"The answer: a JSON object, or with stream=true a server-sent event stream: {stream}"
    )
    content = {JSON: {"schema": ref[reply]}, SSE: events}
    return post(op, summary, ref[request], answer(described, content), errors)
