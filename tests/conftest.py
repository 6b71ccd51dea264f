"""Shared test harness: a real gateway on a loopback port, fake CLIs as real child processes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from openai import AsyncOpenAI

from cli_proxy.backends.base import StreamParser
from cli_proxy.backends.registry import backend_class
from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.plan.prompt import render
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.server.app import create_app
from cli_proxy.server.listener import GatewayRunner
from cli_proxy.server.metrics import METRICS, Metrics

pytest_plugins = ["pytester"]

# LiteLLM fetches its model price list from GitHub on first import (three tries, ~8 s, when the
# network is down); the suite's traffic stays on loopback, so it reads its bundled copy. Here,
# not in one test module, so that any subset of the suite gets it (test_reasoning_output.py,
# test_messages_wire.py and test_adk_agent.py import LiteLLM).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HERE = Path(__file__).resolve().parent
FAKE_CLI = HERE / "fakes" / "fake_cli.py"
CODEX_FAKE_CLI = HERE / "data" / "real-cli" / "codex-fake-cli.py"  # codex's real --json format
# How the fake CLIs run: they need only the standard library, so -S skips the site module (the
# venv's .pth files, setuptools' editable-install finder among them): 13 of a fake call's ~85 ms
# of CPU, and the suite starts ~1,900 fake calls (docs/performance.md, the test suite's time).
FAKE_PY = f"{sys.executable} -S"


def fake(**spec: Any) -> str:
    """A user message that scripts the fake CLI (see tests/fakes/fake_cli.py)."""
    return "@@fake " + json.dumps(spec)


def fake_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "claude_bin": f"{FAKE_PY} {FAKE_CLI} claude",
        "gemini_bin": f"{FAKE_PY} {FAKE_CLI} gemini",
        "copilot_bin": f"{FAKE_PY} {FAKE_CLI} copilot",
        "codex_bin": f"{FAKE_PY} {CODEX_FAKE_CLI}",
        "timeout_s": 30,
        "idle_timeout_s": 15,
        "kill_grace_s": 1,
        "max_concurrency": 8,
        "max_queue": 32,
        "warm_pool": False,  # tests/run/test_pool.py turns it on; elsewhere pids stay predictable
    }
    values.update(overrides)
    return Settings(**values)


@dataclass
class Served:
    server: TestServer
    gateway: Gateway
    client: AsyncOpenAI

    @property
    def base_url(self) -> str:
        return str(self.server.make_url("/v1"))

    @property
    def metrics(self) -> Metrics:
        """The server's metrics of this gateway (the app owns them)."""
        return self.server.app[METRICS]


ServeFactory = Callable[..., Awaitable[Served]]


async def stalled_stream(
    served: Served, model: str = "claude-sonnet-4-6"
) -> tuple[asyncio.StreamWriter, bytes]:
    """Start a stream of ~30 MB (far more than the socket buffers hold) over a raw socket,
    read its HTTP head, then read no more: a client that stopped reading. Returns the socket
    (close it) and the head."""
    big = "x" * 100_000
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "messages": [{"role": "user", "content": fake(answer=big, repeat=300, chunks=3000)}],
        }
    ).encode()
    url = served.server.make_url("/v1/chat/completions")
    reader, writer = await asyncio.open_connection(url.host, url.port)
    writer.write(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    return writer, await reader.readuntil(b"\r\n\r\n")


class GatewayTestServer(TestServer):
    """A test server with the gateway's own listener (JSON parser errors, header deadline)."""

    def __init__(self, app: web.Application, header_timeout_s: float) -> None:
        super().__init__(app, host="127.0.0.1")
        self.header_timeout_s = header_timeout_s

    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        return GatewayRunner(self.app, header_timeout_s=self.header_timeout_s, **kwargs)


@pytest.fixture
async def serve() -> AsyncIterator[ServeFactory]:
    clients: list[AsyncOpenAI] = []
    servers: list[TestServer] = []

    async def start(gateway: Gateway | None = None, **overrides: Any) -> Served:
        if gateway is None:
            settings = fake_settings(**overrides)
            gateway = Gateway(settings, live_backends(settings))
        server = GatewayTestServer(create_app(gateway), gateway.settings.header_timeout_s)
        await server.start_server()
        servers.append(server)
        client = AsyncOpenAI(
            base_url=str(server.make_url("/v1")), api_key="test", max_retries=0, timeout=60
        )
        clients.append(client)
        return Served(server, gateway, client)

    yield start
    for c in clients:
        await c.close()
    for server in servers:
        await server.close()


@pytest.fixture
async def served(serve: ServeFactory) -> Served:
    return await serve()


@pytest.fixture
async def strict(served: Served) -> AsyncIterator[AsyncOpenAI]:
    """A client that validates every response against the SDK's own models."""
    client = AsyncOpenAI(
        base_url=served.base_url, api_key="x", max_retries=0, _strict_response_validation=True
    )
    yield client
    await client.close()


@pytest.fixture(autouse=True)
def no_leaked_children() -> Any:
    """Every test must end with no CLI process left behind."""
    import time

    import psutil

    yield
    me = psutil.Process()
    deadline = time.monotonic() + 5
    while (kids := me.children(recursive=True)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not kids, f"leaked child processes: {[(k.pid, k.cmdline()) for k in kids]}"


def new_parser(backend: str) -> StreamParser:
    """A parser of ``backend`` (default options) for one trivial call, to replay captures."""
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    return backend_class(backend).with_defaults().new_parser(render(req), req)


# ------------------------------------------------------------------ the suite's order
# The slowest tests first (seconds: a quiet clean-clone `make test`, 2026-11-29), each
# module kept whole so its module-scoped fixtures start once. Order only, never what runs: the
# xdist workers (worksteal) otherwise met a minute-long test near the end, one worker busy
# while the others had nothing left to take (the run's tail). A test not listed keeps
# its place after these, in collection order.
SLOW_FIRST: dict[str, float] = {
    "tests/commands/test_deploy.py::test_rolling_restart_behind_haproxy_loses_no_call": 59,
    "tests/realcli/test_real_cli_sealed.py::test_calls_leave_no_prompt_under_home": 44,
    "tests/commands/test_example_project.py::test_the_recording_workflow_with_the_real_clis": 39,
    "tests/server/test_openapi.py::test_schemathesis_fuzz": 38,
    "tests/commands/test_wheel.py::test_installed_wheel_serves_fixtures_with_no_cli": 34,
    "tests/replay/test_fixture_modes.py::test_record_modes_end_to_end": 29,
    "tests/realcli/test_real_cli_logins.py::test_gemini_expired_login_refreshed_once": 23,
    "tests/run/test_sealed_processes.py::test_kill9_with_three_calls_in_flight_leaves_nothing": 18,
    "tests/backends/test_codex_backend.py::test_pytest_plugin_replays_codex": 17,
    "tests/run/test_reliability.py::test_sigterm_refuses_queued_calls_at_once_while_running_ones_drain": 16,  # noqa: E501
    "tests/realcli/test_real_cli_thinking.py::test_cli_output_while_the_model_thinks": 16,
    "tests/replay/test_fixture_anthropic.py::test_anthropic_client_records_and_replays": 16,
    "tests/server/test_messages_wire.py::test_litellm_anthropic_provider": 15,
    "tests/server/test_grafana_dashboard.py::test_every_panel_query_returns_data": 14,
    "tests/replay/test_fixtures.py::test_pytest_plugin_fixture": 13,
    "tests/realcli/test_real_cli_messages.py::test_claude_code_runs_its_read_tool": 13,
    "tests/realcli/test_real_cli_reasoning.py::test_thoughts_of_gemini_and_codex_reach_the_client": 11,  # noqa: E501
    "tests/commands/test_adk_agent.py::test_adk_agent_with_a_screenshot_callback_finishes_a_tool_task": 11,  # noqa: E501
    "tests/replay/test_fixture_genai.py::test_genai_client_records_and_replays": 11,
    "tests/read/test_parsers_fuzz.py::test_parser_never_raises": 9,
    "tests/read/test_cli_output_fuzz.py::test_any_output_gets_an_openai_answer_or_error": 9,
    "tests/realcli/test_real_cli_genai_latest.py::test_newest_google_genai_on_real_copilot": 9,
    "tests/run/test_soak.py::test_soak": 9,
    "tests/commands/test_keys_reload.py::test_max_concurrent_holds_across_two_gateway_workers": 8,
}


def _slowness(item: pytest.Item) -> float:
    return SLOW_FIRST.get(item.nodeid.split("[")[0], 0.0)


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by fixture scope
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules by their slowest listed test, descending; in a module, its listed tests first
    (slowest first), the others in their order. Stable: every worker gets the same list."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    ordered = sorted(modules.values(), key=lambda its: -max(map(_slowness, its)))
    items[:] = [it for its in ordered for it in sorted(its, key=lambda it: -_slowness(it))]
