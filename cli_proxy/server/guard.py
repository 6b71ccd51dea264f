"""Requests a web page can forge are refused before anything runs.

A browser sends a cross-origin POST without a CORS preflight when its body is
``text/plain``, a form encoding or empty, and DNS rebinding lets a page reach a loopback
server under a foreign ``Host`` name. So: a POST must carry ``application/json``; ``Host``
must be a loopback name or one configured; a request with a foreign ``Origin`` gets 403.
Origins listed in ``cors_origins`` are allowed and get a proper CORS preflight.
OpenAI SDKs, curl, LangChain and LiteLLM send JSON with no ``Origin``: unaffected.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from aiohttp.typedefs import Middleware

from cli_proxy.server.errors import APIError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
CORS_ALLOW_HEADERS = ("Authorization", "Content-Type", "X-Api-Key")  # each API adds its own


def _host_name(host: str) -> str:
    """``Host`` without its port (``[::1]:8080`` -> ``::1``), lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else host


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """The request policy; ``allowed_hosts`` and ``cors_origins`` come from the settings."""

    def __init__(
        self,
        allowed_hosts: Collection[str],
        cors_origins: Collection[str],
        allow_headers: Collection[str] = CORS_ALLOW_HEADERS,
    ) -> None:
        self.allow_headers = ", ".join(dict.fromkeys(allow_headers))
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.cors_origins = frozenset(o.rstrip("/") for o in cors_origins)
        self.any_origin = "*" in self.cors_origins

    def host_ok(self, host: str | None) -> bool:
        if not host:
            return False
        name = _host_name(host)
        return is_loopback(name) or name in self.allowed_hosts or "*" in self.allowed_hosts

    def origin_ok(self, origin: str) -> bool:
        return self.any_origin or origin.rstrip("/") in self.cors_origins

    def check(self, request: web.Request) -> None:
        if not self.host_ok(request.headers.get("Host")):
            raise APIError(
                403,
                f"Host {request.headers.get('Host', '')!r} is not served here: only loopback "
                "names, or the names in allowed_hosts (CLI_PROXY_ALLOWED_HOSTS)",
                code="host_not_allowed",
            )
        origin = request.headers.get("Origin")
        if origin is not None and not self.origin_ok(origin):
            raise APIError(
                403,
                "cross-origin requests are refused; allow this origin with cors_origins "
                "(CLI_PROXY_CORS_ORIGINS) to use the gateway from a browser app",
                code="origin_not_allowed",
            )
        routed = request.match_info.http_exception is None  # else a 404/405 follows anyway
        if request.method == "POST" and routed and request.content_type != "application/json":
            raise APIError(
                415,
                f"Content-Type must be application/json, not {request.content_type!r}",
                code="unsupported_media_type",
            )

    def cors_headers(self, origin: str) -> dict[str, str]:
        return {
            "Access-Control-Allow-Origin": "*" if self.any_origin else origin,
            "Vary": "Origin",
        }

    def middleware(self) -> Middleware:
        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            origin = request.headers.get("Origin")
            if request.method == "OPTIONS" and origin is not None:
                return self._preflight(request, origin)
            self.check(request)
            return await handler(request)

        return guard

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """CORS headers on every answer to an allowed origin, SSE streams included."""
        origin = request.headers.get("Origin")
        if origin is not None and self.origin_ok(origin):
            response.headers.update(self.cors_headers(origin))

    def _preflight(self, request: web.Request, origin: str) -> web.Response:
        if not self.host_ok(request.headers.get("Host")) or not self.origin_ok(origin):
            return web.Response(status=403)
        return web.Response(
            status=204,
            headers={
                **self.cors_headers(origin),
                "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                "Access-Control-Allow-Headers": request.headers.get(
                    "Access-Control-Request-Headers", self.allow_headers
                ),
                "Access-Control-Max-Age": "600",
            },
        )
