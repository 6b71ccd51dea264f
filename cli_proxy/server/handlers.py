"""The handlers of the wire formats' routes, one per route kind (``wireformat.Route``):
a call (read the body, ``Gateway.open_call``, ``delivery.deliver`` in the format's
``Format``; one log line and one metrics record), a token count (``Gateway.count_tokens``),
and the models in the format's shape. No format is named here: each handler is made for
one ``WireFormat`` entry."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import structlog
from aiohttp import web

from cli_proxy import jsondepth
from cli_proxy.failures import CallError, CliFailed, FailureKind, InvalidRequest, NotAllowed
from cli_proxy.gateway import Gateway
from cli_proxy.logs import log
from cli_proxy.protocol import ChatCompletionRequest, ImagePart, TextPart, Usage
from cli_proxy.run.call import Call
from cli_proxy.run.governor import Governor, Slot, estimate_tokens
from cli_proxy.run.keys import ClientKey
from cli_proxy.run.usage import Entry
from cli_proxy.server.access import ANSWERED_BY, client_key
from cli_proxy.server.delivery import DELIVERED, HEAD_SENT, SLOW, deliver, json_response
from cli_proxy.server.errors import APIError, api_error
from cli_proxy.server.formats import models_shape
from cli_proxy.server.metrics import METRICS
from cli_proxy.server.status.calls_log import CallRecord
from cli_proxy.server.wire import server_tools
from cli_proxy.server.wire.chat import ModelCard
from cli_proxy.server.wireformat import Inbound, Reader, Route, WireFormat

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)
CALL: web.RequestKey[Call] = web.RequestKey("call", Call)
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
    gw, key = request.app[GATEWAY], client_key(request)
    usage = Filing(gw.governor, key)
    try:
        data = await read_body(request)
        inbound = read(data, request)
        usage.model = inbound.conversation.model
        if inbound.dropped:  # server tools: left out and named, or refused (server_tools.py)
            server_tools.enforce(inbound.dropped, gw.settings.server_tools)
            request[server_tools.DROPPED] = tuple(d.name for d in inbound.dropped)
    except BaseException:
        usage.refused()
        raise
    try:
        return await _governed(request, fmt, read, data, inbound, usage)
    except InvalidRequest as exc:  # found by the planner: name the field as the client sent it
        usage.refused()
        exc.param = inbound.param(exc.param)
        raise
    except BaseException:
        usage.refused()
        raise


class Filing:
    """Files one request's usage under its key once (docs/keys.md): every call to a model
    route is a request; a refusal (a limit, a bad body) is an error with no tokens."""

    def __init__(self, governor: Governor, key: ClientKey | None) -> None:
        self.governor, self.key, self.model, self.done = governor, key, "", False

    def refused(self) -> None:
        store = self.governor.store
        if self.done or self.key is None or store is None:
            return
        self.done = True
        store.record(self.key.name, Entry(self.model or "-", errors=1))


def _retarget(
    inbound: Inbound, data: dict[str, Any], target: str, read: Reader, request: web.Request
) -> Inbound:
    """The request again, for an alias's ``target``: read anew with the body's ``model``
    replaced (or its ``{model}`` path parameter), so that every part of the answer (its
    ``model`` too) names the target; else the conversation's model is replaced."""
    if "model" in data:
        return read({**data, "model": target}, request)
    if "model" in request.match_info:  # a path parameter (Gemini's /models/{model}:verb)
        request.match_info["model"] = target
        return read(data, request)
    conversation = inbound.conversation.model_copy(update={"model": target})
    return dataclasses.replace(inbound, conversation=conversation)


IMAGE_TOKENS = 1000  # an image, in the estimate of a call's input
TOOL_TOKENS = 100  # a declared tool


def input_estimate(req: ChatCompletionRequest) -> int:
    """A call's input tokens before it runs, for its key's token budget: the characters of
    its text over 4, an image as ``IMAGE_TOKENS``, a tool as ``TOOL_TOKENS``. Cheap (no
    render: 0.06 ms less per call than ``Gateway.count_tokens``); the CLI's report decides
    what is filed."""
    chars, extra = 0, TOOL_TOKENS * len(req.tools or [])
    for message in req.messages:
        content = message.content
        if isinstance(content, str):
            chars += len(content)
        elif content:
            for part in content:
                if isinstance(part, TextPart):
                    chars += len(part.text)
                elif isinstance(part, ImagePart):
                    extra += IMAGE_TOKENS
    return math.ceil(chars / 4) + extra


LIMIT_FAILURES = (FailureKind.RATE_LIMITED,)  # a usage or rate limit the backend reported
LOGIN_FAILURES = (FailureKind.AUTH, FailureKind.LOGIN_EXPIRED)  # its login refused or gone
FALL_THROUGH = LIMIT_FAILURES + LOGIN_FAILURES  # an alias tries its next target on these


async def _governed(
    request: web.Request,
    fmt: WireFormat,
    read: Reader,
    data: dict[str, Any],
    inbound: Inbound,
    usage: Filing,
) -> web.StreamResponse:
    """One call under its key's limits (``run/governor.py``): the models list, an alias's
    target (the next one when a target reports a usage or rate limit before the first
    byte reached the client), the window limit, the token budget and ``max_concurrent``;
    then ``run_logged``, and the usage filed under the model that answered."""
    gw, key = request.app[GATEWAY], usage.key
    gov = gw.governor
    asked = inbound.conversation.model
    targets = gov.targets(key, asked)
    aliased = gov.ring.targets(asked) is not None
    tried: list[str] = []

    def backend_of(model: str) -> str | None:
        r = gw.source.route(model)
        return r.backend if r is not None else None

    while True:
        if aliased:
            target, backend = gov.choose(key, targets, backend_of, tried)
            attempt = _retarget(inbound, data, target, read, request)
        else:
            target, attempt, backend = asked, inbound, backend_of(asked) or ""
            if backend:
                gov.check_window(key, asked, backend)
        usage.model = target
        req = attempt.conversation
        # the input's estimate: rendered only for a key with a token budget (else the
        # usage report of the CLI decides, and the estimate is made only if none comes)
        budgeted = key is not None and key.tokens_per_day is not None
        prompt = input_estimate(req) if budgeted else 0
        out = req.max_completion_tokens or req.max_tokens
        slot = await gov.admit(key, estimate_tokens(prompt, out), gw.settings.queue_timeout_s)
        request[ANSWERED_BY] = target
        request.pop(CALL, None)
        try:
            response = await run_logged(request, attempt, fmt)
        except CliFailed as exc:
            if exc.kind in LIMIT_FAILURES and backend:
                gov.cool(backend, exc.retry_after_s)  # steers alias choice only
            left = [t for t in targets if t != target and t not in tried]
            if aliased and exc.kind in FALL_THROUGH and left and not request.get(HEAD_SENT):
                tried.append(target)  # fell through: not the key's error
                if slot is not None:
                    slot.drop()
                continue
            _finish(slot, usage, request, gw, req, error=True)
            raise
        except BaseException:
            _finish(slot, usage, request, gw, req, error=True)
            raise
        _finish(slot, usage, request, gw, req, error=request.get(SLOW, False))
        return response


def _finish(
    slot: Slot | None,
    usage: Filing,
    request: web.Request,
    gw: Gateway,
    req: ChatCompletionRequest,
    *,
    error: bool,
) -> None:
    """File the call under the model that answered, with the CLI's usage report; a call
    whose CLI ran but reported none counts its input's estimate, never zero."""
    usage.done = True
    call = request.get(CALL)
    if slot is None:  # no key, or no limits to hold: file the usage all the same
        if usage.key is None or gw.governor.store is None:
            return
        slot = Slot(gw.governor, usage.key, 0)
    reported = call.outcome.usage if call is not None else None
    if reported is not None and reported.prompt_tokens + reported.completion_tokens > 0:
        slot.finish(
            usage.model,
            error=error,
            input_tokens=reported.prompt_tokens,
            cached_input_tokens=reported.prompt_tokens_details.cached_tokens,
            output_tokens=reported.completion_tokens,
        )
    elif call is not None and call.stats is not None:  # ran, ended before its report
        try:
            estimate = slot.estimate or estimate_tokens(input_estimate(req), 0)
        except CallError:  # pragma: no cover - the estimate raises nothing today
            estimate = 1
        slot.finish(usage.model, error=error, input_tokens=max(1, estimate))
    else:
        slot.finish(usage.model, error=error, input_tokens=0)


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
    request[CALL] = call
    logger = log.bind(
        request_id=uuid.uuid4().hex[:12],
        api=fmt.name,
        model=req.model,
        backend=call.plan.launch.backend,
        stream=bool(req.stream),
        tools=len(req.tools or []),
    )
    if inbound.dropped:
        logger = logger.bind(dropped_tools=[d.name for d in inbound.dropped])
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
        gov = gw.governor
        gov.report(record.backend, call.outcome.rate_limits)  # the keys' limits
        failure = call.outcome.failure
        if failure in LOGIN_FAILURES:  # alias choice skips it until it answers again
            gov.login_refused(record.backend, code or str(failure))
        elif failure is None and status == 200:
            gov.login_worked(record.backend)


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


def _cards(gw: Gateway, key: ClientKey | None = None) -> list[ModelCard]:
    """The models served, then the keys file's aliases (owned by ``alias``): those the
    caller's key may use."""
    cards = [ModelCard(id=m, created=STARTED, owned_by=owner) for m, owner in gw.source.models()]
    cards += [ModelCard(id=a, created=STARTED, owned_by="alias") for a in gw.governor.ring.aliases]
    return [c for c in cards if key is None or key.allows(c.id)]


async def _list_models(request: web.Request, fmt: WireFormat) -> web.Response:
    shape = models_shape(fmt, request.headers)
    return json_response(shape.listing(_cards(request.app[GATEWAY], client_key(request))))


async def _get_model(request: web.Request, fmt: WireFormat) -> web.Response:
    gw, shape = request.app[GATEWAY], models_shape(fmt, request.headers)
    model_id = shape.model_id(unquote(request.match_info["model"]))
    key = client_key(request)
    if key is not None and not key.allows(model_id):
        raise NotAllowed(f"the key '{key.name}' may not use the model '{model_id}'")
    card = next((c for c in _cards(gw) if c.id == model_id), None)
    if card is None:
        r = gw.source.route(model_id)
        if r is None:
            raise APIError(
                404, f"The model '{model_id}' does not exist", param="model", code="model_not_found"
            )
        card = ModelCard(id=model_id, created=STARTED, owned_by=r.backend)
    return json_response(shape.one(card))
