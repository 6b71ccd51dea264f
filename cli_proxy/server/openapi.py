"""``GET /openapi.json``: the gateway's own OpenAPI 3.1 description (issue #13).

Generated, not written by hand: every request and JSON response schema comes from the
pydantic wire models, which each wire format's table entry lists (``openapi_models``), with
its paths (``openapi_paths``, written with ``apidoc.py``'s blocks: which path takes which
model, which statuses it really returns), plus the gateway's own (health, metrics, this
document), collected once with ``models_json_schema(ref_template=...)`` into
``components/schemas``. No wire format is named here. The document is built on the first
request and cached; ``tests/server/test_openapi.py`` validates it and fuzzes the live
gateway against it with schemathesis.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from cli_proxy import __version__
from cli_proxy.backends.registry import backend_class, names
from cli_proxy.jsonbytes import json_bytes
from cli_proxy.server.apidoc import GET_ERRORS, JSON, ModelSchemas, answer, errors, get
from cli_proxy.server.formats import fallback, formats
from cli_proxy.server.wireformat import Refs, WireFormat

REF = "#/components/schemas/{model}"


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


class UsageCounts(BaseModel):
    """A key's calls and tokens (input includes cached_input)."""

    requests: int
    errors: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int


class UsageSummary(UsageCounts):
    by_model: dict[str, UsageCounts]


class KeyUsage(BaseModel):
    """``GET /v1/usage``: the calling key's own usage (docs/keys.md), over the rolling 24 h
    and since the state dir began; an alias call is filed under the model that answered."""

    key: str
    last_24h: UsageSummary
    total: UsageSummary


_OWN_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (HealthStatus, "serialization"),
    (ReadyStatus, "serialization"),
    (KeyUsage, "serialization"),
]


def _backend_facts() -> list[dict[str, Any]]:
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


def _own_paths(ref: Refs) -> dict[str, Any]:
    """Health, metrics and this document (the gateway's own, in the fallback's error body)."""
    model = fallback().error_model
    error = ref[model] if model is not None else {"type": "object"}

    def json_of(model: type[BaseModel]) -> dict[str, Any]:
        return {JSON: {"schema": ref[model]}}

    return {
        "/health": get(
            "health",
            "Liveness and admission counters",
            answer("ok, or draining after SIGTERM", json_of(HealthStatus)),
            errors((403,), error),
            security=[],
        ),
        "/metrics": get(
            "metrics",
            "Prometheus metrics (text exposition format; docs/metrics.md)",
            answer("The gateway's metric families", {"text/plain": {"schema": {"type": "string"}}}),
            errors(GET_ERRORS, error),
        ),
        "/v1/usage": get(
            "usage",
            "The calling key's own usage (with a keys file, --keys; docs/keys.md)",
            answer("requests, errors and tokens, last 24 h and total", json_of(KeyUsage)),
            errors((*GET_ERRORS, 404), error),
        ),
        "/health/ready": get(
            "ready",
            "Readiness: 503 from the moment the replica starts draining",
            answer("ready: a load balancer may send calls here", json_of(ReadyStatus)),
            errors((403, 503), error),
            security=[],
        ),
        "/openapi.json": get(
            "openapi",
            "This document",
            answer(
                "The OpenAPI description of the gateway", {JSON: {"schema": {"type": "object"}}}
            ),
            errors(GET_ERRORS, error),
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
        "description": "The same keys, in the x-api-key header",
    },
}


def build_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (uncached; ``document()`` caches it): each wire format's
    models and paths (its table entry), the gateway's own, and the schemas as components."""
    table = formats()
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [*_OWN_MODELS]
    for fmt in table:
        own_error: ModelSchemas = ((fmt.error_model, "serialization"),) if fmt.error_model else ()
        models += [m for m in [*fmt.openapi_models, *own_error] if m not in models]
    schemas, top = models_json_schema(models, ref_template=REF)
    ref = {model: schemas[(model, mode)] for model, mode in models}
    paths: dict[str, Any] = {}
    for fmt in table:
        paths.update(fmt.openapi_paths(ref))
    apis = ", ".join(f.name for f in table)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cli-proxy",
            "version": __version__,
            "description": "A gateway that runs a CLI "
            f"({', '.join(names())}) as the model of the APIs it speaks ({apis}), on one "
            "pipeline. Every path is also served without its API's version prefix. Errors "
            "come in the body of the path's own API (each path lists its error schema); "
            'elsewhere {"error": {message, type, param, code}}.',
        },
        "x-backends": _backend_facts(),
        "paths": {**paths, **_own_paths(ref)},
        "components": {"schemas": top.get("$defs", {}), "securitySchemes": _SECURITY_SCHEMES},
        "security": [{"bearer": []}, {"apiKey": []}, {}],
    }


def document() -> dict[str, Any]:
    """The document, built once per set of registered backends and wire formats."""
    return _document(_key())


def _key() -> tuple[tuple[str, ...], tuple[WireFormat, ...]]:
    return names(), formats()


@functools.cache
def _document(key: tuple[tuple[str, ...], tuple[WireFormat, ...]]) -> dict[str, Any]:
    return build_document()


@functools.cache
def _encoded(key: tuple[tuple[str, ...], tuple[WireFormat, ...]]) -> bytes:
    return json_bytes(_document(key))


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=_encoded(_key()), content_type=JSON)
