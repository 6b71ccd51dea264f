"""A fake OAuth token endpoint for loopback tests of login refresh.

It behaves like the providers' refresh endpoints where it matters for the gateway: refresh
tokens are **single-use and rotate** (each refresh answers a new access token and a new
refresh token; the presented one is spent), and a spent or unknown refresh token answers
``400 {"error": "invalid_grant"}``. Every request is recorded, so a test can count refreshes
and see whether a spent token ever came back.

Paths (whatever the host a proxy or an override sends here):

* ``POST /oauth/token`` (codex, ``CODEX_REFRESH_TOKEN_URL_OVERRIDE``; JSON body),
* ``POST /v1/oauth/token`` (claude, through a CONNECT proxy; JSON body),
* ``POST /token`` (Google, gemini; form body; Google refresh tokens do not rotate:
  ``rotate=False`` answers no new refresh token), and ``/tokeninfo`` (an access token's
  validity: not a refresh, counted in ``infos``).

``delay`` makes each answer late (the slow-endpoint case). An authorization-code exchange
(``grant_type=authorization_code``: gemini's interactive login over ACP reads a stdin line as
the code) is refused and recorded in ``codes``, never counted as a refresh.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.fake_model_api import serve_app


def jwt(claims: dict[str, Any]) -> str:
    """An unsigned JWT (the CLIs decode, never verify, their tokens' claims)."""

    def part(obj: dict[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.sig"


def codex_claims(exp: float) -> dict[str, Any]:
    return {
        "email": "user@example.com",
        "exp": int(exp),
        "iat": int(exp) - 3600,
        "https://api.openai.com/auth": {
            "chatgpt_plan_type": "pro",
            "chatgpt_account_id": "acct-test",
            "chatgpt_user_id": "user-test",
        },
    }


def codex_auth_json(refresh_token: str, expires_at: float, last_refresh: str) -> dict[str, Any]:
    """A ChatGPT-login ``auth.json`` as ``codex login`` writes it."""
    return {
        "auth_mode": "chatgpt",
        "OPENAI_API_KEY": None,
        "tokens": {
            "id_token": jwt(codex_claims(expires_at)),
            "access_token": jwt(codex_claims(expires_at)),
            "refresh_token": refresh_token,
            "account_id": "acct-test",
        },
        "last_refresh": last_refresh,
    }


@dataclass
class TokenRequest:
    path: str
    refresh_token: str
    outcome: str  # "issued", "spent" (a spent token came back), "unknown"
    at: float


@dataclass
class FakeTokenAPI:
    """Rotating single-use refresh tokens; the live one is ``live``."""

    live: str
    delay: float = 0.0
    rotate: bool = True
    lifetime_s: int = 3600
    requests: list[TokenRequest] = field(default_factory=list)
    spent: set[str] = field(default_factory=set)
    access: str = ""  # the last access token issued
    accesses: set[str] = field(default_factory=set)
    infos: int = 0  # Google tokeninfo lookups (not refreshes)
    codes: list[str] = field(default_factory=list)  # authorization codes presented
    url: str = ""
    _runner: web.AppRunner | None = None

    def issued(self, access_token: str) -> bool:
        """Whether this access token is one the endpoint issued (the model API's check)."""
        return bool(access_token) and access_token in self.accesses

    @property
    def refreshes(self) -> int:
        return len(self.requests)

    @property
    def spent_resent(self) -> int:
        return sum(1 for r in self.requests if r.outcome == "spent")

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.method == "GET" and request.path != "/tokeninfo":
            return web.json_response({})  # a profile lookup, say
        if request.content_type == "application/x-www-form-urlencoded":
            form = await request.post()
            body: dict[str, Any] = {k: str(v) for k, v in form.items()}
        else:
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
        if request.path == "/tokeninfo":  # Google: is this access token valid?
            self.infos += 1
            bearer = request.headers.get("Authorization", "")[len("Bearer ") :]
            access = str(body.get("access_token") or request.query.get("access_token") or bearer)
            if access not in self.accesses:
                return web.json_response({"error": "invalid_token"}, status=400)
            scope = "https://www.googleapis.com/auth/cloud-platform"
            return web.json_response({"expires_in": self.lifetime_s, "scope": scope})
        if body.get("grant_type") == "authorization_code":
            self.codes.append(str(body.get("code") or ""))
            return web.json_response({"error": "invalid_grant"}, status=400)
        token = str(body.get("refresh_token") or "")
        if self.delay:
            await asyncio.sleep(self.delay)
        if token != self.live:
            outcome = "spent" if token in self.spent else "unknown"
            self.requests.append(TokenRequest(request.path, token, outcome, time.time()))
            return web.json_response(
                {
                    "error": "invalid_grant",
                    "error_description": "Refresh token has already been used"
                    if outcome == "spent"
                    else "Invalid refresh token",
                },
                status=400,
            )
        self.requests.append(TokenRequest(request.path, token, "issued", time.time()))
        exp = time.time() + self.lifetime_s
        answer: dict[str, Any] = {"expires_in": self.lifetime_s, "token_type": "Bearer"}
        if request.path == "/oauth/token":  # codex
            self.access = jwt(codex_claims(exp))
            answer |= {"id_token": jwt(codex_claims(exp)), "access_token": self.access}
        elif request.path == "/v1/oauth/token":  # claude
            self.access = "sk-ant-oat01-" + secrets.token_hex(16)
            answer |= {
                "access_token": self.access,
                "scope": "user:inference user:profile",
                "account": {"uuid": "acct-test", "email_address": "user@example.com"},
                "organization": {"uuid": "org-test", "name": "test"},
            }
        else:  # Google
            self.access = "ya29." + secrets.token_hex(16)
            answer |= {
                "access_token": self.access,
                "scope": "https://www.googleapis.com/auth/cloud-platform",
                "id_token": jwt({"email": "user@example.com", "exp": int(exp)}),
            }
        self.accesses.add(self.access)
        if self.rotate:
            self.spent.add(token)
            self.live = "rt-" + secrets.token_hex(8)
            answer["refresh_token"] = self.live
        return web.json_response(answer)

    async def start(self) -> FakeTokenAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.url = await serve_app(app)
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
