"""HTTP surface: routes, auth and error middleware, request logging. No domain step lives
here: ``Gateway.open_call`` plans, ``Call.events`` runs, ``delivery`` writes the answer,
``errors.api_error`` maps failures."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import structlog
from aiohttp import web

from .call import Call
from .delivery import (
    DELIVERED,
    HEAD_SENT,
    SLOW,
    ChatFormat,
    Format,
    ResponsesFormat,
    deliver,
    json_response,
)
from .errors import APIError, api_error, validated
from .failures import CallError
from .gateway import Gateway
from .guard import Guard
from .logs import log
from .openapi import openapi_json
from .protocol import ChatCompletionRequest, ModelCard, ModelList
from .responses import ResponsesRequest, to_chat_request

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)
LOGGED: web.RequestKey[bool] = web.RequestKey("logged", bool)
STARTED = int(time.time())

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Logger = structlog.typing.FilteringBoundLogger


def error_response(err: APIError) -> web.Response:
    resp = json_response(err.body(), err.status, err.headers)
    if err.status == 408:  # the rest of a half-sent body would be read as the next request
        resp.force_close()
    return resp


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except (APIError, CallError) as exc:
        err = exc if isinstance(exc, APIError) else api_error(exc)
        if not request.get(LOGGED, False):  # run_logged already logged this request
            # the message may quote the request (a field's value): debug level only
            log.info(
                "request_rejected",
                method=request.method,
                path=request.path,
                status=err.status,
                code=err.code,
                param=err.param,
            )
            log.debug("request_rejected_detail", message=err.message[:500])
        return error_response(err)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(
            APIError(413, f"request body too large: {exc.text}", code="request_too_large")
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            return await not_found(request)
        if exc.status == 405:
            allow = exc.headers.get("Allow", "")
            return error_response(
                APIError(
                    405,
                    f"{request.method} is not allowed on {request.path} (allowed: {allow})",
                    code="method_not_allowed",
                    headers={"Allow": allow},
                )
            )
        return error_response(APIError(exc.status, exc.reason, code=None))
    except Exception:
        log.exception("unhandled_error", path=request.path)
        return error_response(APIError(500, "internal gateway error; see the gateway log"))


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    keys = request.app[GATEWAY].settings.api_keys
    if keys and request.path != "/health":
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        presented = token.strip().encode("utf-8", "surrogateescape")
        ok = scheme.lower() == "bearer" and any(
            hmac.compare_digest(presented, k.get_secret_value().encode()) for k in keys
        )
        if not ok:
            raise APIError(
                401,
                "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )
    return await handler(request)


async def health(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    return json_response(
        {
            "status": "draining" if gw.supervisor.draining else "ok",
            "running": gw.supervisor.running,
            "waiting": gw.supervisor.waiting,
            "max_concurrency": gw.supervisor.max_concurrency,
            "warm": gw.pool.status() if gw.pool is not None else {"enabled": False},
        }
    )


def _cards(gw: Gateway) -> list[ModelCard]:
    return [ModelCard(id=m, created=STARTED, owned_by=owner) for m, owner in gw.source.models()]


async def list_models(request: web.Request) -> web.Response:
    cards = _cards(request.app[GATEWAY])
    return json_response(ModelList(data=cards).model_dump())


async def get_model(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    model_id = unquote(request.match_info["model"])
    for card in _cards(gw):
        if card.id == model_id:
            return json_response(card.model_dump())
    r = gw.source.route(model_id)
    if r is None:
        raise APIError(
            404, f"The model '{model_id}' does not exist", param="model", code="model_not_found"
        )
    return json_response(ModelCard(id=model_id, created=STARTED, owned_by=r.backend).model_dump())


MAX_JSON_DEPTH = 64  # deeper request bodies (any field, tool schemas included): 400


async def read_json(request: web.Request) -> dict[str, Any]:
    timeout_s = request.app[GATEWAY].settings.body_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise APIError(
            408, f"the request body did not arrive within {timeout_s:g} s", code="request_timeout"
        ) from None
    too_deep = False
    data: Any = None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        too_deep = True
    if too_deep or json_depth(data) > MAX_JSON_DEPTH:
        raise APIError(
            400,
            f"request body is nested deeper than {MAX_JSON_DEPTH} levels",
            code="nesting_too_deep",
        )
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    return data


def json_depth(value: Any) -> int:
    """Nesting depth of a decoded JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


async def parse_request(request: web.Request) -> ChatCompletionRequest:
    return validated(ChatCompletionRequest, await read_json(request))


async def run_logged(
    request: web.Request,
    req: ChatCompletionRequest,
    api: str,
    fmt: Callable[[Call], Format],
) -> web.StreamResponse:
    """Open the call, deliver its answer in ``fmt``; log one event for it whatever happens."""
    gw = request.app[GATEWAY]
    call = await gw.open_call(req)
    logger = log.bind(
        request_id=uuid.uuid4().hex[:12],
        api=api,
        model=req.model,
        backend=call.plan.launch.backend,
        stream=bool(req.stream),
        tools=len(req.tools or []),
    )
    if gw.settings.log_prompts:
        logger.debug("prompt", prompt=call.plan.call.prompt)
    started = time.monotonic()
    status = 200
    try:
        response = await deliver(request, call, fmt(call), bool(req.stream), gw.settings)
        if request.get(SLOW, False):
            status = 499
        return response
    except (APIError, CallError) as exc:
        status = (exc if isinstance(exc, APIError) else api_error(exc)).status
        raise
    except asyncio.CancelledError:
        # the client went away: before the end of the answer that is 499 (the CLI was
        # killed); after it (a client closing once it read [DONE]) the call was complete
        status = 200 if request.get(DELIVERED, False) else 499
        raise
    except Exception:
        status = 200 if request.get(HEAD_SENT, False) else 500  # else the middleware's 500
        raise
    finally:
        request[LOGGED] = True
        _log_done(logger, call, status, time.monotonic() - started)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    req = await parse_request(request)
    reasoning = request.app[GATEWAY].settings.reasoning_output
    return await run_logged(
        request, req, "chat", lambda call: ChatFormat(req, call.plan.call.ids, reasoning)
    )


async def responses(request: web.Request) -> web.StreamResponse:
    rreq = validated(ResponsesRequest, await read_json(request))
    req = to_chat_request(rreq)
    return await run_logged(
        request, req, "responses", lambda call: ResponsesFormat(rreq, req, call.plan.call.ids)
    )


def _log_done(logger: Logger, call: Call, status: int, duration: float) -> None:
    stats = call.stats
    usage = call.outcome.usage
    logger.info(
        "chat_completion",
        status=status,
        finish_reason=call.outcome.finish_reason,
        pid=stats.pid if stats else None,
        queue_wait_ms=round(stats.queue_wait_s * 1000, 1) if stats else None,
        first_byte_ms=round(stats.first_byte_s * 1000, 1)
        if stats and stats.first_byte_s is not None
        else None,
        duration_ms=round(duration * 1000, 1),
        exit_code=stats.exit_code if stats else None,
        killed=stats.killed if stats else None,
        warm=stats.warm if stats else None,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
    )


async def not_found(request: web.Request) -> web.Response:
    return error_response(
        APIError(404, f"no route for {request.method} {request.path}", code="unknown_url")
    )


def create_app(gateway: Gateway) -> web.Application:
    s = gateway.settings
    hosts = [*s.allowed_hosts, *([s.host] if s.host not in ("0.0.0.0", "::", "") else [])]
    guard = Guard(hosts, s.cors_origins)
    app = web.Application(
        middlewares=[errors_middleware, guard.middleware(), auth_middleware],
        client_max_size=s.max_body_bytes,
    )
    app.on_response_prepare.append(guard.on_prepare)
    app[GATEWAY] = gateway
    app.router.add_get("/health", health)
    app.router.add_get("/openapi.json", openapi_json)  # generated from the wire models
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/chat/completions", chat_completions)
        app.router.add_post(f"{prefix}/responses", responses)
        app.router.add_get(f"{prefix}/models", list_models)
        app.router.add_get(f"{prefix}/models/{{model:.+}}", get_model)

    async def on_startup(app: web.Application) -> None:
        gw = app[GATEWAY]
        warmed = await gw.prewarm()
        log.info(
            "warm_pool",
            enabled=gw.pool is not None,
            max_total=s.warm_max_total if gw.pool is not None else 0,
            started_for=warmed,
            note="a spare starts after the first call of each model" if gw.pool else None,
        )

    async def on_shutdown(app: web.Application) -> None:
        await app[GATEWAY].close()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    return app
