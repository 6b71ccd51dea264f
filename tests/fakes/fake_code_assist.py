"""A fake Google Code Assist API (what gemini's "Login with Google" talks to) on loopback,
wrapping tests/fakes/fake_model_api.py: gemini reaches it through ``CODE_ASSIST_ENDPOINT``.

``POST /v1internal:loadCodeAssist`` names a tier and project (no onboarding);
``:streamGenerateContent`` / ``:generateContent`` pass the wrapped request to the fake model
API's Gemini endpoint and wrap each answer as ``{"response": ...}``, as Code Assist does.
Every call needs the OAuth access token of the test's login as ``Authorization: Bearer``:
``accept_bearer`` (no default: a test names the login it expects) decides, and any other
token, or none, answers Google's 401 ``UNAUTHENTICATED``; ``bearers`` records the token of
every call. Anything else answers ``{}``.

``personal=True`` answers as Code Assist has answered a personal Google account (AI Pro, Ultra,
free) since 2026-06-18: ``loadCodeAssist`` names no current tier and no project, offers only
``standard-tier`` (a project of the user's own) and lists ``free-tier`` as ineligible with
reason ``UNSUPPORTED_CLIENT``; ``onboardUser`` without a project completes with none. The
Gemini CLI then raises ``IneligibleTierError`` with the reason's message. Shape, text and
sources: tests/data/real-cli/gemini-0.61.0-code-assist-ineligible.md. A call that names a
project (``GOOGLE_CLOUD_PROJECT``: Code Assist Standard/Enterprise) is served as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from tests.fakes.fake_model_api import serve_app

# The ineligible tier a personal Google account is answered with since 2026-06-18 (the reason
# text and ids as the Gemini CLI printed them: see gemini-0.61.0-code-assist-ineligible.md).
UNSUPPORTED_CLIENT_MESSAGE = (
    "This client is no longer supported for Gemini Code Assist for individuals. To continue "
    "using Gemini, please migrate to the Antigravity suite of products: https://antigravity.google"
)
INELIGIBLE_FREE_TIER = {
    "reasonCode": "UNSUPPORTED_CLIENT",
    "reasonMessage": UNSUPPORTED_CLIENT_MESSAGE,
    "tierId": "free-tier",
    "tierName": "Gemini Code Assist for individuals",
}
PERSONAL_LOAD_CODE_ASSIST = {
    "allowedTiers": [
        {
            "id": "standard-tier",
            "name": "Gemini Code Assist",
            "description": "Unlimited coding assistant with the most powerful Gemini models",
            "userDefinedCloudaicompanionProject": True,
            "privacyNotice": {},
            "isDefault": True,
        }
    ],
    "ineligibleTiers": [INELIGIBLE_FREE_TIER],
}


@dataclass
class FakeCodeAssist:
    model_api: str  # the fake model API's URL
    accept_bearer: Callable[[str], bool]  # e.g. FakeTokenAPI.issued
    bearers: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    personal: bool = False  # a personal account: refused as ineligible (UNSUPPORTED_CLIENT)
    url: str = ""
    _runner: web.AppRunner | None = None

    def refused(self, request: web.Request) -> web.Response | None:
        """Google's 401 for a call whose bearer token is not the login's (None: taken)."""
        self.paths.append(request.path)
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        self.bearers.append(token)
        if self.accept_bearer(token):
            return None
        error = {
            "code": 401,
            "message": "Request had invalid authentication credentials. Expected OAuth 2 access "
            "token, login cookie or other valid authentication credential.",
            "status": "UNAUTHENTICATED",
        }
        return web.json_response({"error": error}, status=401)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.path.rpartition(":")[2]
        refused = self.refused(request)
        if refused is not None:
            return refused
        body = await request.json() if request.can_read_body else {}
        project = _project(body)
        if self.personal and project is None:
            if method == "loadCodeAssist":
                return web.json_response(PERSONAL_LOAD_CODE_ASSIST)
            if method == "onboardUser":  # standard-tier needs the user's own project
                return web.json_response({"name": "", "done": True, "response": {}})
        if method == "loadCodeAssist":
            return web.json_response(
                {
                    "currentTier": {"id": "standard-tier", "name": "Test"},
                    "allowedTiers": [{"id": "standard-tier", "isDefault": True}],
                    "cloudaicompanionProject": "test-project",
                }
            )
        if method not in ("streamGenerateContent", "generateContent"):
            return web.json_response({})
        model = str(body.get("model") or "gemini-2.5-flash")
        url = f"{self.model_api}/v1beta/models/{model}:{method}"
        stream = method == "streamGenerateContent"
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url, json=body.get("request") or {}, params={"alt": "sse"} if stream else None
            ) as upstream,
        ):
            if not stream or upstream.status != 200:
                data = await upstream.json()
                if upstream.status != 200:
                    return web.json_response(data, status=upstream.status)
                return web.json_response({"response": data})
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            async for raw in upstream.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("data: "):
                    wrapped = {"response": json.loads(line[6:]), "traceId": "fake"}
                    await out.write(f"data: {json.dumps(wrapped)}\r\n\r\n".encode())
            await out.write_eof()
            return out

    async def start(self) -> FakeCodeAssist:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.url = await serve_app(app)
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _project(body: dict[str, object]) -> str | None:
    """The Google Cloud project a call names (``GOOGLE_CLOUD_PROJECT``), or None."""
    project = body.get("cloudaicompanionProject") or body.get("project")
    return project if isinstance(project, str) and project else None
