"""Serving a fake's aiohttp app on a free loopback port: the one start every fake shares."""

from __future__ import annotations

from aiohttp import web


async def serve_app(
    app: web.Application, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Start ``app`` on ``host:port`` (0: any free port); the runner (to clean up) and the URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    real_port = runner.addresses[0][1]
    return runner, f"http://{host}:{real_port}"
