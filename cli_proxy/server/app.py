"""HTTP surface: routes, auth and error middleware, request logging. No domain step lives
here: ``Gateway.open_call`` plans, ``Call.events`` runs, ``delivery`` writes the answer,
``errors.api_error`` maps failures."""

from __future__ import annotations

import asyncio
import hmac
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import unquote

import structlog
from aiohttp import web

from cli_proxy import jsondepth
from cli_proxy.failures import CallError, FailureKind, InvalidRequest
from cli_proxy.gateway import Gateway
from cli_proxy.logs import log
from cli_proxy.plan.images import extract
from cli_proxy.plan.prompt import render
from cli_proxy.protocol import ChatCompletionRequest, ModelCard, ModelList, Usage
from cli_proxy.run.call import Call
from cli_proxy.server.calls_log import CallRecord
from cli_proxy.server.delivery import (
    DELIVERED,
    HEAD_SENT,
    SLOW,
    Format,
    deliver,
    json_response,
)
from cli_proxy.server.delivery.anthropic import MessagesFormat
from cli_proxy.server.delivery.chat import ChatFormat
from cli_proxy.server.delivery.generate_content import GenerateContentFormat
from cli_proxy.server.delivery.responses import ResponsesFormat
from cli_proxy.server.errors import APIError, api_error, validated
from cli_proxy.server.guard import Guard
from cli_proxy.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from cli_proxy.server.openapi import openapi_json
from cli_proxy.server.status import STATUS_PATH, add_status_page
from cli_proxy.server.wire import anthropic as anthropic_wire
from cli_proxy.server.wire import generate_content as gemini_wire
from cli_proxy.server.wire import server_tools
from cli_proxy.server.wire.responses import ResponsesRequest, to_chat_request

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)
LOGGED: web.RequestKey[bool] = web.RequestKey("logged", bool)
STARTED = int(time.time())

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ENDPOINTS = {"/chat/completions": "chat", "/responses": "responses", "/messages": "messages"}
GEMINI_CALL = re.compile(r"^/v1(?:beta)?/models/.+:(?:generateContent|streamGenerateContent)$")
Logger = structlog.typing.FilteringBoundLogger

Wire = Literal["openai", "anthropic", "generate_content"]


def wire_format(path: str, headers: Mapping[str, str]) -> Wire:
    """Which API a request speaks, so that its errors come in that API's body: Anthropic's
    on ``/v1/messages*`` (and ``/messages*``), and on ``/v1/models*`` when the request
    carries ``anthropic-version`` (the anthropic SDK's ``models.list()``); else OpenAI's."""

    def under(*roots: str) -> bool:
        return any(path == r or path.startswith(r + "/") for r in roots)

    if under("/v1/messages", "/messages"):
        return "anthropic"
    if gemini_wire.claims(path, headers):
        return "generate_content"
    if "anthropic-version" in headers and under("/v1/models", "/models"):
        return "anthropic"
    return "openai"


def error_response(err: APIError, wire: Wire = "openai") -> web.Response:
    if wire == "anthropic":
        status, body = anthropic_wire.error_status(err), anthropic_wire.error_body(err)
    elif wire == "generate_content":
        status, body = gemini_wire.error_status(err), gemini_wire.error_body(err)
    else:
        status, body = err.status, err.body()
    resp = json_response(body, status, err.headers)
    if err.status == 408:  # the rest of a half-sent body would be read as the next request
        resp.force_close()
    return resp


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.monotonic()
    wire = wire_format(request.path, request.headers)
    try:
        return await handler(request)
    except (APIError, CallError) as exc:
        err = exc if isinstance(exc, APIError) else api_error(exc)
        if not request.get(LOGGED, False):  # run_logged already logged this request
            endpoint = ENDPOINTS.get(request.path.removeprefix("/v1"))
            if GEMINI_CALL.match(request.path):
                endpoint = gemini_wire.NAME
            if endpoint is not None:  # an API request refused before any backend ran
                duration = time.monotonic() - started
                record = CallRecord(endpoint, "", "", err.status, err.code or "", duration)
                request.app[GATEWAY].metrics.observe(record)
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
        return error_response(err, wire)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(
            APIError(413, f"request body too large: {exc.text}", code="request_too_large"), wire
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
                ),
                wire,
            )
        return error_response(APIError(exc.status, exc.reason, code=None), wire)
    except Exception:
        log.exception("unhandled_error", path=request.path)
        return error_response(APIError(500, "internal gateway error; see the gateway log"), wire)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    keys = request.app[GATEWAY].settings.api_keys
    probe = request.method == "HEAD" and request.path == "/"
    own = request.path in HEALTH_PATHS or request.path == STATUS_PATH  # the status page: its own
    if keys and not own and not probe:
        ok = any(
            hmac.compare_digest(presented, k.get_secret_value().encode())
            for presented in _presented_keys(request)
            for k in keys
        )
        if not ok:
            raise APIError(
                401,
                "Incorrect or missing API key: send 'Authorization: Bearer <key>' "
                "or 'x-api-key: <key>'"
                + (" or 'x-goog-api-key: <key>'" if _google_path(request) else ""),
                code="invalid_api_key",
            )
    return await handler(request)


def _presented_keys(request: web.Request) -> list[bytes]:
    """The keys a request presents: ``Authorization: Bearer`` (OpenAI clients, the
    anthropic SDKs) and ``x-api-key`` (Claude Code, LiteLLM's anthropic provider)."""
    out = []
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        out.append(token.strip().encode("utf-8", "surrogateescape"))
    for header in ("x-api-key", "x-goog-api-key"):  # x-goog-api-key: Gemini-API clients
        api_key = request.headers.get(header)
        if api_key is not None:
            out.append(api_key.strip().encode("utf-8", "surrogateescape"))
    if _google_path(request) and "key" in request.query:  # the REST API's ?key= (never logged)
        out.append(request.query["key"].strip().encode("utf-8", "surrogateescape"))
    return out


def _google_path(request: web.Request) -> bool:
    return gemini_wire.claims(request.path, request.headers)


async def probe(request: web.Request) -> web.Response:
    """``HEAD /``: Claude Code's reachability probe at start-up, sent without a key; it
    answers 200 with no body (no key needed: it says no more than that a server listens)."""
    return web.Response()


async def health(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    return json_response(
        {
            "status": "draining" if gw.supervisor.draining else "ok",
            "running": gw.supervisor.running,
            "waiting": gw.supervisor.waiting,
            "max_concurrency": gw.supervisor.max_concurrency,
            **gw.supervisor.status(),  # bounds in force, processes, the queue
            "warm": gw.pool.status() if gw.pool is not None else {"enabled": False},
            "rate_limits": gw.metrics.rate_limit_state(),
        }
    )


HEALTH_PATHS = frozenset({"/health", "/health/ready"})  # probes carry no API key


async def ready(request: web.Request) -> web.Response:
    """Readiness, for a load balancer's health check: 503 from the moment this replica
    starts draining (first SIGTERM), so the balancer sends new calls elsewhere while the
    running ones finish. ``/health`` stays liveness: 200 while the process serves."""
    gw = request.app[GATEWAY]
    if gw.supervisor.draining or gw.supervisor.closing:
        raise APIError(
            503,
            "this replica is draining (stopping): send new calls to another one",
            code="shutting_down",
        )
    return json_response({"status": "ready", "running": gw.supervisor.running})


def _cards(gw: Gateway) -> list[ModelCard]:
    return [ModelCard(id=m, created=STARTED, owned_by=owner) for m, owner in gw.source.models()]


def _model_info(card: ModelCard) -> dict[str, Any]:
    """A model as Anthropic's ``GET /v1/models`` lists one."""
    created = datetime.fromtimestamp(card.created, UTC).isoformat().replace("+00:00", "Z")
    return {
        "type": "model",
        "id": card.id,
        "display_name": card.id,
        "created_at": created,
        "lifecycle": "active",
    }


async def list_models(request: web.Request) -> web.Response:
    cards = _cards(request.app[GATEWAY])
    wire = wire_format(request.path, request.headers)
    if wire == "generate_content":
        return json_response(gemini_wire.model_list(cards))
    if wire == "anthropic":
        data = [_model_info(c) for c in cards]
        return json_response(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )
    return json_response(ModelList(data=cards).model_dump())


async def get_model(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    wire = wire_format(request.path, request.headers)
    model_id = unquote(request.match_info["model"])
    if wire == "generate_content":
        model_id = gemini_wire.model_id(model_id)
    card = next((c for c in _cards(gw) if c.id == model_id), None)
    if card is None:
        r = gw.source.route(model_id)
        if r is None:
            raise APIError(
                404, f"The model '{model_id}' does not exist", param="model", code="model_not_found"
            )
        card = ModelCard(id=model_id, created=STARTED, owned_by=r.backend)
    if wire == "generate_content":
        return json_response(gemini_wire.model_info(card))
    if wire == "anthropic":
        return json_response(_model_info(card))
    return json_response(card.model_dump())


async def read_json(request: web.Request) -> dict[str, Any]:
    settings = request.app[GATEWAY].settings
    declared, limit = request.content_length, settings.max_body_bytes
    if declared is not None and declared > limit:  # refused before a byte of it is awaited
        raise APIError(
            413,
            f"request body too large: {declared} bytes declared, the limit is {limit} "
            "(max_body_bytes)",
            code="request_too_large",
        )
    timeout_s = settings.body_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise APIError(
            408, f"the request body did not arrive within {timeout_s:g} s", code="request_timeout"
        ) from None
    try:
        data = jsondepth.loads(raw, jsondepth.MAX_BODY_DEPTH)
    except jsondepth.TooDeep:
        raise APIError(
            400,
            f"request body is nested deeper than {jsondepth.MAX_BODY_DEPTH} levels",
            code="nesting_too_deep",
        ) from None
    except ValueError as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    return data


async def parse_request(request: web.Request) -> ChatCompletionRequest:
    return validated(ChatCompletionRequest, await read_json(request))


async def run_logged(
    request: web.Request,
    req: ChatCompletionRequest,
    api: str,
    fmt: Callable[[Call], Format],
) -> web.StreamResponse:
    """Open the call, deliver its answer in ``fmt``; log one line and observe the metrics
    for it, from one record, whatever happens."""
    gw = request.app[GATEWAY]
    started = time.monotonic()
    budget = gw.supervisor.limits.budget(bool(req.stream), request.headers)  # from arrival
    call = await gw.open_call(req, budget)  # refused here: the middleware logs and counts it
    logger = log.bind(
        request_id=uuid.uuid4().hex[:12],
        api=api,
        model=req.model,
        backend=call.plan.launch.backend,
        stream=bool(req.stream),
        tools=len(req.tools or []),
    )
    dropped = request.get(server_tools.DROPPED)
    if dropped:
        logger = logger.bind(dropped_tools=list(dropped))
    if gw.settings.log_prompts:
        logger.debug("prompt", prompt=call.plan.call.prompt)
    status, code = 200, ""
    try:
        response = await deliver(request, call, fmt(call), bool(req.stream), gw.settings)
        if request.get(SLOW, False):
            status, code = 499, "slow_client"
        return response
    except (APIError, CallError) as exc:
        err = exc if isinstance(exc, APIError) else api_error(exc)
        status, code = err.status, err.code or ""
        raise
    except asyncio.CancelledError:
        # the client went away: before the end of the answer that is 499 (the CLI was
        # killed); after it (a client closing once it read [DONE]) the call was complete
        if not request.get(DELIVERED, False):
            status, code = 499, "client_closed"
        raise
    except Exception:
        if not request.get(HEAD_SENT, False):  # else the middleware's 500
            status, code = 500, "internal_error"
        raise
    finally:
        request[LOGGED] = True
        record = call_record(api, call, status, code, time.monotonic() - started)
        _log_done(logger, record, call)
        gw.metrics.observe(record)
        gw.metrics.rate_limited(record.backend, call.outcome.rate_limits)


def call_record(api: str, call: Call, status: int, code: str, duration: float) -> CallRecord:
    """What the log line and the metrics say of one call."""
    stats, outcome = call.stats, call.outcome
    exit_kind = None
    if stats is not None:
        if stats.killed not in (None, "lingered"):
            exit_kind = stats.killed
        elif stats.exit_code is not None:
            # killed after its result ("lingered"): ok, unless that result was a failure
            ok = outcome.failure is None if stats.killed == "lingered" else stats.exit_code == 0
            exit_kind = "ok" if ok else "error"
    refused = stats.killed if stats and stats.killed in ANSWER_REFUSALS else None
    return CallRecord(
        endpoint=api,
        backend=call.plan.launch.backend,
        model=call.plan.request.model,
        status=status,
        code=code,
        duration_s=duration,
        queue_wait_s=outcome.queue_wait_s,
        start_s=stats.start_s if stats else None,
        first_content_s=outcome.first_content_s,
        warm=stats.warm if stats else None,
        warming=bool(stats and stats.warming),
        exit_kind=exit_kind,
        usage=outcome.usage,
        billing_refused=outcome.failure is FailureKind.BILLING,
        answer_refused=refused,
    )


ANSWER_REFUSALS = ("answer_too_large", "oversized_output")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    req = await parse_request(request)
    reasoning = request.app[GATEWAY].settings.reasoning_output
    return await run_logged(
        request, req, "chat", lambda call: ChatFormat(req, call.plan.call.ids, reasoning)
    )


async def responses(request: web.Request) -> web.StreamResponse:
    rreq = validated(ResponsesRequest, await read_json(request))
    dropped: list[str] = []
    req = to_chat_request(rreq, request.app[GATEWAY].settings.server_tools, dropped)
    if dropped:
        request[server_tools.DROPPED] = tuple(dropped)
    return await run_logged(
        request, req, "responses", lambda call: ResponsesFormat(rreq, req, call.plan.call.ids)
    )


async def messages(request: web.Request) -> web.StreamResponse:
    """Anthropic's Messages API on the same pipeline (docs/anthropic-api.md)."""
    mreq = anthropic_wire.validated(anthropic_wire.MessagesRequest, await read_json(request))
    chat = anthropic_wire.to_chat_request(mreq, request.app[GATEWAY].settings.server_tools)
    if chat.dropped:
        request[server_tools.DROPPED] = tuple(chat.dropped)
    req = chat.request
    try:
        return await run_logged(
            request, req, "messages", lambda call: MessagesFormat(mreq, call.plan.call.ids)
        )
    except InvalidRequest as exc:  # found by the planner: name the field as the client sent it
        exc.param = chat.param(exc.param)
        raise


async def count_tokens(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: an estimate, named as one in docs/anthropic-api.md:
    the characters of the prompt the gateway would render for the request, over 4 (images
    and the CLI's own system prompt are not counted). Nothing runs."""
    creq = anthropic_wire.validated(anthropic_wire.CountTokensRequest, await read_json(request))
    gw = request.app[GATEWAY]
    chat = anthropic_wire.to_chat_request(creq, gw.settings.server_tools)
    return json_response({"input_tokens": _estimate(gw, chat.request, chat.param)})


async def generate_content(request: web.Request) -> web.StreamResponse:
    """Google's ``:generateContent`` / ``:streamGenerateContent`` on the same pipeline
    (docs/gemini-api.md): a stream with ``?alt=sse`` is SSE, without it a JSON array."""
    gw = request.app[GATEWAY]
    stream = request.match_info["method"] == "streamGenerateContent"
    model = gemini_wire.checked_model(unquote(request.match_info["model"]))
    greq = gemini_wire.validated_request(await read_json(request))
    chat = gemini_wire.to_chat_request(greq, model, stream, gw.settings.server_tools)
    if chat.dropped:
        request[server_tools.DROPPED] = tuple(chat.dropped)
    sse = request.query.get("alt", "").lower() == "sse"
    try:
        return await run_logged(
            request,
            chat.request,
            gemini_wire.NAME,
            lambda call: GenerateContentFormat(model, call.plan.call.ids, chat.thoughts, sse),
        )
    except InvalidRequest as exc:  # found by the planner: name the field as the client sent it
        exc.param = chat.param(exc.param)
        raise


async def gemini_count_tokens(request: web.Request) -> web.Response:
    """``:countTokens``: an estimate, documented as one (docs/gemini-api.md): the characters
    of the prompt the gateway would render, over 4, as ``/v1/messages/count_tokens``."""
    gw = request.app[GATEWAY]
    model = gemini_wire.checked_model(unquote(request.match_info["model"]))
    greq = gemini_wire.validated_count(await read_json(request))
    chat = gemini_wire.to_chat_request(greq, model, False, gw.settings.server_tools)
    return json_response(gemini_wire.count_body(_estimate(gw, chat.request, chat.param)))


def _estimate(
    gw: Gateway, req: ChatCompletionRequest, param: Callable[[str | None], str | None]
) -> int:
    """Tokens of the prompt the gateway would render for ``req`` (characters over 4; images
    and the CLI's own system prompt are not counted). Nothing runs."""
    if gw.source.route(req.model) is None:
        raise APIError(
            404, f"The model '{req.model}' does not exist", param="model", code="model_not_found"
        )
    try:
        prompt = render(req, gw.prompt_options, extract(req, gw.image_limits))
    except InvalidRequest as exc:
        raise APIError(400, exc.message, param=param(exc.param), code=exc.code) from None
    return math.ceil(sum(map(len, prompt.blocks)) / 4)


async def gemini_models(request: web.Request) -> web.Response:
    return json_response(gemini_wire.model_list(_cards(request.app[GATEWAY])))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _log_done(logger: Logger, rec: CallRecord, call: Call) -> None:
    """One structured line per call, with the fields the metrics count."""
    stats, usage = call.stats, rec.usage or Usage()
    logger.info(
        "chat_completion",
        status=rec.status,
        code=rec.code or None,
        finish_reason=call.outcome.finish_reason,
        pid=stats.pid if stats else None,
        queue_wait_ms=_ms(rec.queue_wait_s),
        start_wait_ms=_ms(call.outcome.start_wait_s),
        client_read_timeout_s=call.budget.client_read_timeout_s,
        start_ms=_ms(rec.start_s),
        ttfc_ms=_ms(rec.first_content_s),
        first_byte_ms=_ms(stats.first_byte_s) if stats else None,
        duration_ms=_ms(rec.duration_s),
        exit_code=stats.exit_code if stats else None,
        exit=rec.exit_kind,
        killed=stats.killed if stats else None,
        warm=rec.warm,
        start=rec.start_kind,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.prompt_tokens_details.cached_tokens,
        completion_tokens=usage.completion_tokens,
        reasoning_tokens=usage.completion_tokens_details.reasoning_tokens,
    )


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition (prometheus-client); needs the API key when one is set."""
    body = request.app[GATEWAY].metrics.scrape()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def not_found(request: web.Request) -> web.Response:
    return error_response(
        APIError(404, f"no route for {request.method} {request.path}", code="unknown_url"),
        wire_format(request.path, request.headers),
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
    app.router.add_get("/health/ready", ready)
    app.router.add_get("/openapi.json", openapi_json)  # generated from the wire models
    app.router.add_get("/metrics", metrics)
    add_status_page(app, gateway)  # GET /status: HTML for people (Basic auth too)
    app.router.add_route("HEAD", "/", probe)  # Claude Code's probe
    # Google's Gemini API (google-genai 3.x calls /v1/, the Gemini CLI /v1beta/)
    for prefix in ("/v1beta", "/v1"):
        methods = "{method:generateContent|streamGenerateContent}"
        app.router.add_post(f"{prefix}/models/{{model:.+}}:{methods}", generate_content)
        app.router.add_post(f"{prefix}/models/{{model:.+}}:countTokens", gemini_count_tokens)
    app.router.add_get("/v1beta/models", list_models)
    app.router.add_get("/v1beta/models/{model:.+}", get_model)
    app.on_response_prepare.append(server_tools.on_prepare)
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/chat/completions", chat_completions)
        app.router.add_post(f"{prefix}/responses", responses)
        app.router.add_post(f"{prefix}/messages", messages)
        app.router.add_post(f"{prefix}/messages/count_tokens", count_tokens)
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
