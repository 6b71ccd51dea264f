"""``GET /status``: one HTML page an operator glances at.

Per enabled backend: its binary and version (tested release or not, as ``cli-proxy doctor``
decides), its login and the access token's expiry, and every rate-limit window the CLIs
reported (``Metrics.rate_limit_state``: whatever backends feed it) as a ``<meter>`` with its
reset time. For the gateway: calls running and queued against the bounds, CLI processes,
the warm pool, calls served (warm, warming, cold), errors of the last hour by kind, and the last 50
requests (``calls_log.py``).

Server-rendered, no script, no external asset (inline CSS, works offline); the page reloads
itself every ``REFRESH_S`` seconds. Cheap: a view reads in-memory state and the login
files' cached reads (one ``stat`` each, ``logins.read_json``); the binaries' versions are
probed in worker threads at most every ``PROBE_TTL_S``, never on the view's path.

Access: the Host/Origin guard as for the API; with API keys set, the key as a Bearer token
(scripts) or as the password of HTTP Basic auth (any user name; a browser asks for it on
the 401's ``WWW-Authenticate``), never in the URL. Never a prompt, an answer, a key or a
token: the records hold none, the login is shown by its kind, file and expiry; and every
value is escaped (a model name is the client's, a window's name the CLI's).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import math
import os
import time
from pathlib import Path

from aiohttp import web

from cli_proxy.backends.checks import VERSION_TIMEOUT_S, BackendReport, check_backend
from cli_proxy.gateway import Gateway, LiveBackends, user_home
from cli_proxy.logs import log
from cli_proxy.run.keys import KeyRing, TwoCredentials
from cli_proxy.server.errors import APIError
from cli_proxy.server.metrics import Metrics
from cli_proxy.server.status.page import render

STATUS_PATH = "/status"
PROBE_TTL_S = 600.0
"""Binaries and versions are probed again after this long (a CLI upgraded in place)."""
PROBE_WAIT_S = 3.0
"""The first view waits this long for the first probe; later views never wait."""
CHALLENGE = 'Basic realm="cli-proxy"'
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    # nothing but the page's own inline style: no script, no image, no frame, no form
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


# ---------------------------------------------------------------- access


def presented_key(authorization: str) -> bytes | None:
    """The key in an ``Authorization`` header: a Bearer token, or the password of Basic
    auth (whatever the user name); None for anything else."""
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value.encode("utf-8", "surrogateescape")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return None
        _user, colon, password = decoded.partition(b":")
        return password if colon else None
    return None


def authorized(authorization: str, ring: KeyRing) -> bool:
    """Any key the gateway accepts opens the page (``KeyRing.match``: constant time)."""
    if not ring.enabled:
        return True
    presented = presented_key(authorization)
    if not presented:
        return False
    try:
        return ring.match([presented]) is not None
    except TwoCredentials:  # one header holds one credential: never raised here
        return False


# ---------------------------------------------------------------- the page's inputs


class StatusPage:
    """The ``/status`` handler; holds the probe of the binaries (doctor's check, cached)."""

    def __init__(self, gateway: Gateway, metrics: Metrics) -> None:
        self.gateway = gateway
        self.metrics = metrics
        self.started = time.time()
        self.reports: dict[str, BackendReport] = {}
        self._probed_at = -math.inf
        self._probe: asyncio.Task[None] | None = None

    def live(self) -> LiveBackends | None:
        source = self.gateway.source
        if isinstance(source, LiveBackends):
            return source
        live = getattr(source, "live", None)  # a replay source with live backends
        return live if isinstance(live, LiveBackends) else None

    async def handle(self, request: web.Request) -> web.Response:
        if not authorized(request.headers.get("Authorization", ""), self.gateway.governor.ring):
            raise APIError(
                401,
                "Incorrect or missing API key: /status takes it as the password of HTTP Basic "
                "auth (any user name) or as 'Authorization: Bearer <key>'",
                code="invalid_api_key",
                headers={"WWW-Authenticate": CHALLENGE},
            )
        await self._probed()
        body = render(
            self.gateway, self.metrics, self.live(), self.reports, self.started, time.time()
        )
        return web.Response(
            text=body, content_type="text/html", charset="utf-8", headers=SECURITY_HEADERS
        )

    async def _probed(self) -> None:
        """Start a probe when the last one is old; the first view waits for it briefly."""
        if self._probe is None and time.monotonic() - self._probed_at > PROBE_TTL_S:
            self._probe = asyncio.create_task(self._run_probe())
        if self._probe is not None and not self.reports:
            await asyncio.wait({self._probe}, timeout=PROBE_WAIT_S)

    async def _run_probe(self) -> None:
        live = self.live()
        names = list(live.backends) if live is not None else []
        settings, env, home = self.gateway.settings, dict(os.environ), Path(user_home())
        try:
            reports = await asyncio.gather(
                *(asyncio.to_thread(check_backend, n, settings, env, home) for n in names)
            )
            self.reports = {r.name: r for r in reports}
        except Exception:
            log.exception("status_probe_failed")
        finally:
            self._probed_at = time.monotonic()
            self._probe = None

    async def close(self, _app: web.Application) -> None:
        """At shutdown, let a probe in flight end (its threads and their ``--version``
        processes could not be stopped anyway; doctor bounds each in time)."""
        probe = self._probe
        if probe is not None:
            await asyncio.wait({probe}, timeout=VERSION_TIMEOUT_S + 1)
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe


def add_status_page(app: web.Application, gateway: Gateway, metrics: Metrics) -> None:
    """``GET /status`` on ``app``; it authenticates itself (the API's auth middleware
    leaves ``STATUS_PATH`` to it: Basic auth too)."""
    page = StatusPage(gateway, metrics)
    app.router.add_get(STATUS_PATH, page.handle)
    app.on_cleanup.append(page.close)
