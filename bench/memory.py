#!/usr/bin/env python3
"""Memory bench: the gateway's RSS while it serves four large answers at once.

``cli-proxy serve`` runs as its own process with the fake claude CLI (tests/fakes/fake_cli.py,
which prints each answer three times over: as deltas, as the assistant message and as the
result, like the real CLI). Four concurrent non-streaming calls ask for answers of SIZE
bytes; psutil samples the gateway's RSS every 10 ms. Reported: RSS when idle, the peak, and
RSS 2 s after the calls ended, for an answer under the default ``max_answer_bytes`` (8 MiB)
and for 50 MB answers (refused by that limit).

Usage: ``python bench/memory.py [--out bench/memory-results.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from openai import APIStatusError, AsyncOpenAI

ROOT = Path(__file__).resolve().parent.parent
FAKE_CLI = ROOT / "tests" / "fakes" / "fake_cli.py"
MIB = 1024 * 1024


_DRAINS: set[asyncio.Future[bytes]] = set()


async def start_gateway() -> tuple[asyncio.subprocess.Process, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLI_PROXY_")}
    env["CLI_PROXY_WARM_POOL"] = "false"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli_proxy", "serve", "--port", "0", "--backends", "claude",
        "--claude-bin", f"{sys.executable} {FAKE_CLI} claude", "--log-json",
        "--max-concurrency", "4",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    while True:
        line = await proc.stderr.readline()
        if not line:
            raise RuntimeError("the gateway exited before listening")
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if ev.get("event") == "listening":
                _DRAINS.add(asyncio.ensure_future(proc.stderr.read()))  # keep its log drained
                return proc, str(ev["url"])


async def one(client: AsyncOpenAI, size: int) -> str:
    spec = {"answer": "x" * 1000, "repeat": size // 1000, "chunks": 3}
    try:
        r = await client.chat.completions.create(
            model="claude-sonnet-4-6",
            messages=[{"role": "user", "content": "@@fake " + json.dumps(spec)}],
        )
    except APIStatusError as exc:
        return f"{exc.status_code} {getattr(exc, 'code', None) or ''}".strip()
    return f"200 ({len(r.choices[0].message.content or '')} chars)"


async def measure(size: int) -> dict[str, Any]:
    proc, url = await start_gateway()
    ps = psutil.Process(proc.pid)
    client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=120)
    try:
        await one(client, 1000)  # imports and first-call allocations out of the way
        await asyncio.sleep(1.0)
        idle = ps.memory_info().rss
        peak = idle
        done = False

        async def sample() -> None:
            nonlocal peak
            while not done:
                peak = max(peak, ps.memory_info().rss)
                await asyncio.sleep(0.01)

        sampler = asyncio.ensure_future(sample())
        t0 = time.perf_counter()
        outcomes = await asyncio.gather(*(one(client, size) for _ in range(4)))
        took = time.perf_counter() - t0
        await asyncio.sleep(2.0)
        done = True
        await sampler
        after = ps.memory_info().rss
    finally:
        await client.close()
        proc.terminate()
        await proc.wait()
    return {
        "answer_bytes": size,
        "concurrent": 4,
        "outcomes": outcomes,
        "seconds": round(took, 2),
        "idle_rss_mib": round(idle / MIB, 1),
        "peak_rss_mib": round(peak / MIB, 1),
        "peak_above_idle_mib": round((peak - idle) / MIB, 1),
        "after_2s_above_idle_mib": round((after - idle) / MIB, 1),
        "total_answers_mib": round(4 * size / MIB, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench" / "memory-results.json"))
    args = parser.parse_args()
    rows = [await measure(size) for size in (7_500_000, 50_000_000)]
    for row in rows:
        print(json.dumps(row))
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
