"""pytest plugin: a cli-proxy gateway replaying recorded fixtures, for your own tests.

Installed with cli-proxy (entry point ``pytest11``), it provides:

- ``cli_proxy_gateway`` (session): a gateway in replay mode on a free loopback port;
  ``.base_url`` is the ``/v1`` URL.
- ``cli_proxy_client``: an ``openai.OpenAI`` client pointed at it.

The fixture directory is the ini option ``cli_proxy_fixtures`` (default ``fixtures``,
relative to the rootdir), or ``--cli-proxy-fixtures DIR``. A request with no recorded
fixture fails with a 404 naming the nearest one, never a silent fallback.
Outside pytest, ``start_gateway()`` is the same thing as a context manager.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from .config import Settings

if TYPE_CHECKING:
    import openai


class RunningGateway:
    """A gateway serving on its own event loop in a background thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cli-proxy-gateway", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/v1"

    def start(self) -> RunningGateway:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        if not self._ready.is_set():
            raise RuntimeError("cli-proxy gateway did not start within 30 s")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to the starting thread
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        from .cli import make_gateway
        from .listener import GatewayRunner
        from .server import create_app

        gateway, _ = make_gateway(self.settings)
        runner = GatewayRunner(
            create_app(gateway),
            header_timeout_s=self.settings.header_timeout_s,
            handler_cancellation=True,
            access_log=None,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port)
        await site.start()
        self.port = runner.addresses[0][1]
        self._stop = asyncio.Event()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def client(self, **kwargs: Any) -> openai.OpenAI:
        import openai

        kwargs.setdefault("api_key", "cli-proxy-test")
        kwargs.setdefault("max_retries", 0)
        return openai.OpenAI(base_url=self.base_url, **kwargs)


@contextmanager
def start_gateway(fixtures: str | Path, **settings: Any) -> Iterator[RunningGateway]:
    """Replay ``fixtures`` on a free port until the block ends."""
    values: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "replay_dir": Path(fixtures)}
    values.update(settings)
    gw = RunningGateway(Settings(**values)).start()
    try:
        yield gw
    finally:
        gw.stop()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("cli_proxy_fixtures", "directory of cli-proxy fixtures", default="fixtures")
    parser.addoption(
        "--cli-proxy-fixtures", default=None, help="directory of cli-proxy fixtures to replay"
    )


@pytest.fixture(scope="session")
def cli_proxy_gateway(pytestconfig: pytest.Config) -> Iterator[RunningGateway]:
    option = pytestconfig.getoption("--cli-proxy-fixtures")
    directory = Path(option or pytestconfig.getini("cli_proxy_fixtures"))
    if not directory.is_absolute():
        directory = pytestconfig.rootpath / directory
    with start_gateway(directory) as gw:
        yield gw


@pytest.fixture
def cli_proxy_client(cli_proxy_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    client = cli_proxy_gateway.client()
    try:
        yield client
    finally:
        client.close()
