"""A fake GitHub and Copilot API for copilot 1.0.102's login path, reached through
tests/fakes/fake_connect_proxy.py (``api.github.com`` and the ``endpoints.api`` host it names).

What 1.0.102 asks with an ACCEPTED token (captured: tests/data/real-cli/copilot-1.0.102-login.json):
``GET api.github.com/copilot_internal/user`` (``Authorization: Bearer <token>``), ``GET
api.github.com/copilot_internal/managed_settings?client_id=github%2Fcli...`` (a 404 is taken
as none), then ``GET <endpoints.api>/models`` with the same GitHub token (no token exchange)
and the model calls at ``<endpoints.api>`` (``POST /v1/messages`` for a model whose
``supported_endpoints`` name it). The answers' shapes: the public shape of these endpoints,
checked against the field names in copilot's native runtime
(``@github/copilot-linux-x64`` 1.0.102, extracted ``prebuilds/linux-x64/runtime.node``:
the ``ApiQuotaSnapshot`` and user fields at byte 12415920, ``copilot_internal/user`` at
12359415, ``model_picker_enabled`` at 9444949, ``supported_endpoints`` at 16891428); copilot
accepted them and reported the models over ACP. Any other token is refused 401 "Bad
credentials", as GitHub answers."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

API_HOST = "api.individual.githubcopilot.com"
HOSTS = ["api.github.com", API_HOST]

QUOTA = {
    "chat": {"entitlement": 0, "remaining": 0, "percent_remaining": 100.0, "unlimited": True},
    "completions": {
        "entitlement": 0,
        "remaining": 0,
        "percent_remaining": 100.0,
        "unlimited": True,
    },
    "premium_interactions": {
        "entitlement": 300,
        "remaining": 127,
        "quota_remaining": 127.5,
        "percent_remaining": 42.5,
        "unlimited": False,
        "overage_count": 0,
        "overage_permitted": False,
    },
}


def user_answer(login: str) -> dict[str, Any]:
    """``copilot_internal/user`` for an individual plan."""
    return {
        "login": login,
        "access_type_sku": "monthly_subscriber_quota",
        "analytics_tracking_id": "0" * 32,
        "assigned_date": "2026-01-01T00:00:00Z",
        "can_signup_for_limited": False,
        "chat_enabled": True,
        "copilot_plan": "individual",
        "organization_login_list": [],
        "organization_list": [],
        "endpoints": {
            "api": f"https://{API_HOST}",
            "origin-tracker": "https://origin-tracker.individual.githubcopilot.com",
            "proxy": "https://proxy.individual.githubcopilot.com",
            "telemetry": "https://telemetry.individual.githubcopilot.com",
        },
        "quota_reset_date": "2026-12-01",
        "quota_snapshots": {
            k: {
                "quota_id": k,
                "overage_count": 0,
                "overage_permitted": False,
                "quota_remaining": float(v["remaining"]),
                "timestamp_utc": "2026-11-28T00:00:00Z",
                **v,
            }
            for k, v in QUOTA.items()
        },
    }


def model_entry(model_id: str, name: str, vendor: str, endpoints: list[str]) -> dict[str, Any]:
    """One model of ``GET <endpoints.api>/models``."""
    return {
        "id": model_id,
        "name": name,
        "object": "model",
        "vendor": vendor,
        "version": model_id,
        "preview": False,
        "model_picker_enabled": True,
        "model_picker_category": "versatile",
        "is_chat_default": False,
        "is_chat_fallback": False,
        "capabilities": {
            "family": model_id,
            "object": "model_capabilities",
            "type": "chat",
            "tokenizer": "o200k_base",
            "limits": {
                "max_context_window_tokens": 200000,
                "max_output_tokens": 32000,
                "max_prompt_tokens": 128000,
            },
            "supports": {"streaming": True, "tool_calls": True, "vision": True},
        },
        "policy": {"state": "enabled", "terms": "Enable access to the latest models."},
        "billing": {"is_premium": True, "multiplier": 1},
        "supported_endpoints": endpoints,
    }


MODELS = [
    model_entry("claude-sonnet-4.6", "Claude Sonnet 4.6", "Anthropic", ["/v1/messages"]),
    model_entry("gpt-5.5", "GPT-5.5", "OpenAI", ["/chat/completions", "/responses"]),
    model_entry("gemini-3.1-pro-preview", "Gemini 3.1 Pro", "Google", ["/chat/completions"]),
]


@dataclass
class FakeCopilotAPI:
    """Takes only ``token``; logs every request (method, host, path, auth, headers, body)."""

    token: str
    login: str = "octo-test"
    models: list[dict[str, Any]] = field(default_factory=lambda: list(MODELS))
    answer: str = "hello from the fake Copilot API"
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    _t0: float = field(default_factory=time.monotonic)

    async def start(self) -> FakeCopilotAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            {
                "t": round(time.monotonic() - self._t0, 2),
                "method": request.method,
                "host": request.host,
                "path": request.path,
                "query": request.query_string,
                "auth": request.headers.get("Authorization", ""),
                "headers": {
                    k: v for k, v in request.headers.items() if k.lower() != "authorization"
                },
                "body": json.loads(body) if body else None,
            }
        )
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token != self.token:
            doc = "https://docs.github.com/rest"
            return web.json_response(
                {"message": "Bad credentials", "documentation_url": doc}, status=401
            )
        host = request.host.split(":")[0]
        if host == "api.github.com" and request.path == "/copilot_internal/user":
            return web.json_response(user_answer(self.login))
        if host == API_HOST and request.method == "GET" and request.path == "/models":
            return web.json_response({"object": "list", "data": self.models})
        if host == API_HOST and request.method == "POST" and request.path == "/v1/messages":
            return await self._messages(request)
        return web.json_response({"message": "Not Found"}, status=404)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """An Anthropic Messages stream (what copilot sends claude models to)."""
        model = (self.requests[-1]["body"] or {}).get("model", "")
        events: list[dict[str, Any]] = [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 0},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": self.answer},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 7},
            },
            {"type": "message_stop"},
        ]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in events:
            await resp.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await resp.write_eof()
        return resp
