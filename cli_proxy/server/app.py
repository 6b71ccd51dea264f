"""HTTP surface: middlewares (errors, Host/Origin guard, auth), the gateway's own routes
(health, metrics, status, the OpenAPI document) and the wire formats' routes, read from
their table (``formats.py``). No domain step and no wire format lives here:
``handlers.py`` runs a route, ``Gateway.open_call`` plans, ``delivery`` writes the answer,
``errors.api_error`` maps failures and each format's entry renders them."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute

from cli_proxy.failures import CallError
from cli_proxy.gateway import Gateway
from cli_proxy.logs import log
from cli_proxy.server.access import authenticate, client_key, name_the_model
from cli_proxy.server.delivery import json_response
from cli_proxy.server.errors import APIError, api_error
from cli_proxy.server.formats import error_response, format_for, formats
from cli_proxy.server.guard import CORS_ALLOW_HEADERS, Guard
from cli_proxy.server.handlers import GATEWAY, LOGGED, handler
from cli_proxy.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from cli_proxy.server.metrics import METRICS, KeysCollector, for_gateway
from cli_proxy.server.openapi import openapi_json
from cli_proxy.server.status.calls_log import CallRecord
from cli_proxy.server.status.routes import STATUS_PATH, add_status_page
from cli_proxy.server.wire import server_tools

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# the call routes, by the name of their format: a request refused before its call ran is
# counted under that name too
CALL_ROUTES: web.AppKey[dict[AbstractRoute, str]] = web.AppKey("call_routes", dict)

__all__ = ["GATEWAY", "create_app", "error_response"]


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.monotonic()
    fmt = format_for(request.path, request.headers)
    try:
        return await handler(request)
    except (APIError, CallError) as exc:
        err = exc if isinstance(exc, APIError) else api_error(exc)
        if not request.get(LOGGED, False):  # run_logged already logged this request
            api = request.app[CALL_ROUTES].get(request.match_info.route)
            if api is not None:  # an API request refused before any backend ran
                duration = time.monotonic() - started
                record = CallRecord(api, "", "", err.status, err.code or "", duration)
                request.app[METRICS].observe(record)
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
        return error_response(err, fmt)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(
            APIError(413, f"request body too large: {exc.text}", code="request_too_large"), fmt
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
                fmt,
            )
        return error_response(APIError(exc.status, exc.reason, code=None), fmt)
    except Exception:
        log.exception("unhandled_error", path=request.path)
        return error_response(APIError(500, "internal gateway error; see the gateway log"), fmt)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every path but the probes and the status page (its own auth) needs a key when the
    gateway has any (``--api-key``, ``--keys``): ``access.authenticate``."""
    reach = request.method == "HEAD" and request.path == "/"
    own = request.path in HEALTH_PATHS or request.path == STATUS_PATH
    if not own and not reach:
        authenticate(request, request.app[GATEWAY])
    return await handler(request)


async def usage(request: web.Request) -> web.Response:
    """``GET /v1/usage``: the calling key's own usage (docs/keys.md); not itself counted."""
    gw, key = request.app[GATEWAY], client_key(request)
    store = gw.governor.store
    if key is None or store is None:
        raise APIError(
            404,
            "usage per key is kept only with a keys file (--keys; docs/keys.md)",
            code="usage_not_kept",
        )
    return json_response(store.usage(key.name))


async def head_root(request: web.Request) -> web.Response:
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
            "rate_limits": request.app[METRICS].rate_limit_state(),
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


async def serve_metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition (prometheus-client); needs the API key when one is set."""
    body = request.app[METRICS].scrape()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def not_found(request: web.Request) -> web.Response:
    return error_response(
        APIError(404, f"no route for {request.method} {request.path}", code="unknown_url"),
        format_for(request.path, request.headers),
    )


def add_format_routes(app: web.Application) -> None:
    """Every route of every registered wire format, under each of its prefixes."""
    for fmt in formats():
        for route in fmt.routes:
            serve = handler(fmt, route)
            for prefix in route.prefixes:
                added = app.router.add_route(route.method, prefix + route.path, serve)
                if route.kind == "call":
                    app[CALL_ROUTES][added] = fmt.name


def create_app(gateway: Gateway) -> web.Application:
    s = gateway.settings
    hosts = [*s.allowed_hosts, *([s.host] if s.host not in ("0.0.0.0", "::", "") else [])]
    allow_headers = [*CORS_ALLOW_HEADERS, *(h for f in formats() for h in f.cors_headers)]
    guard = Guard(hosts, s.cors_origins, allow_headers)
    app = web.Application(
        middlewares=[errors_middleware, guard.middleware(), auth_middleware],
        client_max_size=s.max_body_bytes,
    )
    app.on_response_prepare.append(guard.on_prepare)
    app.on_response_prepare.append(server_tools.on_prepare)  # x-cli-proxy-dropped-tools
    app.on_response_prepare.append(name_the_model)  # x-cli-proxy-model
    app[GATEWAY] = gateway
    app[METRICS] = metrics = for_gateway(gateway)
    metrics.registry.register(KeysCollector(gateway.governor))
    app[CALL_ROUTES] = {}
    app.router.add_get("/health", health)
    app.router.add_get("/health/ready", ready)
    app.router.add_get("/openapi.json", openapi_json)  # generated from the wire models
    app.router.add_get("/metrics", serve_metrics)
    app.router.add_get("/v1/usage", usage)
    add_status_page(app, gateway, metrics)  # GET /status: HTML for people (Basic auth too)
    app.router.add_route("HEAD", "/", head_root)  # Claude Code's reachability probe
    add_format_routes(app)

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
