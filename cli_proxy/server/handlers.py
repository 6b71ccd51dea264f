"""The handlers of the wire formats' routes, one per route kind (``wireformat.Route``):
a call (read the body, ``Gateway.open_call``, ``delivery.deliver`` in the format's
``Format``; one log line and one metrics record), a token count (``Gateway.count_tokens``),
and the models in the format's shape. No format is named here: each handler is made for
one ``WireFormat`` entry."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import structlog
from aiohttp import web

from cli_proxy import jsondepth
from cli_proxy.failures import CallError, FailureKind, InvalidRequest
from cli_proxy.gateway import Gateway
from cli_proxy.logs import log
from cli_proxy.protocol import Usage
from cli_proxy.run.call import Call
from cli_proxy.server.calls_log import CallRecord
from cli_proxy.server.delivery import DELIVERED, HEAD_SENT, SLOW, deliver, json_response
from cli_proxy.server.errors import APIError, api_error
from cli_proxy.server.formats import models_shape
from cli_proxy.server.metrics import METRICS
from cli_proxy.server.wire.chat import ModelCard
from cli_proxy.server.wireformat import Inbound, Reader, Route, WireFormat

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)
LOGGED: web.RequestKey[bool] = web.RequestKey("logged", bool)
STARTED = int(time.time())

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Logger = structlog.typing.FilteringBoundLogger
ANSWER_REFUSALS = ("answer_too_large", "oversized_output")


def handler(fmt: WireFormat, route: Route) -> Handler:
    """The handler of one route of ``fmt`` (a coroutine function, as aiohttp wants)."""
    read = route.read
    if route.kind in ("call", "count"):
        assert read is not None, f"{fmt.name} {route.path}: a {route.kind} route needs read"

    async def serve(request: web.Request) -> web.StreamResponse:
        if route.kind == "models":
            return await _list_models(request, fmt)
        if route.kind == "model":
            return await _get_model(request, fmt)
        assert read is not None
        if route.kind == "count":
            return await _count(request, read)
        return await _call(request, fmt, read)

    return serve


async def read_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, within the body size, time and nesting limits."""
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


async def _inbound(request: web.Request, read: Reader) -> Inbound:
    return read(await read_body(request), request)


async def _call(request: web.Request, fmt: WireFormat, read: Reader) -> web.StreamResponse:
    inbound = await _inbound(request, read)
    try:
        return await run_logged(request, inbound, fmt)
    except InvalidRequest as exc:  # found by the planner: name the field as the client sent it
        exc.param = inbound.param(exc.param)
        raise


async def _count(request: web.Request, read: Reader) -> web.Response:
    """A token estimate (``Gateway.count_tokens``); nothing runs."""
    inbound = await _inbound(request, read)
    assert inbound.count is not None, "a count route's read gives Inbound.count"
    try:
        tokens = request.app[GATEWAY].count_tokens(inbound.conversation)
    except InvalidRequest as exc:
        exc.param = inbound.param(exc.param)
        raise
    return json_response(inbound.count(tokens))


async def run_logged(request: web.Request, inbound: Inbound, fmt: WireFormat) -> web.StreamResponse:
    """Open the call, deliver its answer in the format's ``Format``; log one line and
    observe the metrics for it, from one record, whatever happens."""
    gw, req, answer = request.app[GATEWAY], inbound.conversation, inbound.answer
    assert answer is not None, "a call route's read gives Inbound.answer"
    metrics = request.app[METRICS]
    started = time.monotonic()
    budget = gw.supervisor.limits.budget(bool(req.stream), request.headers)  # from arrival
    call = await gw.open_call(req, budget)  # refused here: the middleware logs and counts it
    logger = log.bind(
        request_id=uuid.uuid4().hex[:12],
        api=fmt.name,
        model=req.model,
        backend=call.plan.launch.backend,
        stream=bool(req.stream),
        tools=len(req.tools or []),
    )
    if gw.settings.log_prompts:
        logger.debug("prompt", prompt=call.plan.call.prompt)
    status, code = 200, ""
    try:
        response = await deliver(
            request, call, answer(call, gw.settings), bool(req.stream), gw.settings
        )
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
        record = call_record(fmt.name, call, status, code, time.monotonic() - started)
        _log_done(logger, fmt.log_event, record, call)
        metrics.observe(record)
        metrics.rate_limited(record.backend, call.outcome.rate_limits)


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


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _log_done(logger: Logger, event: str, rec: CallRecord, call: Call) -> None:
    """One structured line per call (its event names the API), with the fields the metrics
    count."""
    stats, usage = call.stats, rec.usage or Usage()
    logger.info(
        event,
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


# ------------------------------------------------------------------ models


def _cards(gw: Gateway) -> list[ModelCard]:
    return [ModelCard(id=m, created=STARTED, owned_by=owner) for m, owner in gw.source.models()]


async def _list_models(request: web.Request, fmt: WireFormat) -> web.Response:
    shape = models_shape(fmt, request.headers)
    return json_response(shape.listing(_cards(request.app[GATEWAY])))


async def _get_model(request: web.Request, fmt: WireFormat) -> web.Response:
    gw, shape = request.app[GATEWAY], models_shape(fmt, request.headers)
    model_id = shape.model_id(unquote(request.match_info["model"]))
    card = next((c for c in _cards(gw) if c.id == model_id), None)
    if card is None:
        r = gw.source.route(model_id)
        if r is None:
            raise APIError(
                404, f"The model '{model_id}' does not exist", param="model", code="model_not_found"
            )
        card = ModelCard(id=model_id, created=STARTED, owned_by=r.backend)
    return json_response(shape.one(card))
