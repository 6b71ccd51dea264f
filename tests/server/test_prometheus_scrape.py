"""A real Prometheus server (Debian package ``prometheus``, installed by ``make test`` when it
can) scrapes a running gateway on loopback with the API key as its bearer token, and its
query API then shows the gateway's families. Skipped, with a note, where the binary is not
installed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Served, ServeFactory, fake

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Prometheus not installed (Debian package 'prometheus'; `make test` installs it "
    "when run as root with apt-get)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def query(session: aiohttp.ClientSession, base: str, promql: str) -> list[dict[str, object]]:
    async with session.get(f"{base}/api/v1/query", params={"query": promql}) as r:
        body = await r.json()
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


@contextlib.asynccontextmanager
async def running_prometheus(
    served: Served, key: str, tmp_path: Path, interval: str = "1s"
) -> AsyncIterator[str]:
    """A Prometheus server scraping ``served`` every ``interval`` with ``key`` as its bearer
    token; yields its base URL once it has scraped the gateway (``up`` is 1)."""
    assert PROMETHEUS is not None
    target = served.base_url.removeprefix("http://").removesuffix("/v1")
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": "cli-proxy",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials": key},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        PROMETHEUS,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        up: list[dict[str, object]] = []
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline and not up:
                await asyncio.sleep(1)
                try:
                    up = await query(session, base, 'up{job="cli-proxy"} == 1')
                except aiohttp.ClientError:
                    continue  # not listening yet
        assert up, "Prometheus never scraped the gateway"
        yield base
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_prometheus_scrapes_the_gateway(serve: ServeFactory, tmp_path: Path) -> None:
    served = await serve(api_keys=["scrape-key"])
    client = served.client.with_options(api_key="scrape-key")
    r = await client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": "hi" + fake(answer="scraped")}],
    )
    assert r.choices[0].message.content == "scraped"
    async with running_prometheus(served, "scrape-key", tmp_path) as base:
        deadline = time.monotonic() + 60
        found: list[dict[str, object]] = []
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline and not found:
                found = await query(
                    session, base, 'cli_proxy_requests_total{backend="claude",status="200"}'
                )
                if not found:
                    await asyncio.sleep(1)
            assert found, "Prometheus never saw cli_proxy_requests_total"
            assert found[0]["value"][1] == "1"  # type: ignore[index]
            running = await query(session, base, "cli_proxy_calls_running")
            assert running and running[0]["value"][1] == "0"  # type: ignore[index]
