"""Requests a web page could forge are refused before any CLI runs (docs/security.md)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from cli_proxy.plan.spec import LaunchSpec
from cli_proxy.run.containment import Launcher, Prepared
from tests.conftest import Served, ServeFactory

BODY = json.dumps({"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]})


class CountingLauncher(Launcher):
    """Whatever launcher the gateway uses, counting the processes it prepares."""

    name = "counting"

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self.started = 0

    def prepare(self, spec: LaunchSpec, binary: str) -> Prepared:
        self.started += 1
        return self.inner.prepare(spec, binary)


async def post(
    served: Served, data: str | bytes, headers: dict[str, str], path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(served.server.make_url(path), data=data, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


@pytest.fixture
async def counted(serve: ServeFactory) -> tuple[Served, CountingLauncher]:
    served = await serve(cors_origins="https://app.example")
    launcher = CountingLauncher(served.gateway.launcher)
    served.gateway.launcher = launcher
    return served, launcher


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "multipart/form-data; boundary=x"},
        {},
        {"Content-Type": "application/json", "Host": "evil.example"},
        {"Content-Type": "application/json", "Host": "evil.example:8080"},
        {"Content-Type": "application/json", "Host": "127.0.0.1.evil.example"},
        {"Content-Type": "application/json", "Origin": "https://evil.example"},
        {"Content-Type": "application/json", "Origin": "null"},
    ],
    ids=["text", "form", "multipart", "none", "host", "host-port", "host-suffix", "origin", "null"],
)
async def test_forgeable_requests_are_refused_and_spawn_nothing(
    counted: tuple[Served, CountingLauncher], headers: dict[str, str]
) -> None:
    served, launcher = counted
    status, hdrs, raw = await post(served, BODY, headers)
    assert status in (403, 415), raw
    assert hdrs["Content-Type"].startswith("application/json")
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert "Access-Control-Allow-Origin" not in hdrs
    assert launcher.started == 0


@pytest.mark.parametrize(
    "host", ["localhost", "127.0.0.1", "127.0.0.2:9", "[::1]:8080", "LOCALHOST:1", "a.localhost"]
)
async def test_loopback_hosts_are_served(
    counted: tuple[Served, CountingLauncher], host: str
) -> None:
    served, launcher = counted
    status, _, raw = await post(
        served, BODY, {"Content-Type": "application/json; charset=utf-8", "Host": host}
    )
    assert status == 200, raw
    assert launcher.started == 1


async def test_allowed_origin_gets_cors_and_a_preflight(
    counted: tuple[Served, CountingLauncher],
) -> None:
    served, _ = counted
    origin = "https://app.example"
    async with aiohttp.ClientSession() as session:
        async with session.options(
            served.server.make_url("/v1/chat/completions"),
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        ) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            assert "POST" in resp.headers["Access-Control-Allow-Methods"]
            assert "content-type" in resp.headers["Access-Control-Allow-Headers"]
        async with session.options(
            served.server.make_url("/v1/chat/completions"),
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        ) as resp:
            assert resp.status == 403
            assert "Access-Control-Allow-Origin" not in resp.headers
    body = json.loads(BODY) | {"stream": True}
    status, hdrs, raw = await post(
        served, json.dumps(body), {"Content-Type": "application/json", "Origin": origin}
    )
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n")
    assert hdrs["Access-Control-Allow-Origin"] == origin


async def test_configured_host_is_served(serve: ServeFactory) -> None:
    served = await serve(allowed_hosts="gateway.internal")
    status, _, _ = await post(
        served, BODY, {"Content-Type": "application/json", "Host": "gateway.internal:80"}
    )
    assert status == 200
