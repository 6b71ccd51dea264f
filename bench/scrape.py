"""The cost of one ``GET /metrics`` body: observe N calls over M models and 3 backends, then
time 50 scrapes (``python bench/scrape.py [calls] [models]``; docs/metrics.md)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.protocol import Usage
from cli_proxy.server.calls_log import CallRecord
from cli_proxy.server.metrics import for_gateway

BACKENDS = ("claude", "gemini", "codex")


async def main(calls: int, models: int) -> None:
    settings = Settings(warm_pool=False)
    gw = Gateway(settings, live_backends(settings))
    metrics = for_gateway(gw)
    for i in range(calls):
        ok = i % 7 != 0
        metrics.observe(
            CallRecord(
                "chat",
                BACKENDS[i % 3],
                f"model-{i % models}",
                200 if ok else 429,
                "" if ok else "rate_limit_exceeded",
                1.5,
                0.01,
                0.02,
                0.5,
                bool(i % 2),
                "ok" if ok else "error",
                Usage(prompt_tokens=100, completion_tokens=10),
            )
        )
    n = 50
    started = time.perf_counter()
    for _ in range(n):
        body = metrics.scrape()
    took = (time.perf_counter() - started) / n
    print(f"scrape: {took * 1000:.1f} ms, {len(body)} bytes ({calls} calls, {models} models)")
    await gw.close()


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    asyncio.run(main(*(args + [2000, 5][len(args) :])))
