"""Fakes for the quota captures (tests/data/real-cli/quota-findings.md), on loopback.

``QuotaModelAPI`` is tests/fakes/fake_model_api.py with three additions: ``headers`` are added to
every model answer (``/v1/messages``, ``/v1/responses``, Gemini ``...Content``), errors
included (the rate-limit headers the CLIs read); ``error`` = ``(status, body)`` answers every
model call with that body instead; ``usage`` answers codex's account usage read
(``GET /api/codex/usage``, ``GET /backend-api/wham/usage``).

``QuotaCodeAssist`` is tests/fakes/fake_code_assist.py with ``quota`` answering
``retrieveUserQuota``, ``load`` merged into the ``loadCodeAssist`` answer and ``error``
answering ``streamGenerateContent``; ``calls`` records ``(method, body, time.monotonic())``
of every call (the body of those two only).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.fake_code_assist import FakeCodeAssist
from tests.fakes.fake_model_api import FakeModelAPI, serve_app

MODEL_PATHS = ("/v1/messages", "/v1/responses", "Content")
USAGE_PATHS = ("/api/codex/usage", "/backend-api/wham/usage")


@dataclass
class QuotaModelAPI(FakeModelAPI):
    headers: dict[str, str] = field(default_factory=dict)
    error: tuple[int, dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None

    def _error(self) -> web.Response | None:
        return web.json_response(self.error[1], status=self.error[0]) if self.error else None

    async def anthropic_messages(self, request: web.Request) -> web.StreamResponse:
        if self.error:
            await self._record(request)
        return self._error() or await super().anthropic_messages(request)

    async def openai_responses(self, request: web.Request) -> web.StreamResponse:
        if self.error:
            await self._record(request)
        return self._error() or await super().openai_responses(request)

    async def gemini_model_call(self, request: web.Request) -> web.StreamResponse:
        if self.error:
            await self._record(request)
        return self._error() or await super().gemini_model_call(request)

    async def unknown(self, request: web.Request) -> web.Response:
        if request.path in USAGE_PATHS and self.usage is not None:
            await self._record(request)
            return web.json_response(self.usage)
        return await super().unknown(request)

    async def _add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.method == "POST" and request.path.endswith(MODEL_PATHS):
            response.headers.update(self.headers)

    def make_app(self) -> web.Application:
        app = super().make_app()
        app.on_response_prepare.append(self._add_headers)
        return app

    async def start(self) -> QuotaModelAPI:
        self._runner, self.url = await serve_app(self.make_app())
        return self


@dataclass
class QuotaCodeAssist(FakeCodeAssist):
    quota: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    error: tuple[int, dict[str, Any]] | None = None
    calls: list[tuple[str, Any, float]] = field(default_factory=list)  # + time.monotonic()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.path.rpartition(":")[2]
        body = None  # read here only when not handed on (aiohttp's body is read once)
        if method in ("retrieveUserQuota", "loadCodeAssist") and request.can_read_body:
            body = await request.json()
        self.calls.append((method, body, time.monotonic()))
        if method == "retrieveUserQuota" or (
            method == "streamGenerateContent" and self.error is not None
        ):
            refused = self.refused(request)  # the login's bearer, as on every other call
            if refused is not None:
                return refused
            if method == "retrieveUserQuota":
                return web.json_response(self.quota)
            assert self.error is not None
            return web.json_response(self.error[1], status=self.error[0])
        response = await super()._handle(request)
        if method == "loadCodeAssist" and self.load and isinstance(response, web.Response):
            return web.json_response({**json.loads(response.body), **self.load})  # type: ignore[arg-type]
        return response
