#!/usr/bin/env python3
"""Warm-start bench with the REAL CLIs against a fake model API on loopback that answers at once.

1. Time to first content: calls one at a time, with a pause that lets a spare start, from
   request to the first content byte through the gateway (openai SDK, streaming), interleaved
   with a direct cold start of the same CLI (same launch spec: argv, env, containment, stdin)
   from spawn to its first content line.
2. Burst: 6 concurrent calls (more than the pool holds) with the pool on and off.
3. Idle cost: RSS and CPU of the ready spares over 5 s.

A duplex CLI (codex app-server) is driven cold by its own parser, as a call drives it: the
handshake, then the thread and turn its parser sends, until its first text delta.

Usage: ``python bench/warm.py [--rounds 8] [--backends claude,gemini,codex,copilot]
[--out bench/warm-results.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from aiohttp import web  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from bench.cache import cli_dir, point_clis_at  # noqa: E402
from cli_proxy.config import Settings  # noqa: E402
from cli_proxy.gateway import Gateway, live_backends  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from cli_proxy.read.events import CliText  # noqa: E402
from cli_proxy.run.containment import spawn  # noqa: E402
from cli_proxy.run.process import kill_tree  # noqa: E402
from cli_proxy.server.app import create_app  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

MODELS = {
    "claude": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
    "codex": "gpt-5.5",
    "copilot": "copilot/claude-sonnet-4.6",  # BYOK to the fake (bench/cache.py)
}
# lets a spare start between calls (copilot's session opens 4-10 s after spawn)
PAUSE = {"claude": 2.0, "gemini": 4.0, "codex": 3.0, "copilot": 10.0}
TARGET = {"claude": 0.25, "gemini": 0.1, "codex": 0.25, "copilot": 0.5}


async def gateway_ttfb(client: AsyncOpenAI, model: str, text: str) -> float:
    t0 = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], stream=True
    )
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - t0
    assert first is not None
    return first


async def direct_ttfb(gw: Gateway, model: str, text: str) -> float:
    """Spawn the same launch spec cold, write the same stdin, time to its first content.

    The backend's own parser reads the output and writes its replies (gemini's ACP: the
    prompt goes in once the session is open), as in a call."""
    req = ChatCompletionRequest.model_validate(
        {"model": model, "messages": [{"role": "user", "content": text}]}
    )
    plan = gw.plan(req)
    parser = plan.call.parser()
    t0 = time.perf_counter()
    proc, prepared = await spawn(plan.launch, gw.launcher, gw.supervisor.limits.line_limit)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(plan.call.stdin)
        await proc.stdin.drain()
        if not plan.launch.duplex:
            proc.stdin.close()
        while line := await proc.stdout.readline():
            events = parser.feed(line)
            if any(isinstance(ev, CliText) for ev in events):
                return time.perf_counter() - t0
            if reply := parser.replies():
                proc.stdin.write(reply)
                await proc.stdin.drain()
        raise RuntimeError("no content from the direct run")
    finally:
        await kill_tree(proc, 1.0)
        prepared.cleanup()


def spare_cost(gw: Gateway) -> dict[str, Any]:
    assert gw.pool is not None
    procs = []
    for group in gw.pool._spares.values():
        for spare in group:
            root = psutil.Process(spare.proc.pid)
            procs += [root, *root.children(recursive=True)]
    rss = sum(p.memory_info().rss for p in procs)
    cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
    time.sleep(5)
    cpu1 = sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running())
    return {
        "spares": sum(map(len, gw.pool._spares.values())),
        "processes": len(procs),
        "rss_mib": round(rss / 2**20, 1),
        "cpu_share_of_one_core": round((cpu1 - cpu0) / 5, 4),
    }


async def serve(settings: Settings) -> tuple[Gateway, web.AppRunner, AsyncOpenAI]:
    gw = Gateway(settings, live_backends(settings))
    runner = web.AppRunner(create_app(gw), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    return gw, runner, client


async def burst(settings: Settings, backend: str, model: str, n: int) -> dict[str, float]:
    _gw, runner, client = await serve(settings)
    try:
        await gateway_ttfb(client, model, "prime @@fake {}")  # a spare may follow
        await asyncio.sleep(PAUSE[backend])
        t0 = time.perf_counter()
        ttfb = await asyncio.gather(*(gateway_ttfb(client, model, f"burst {i}") for i in range(n)))
        return {
            "wall_s": round(time.perf_counter() - t0, 3),
            "median_ttfb_s": round(statistics.median(ttfb), 3),
        }
    finally:
        await client.close()
        await runner.cleanup()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "bench" / "warm-results.json"))
    ap.add_argument("--only", choices=sorted(MODELS), help="one backend (default: all)")
    ap.add_argument("--backends", default=",".join(MODELS), help="comma-separated")
    ap.add_argument("--no-burst", action="store_true", help="skip the burst rows")
    args = ap.parse_args()
    models = {b: MODELS[b] for b in ([args.only] if args.only else args.backends.split(","))}
    clis = cli_dir()
    api = await start_fake_model_api()
    point_clis_at(api.url)
    base = {
        "host": "127.0.0.1",
        "port": 0,
        "claude_bin": str(clis / "claude"),
        "gemini_bin": str(clis / "gemini"),
        "codex": {"bin": str(clis / "codex"), "base_url": api.url + "/v1"},
        "copilot": {"bin": str(clis / "copilot")},
        "max_concurrency": 8,
        "timeout_s": 60,
    }
    results: dict[str, Any] = {}
    gw, runner, client = await serve(Settings(**base))
    results["containment"] = gw.launcher.describe()
    try:
        for backend, model in models.items():
            await gateway_ttfb(client, model, "prime")  # the first call starts cold
            warm, cold = [], []
            for i in range(args.rounds):
                await asyncio.sleep(PAUSE[backend])
                warm.append(await gateway_ttfb(client, model, f"round {i}"))
                cold.append(await direct_ttfb(gw, model, f"round {i}"))
            ratio = statistics.median(warm) / statistics.median(cold)
            results[backend] = {
                "gateway_warm_ttfb_s": [round(x, 4) for x in warm],
                "direct_cold_ttfb_s": [round(x, 4) for x in cold],
                "median_warm_s": round(statistics.median(warm), 4),
                "median_cold_s": round(statistics.median(cold), 4),
                "ratio_warm_to_cold": round(ratio, 3),
            }
        await asyncio.sleep(max(PAUSE[b] for b in models))
        results["idle_spares"] = await asyncio.to_thread(spare_cost, gw)
    finally:
        await client.close()
        await runner.cleanup()
    for backend, model in {} if args.no_burst else models.items():
        on = await burst(Settings(**base), backend, model, 6)
        off = await burst(Settings(**base, warm_pool=False), backend, model, 6)
        results[f"{backend}_burst6"] = {
            "pool_on": on,
            "pool_off": off,
            "wall_ratio_on_to_off": round(on["wall_s"] / off["wall_s"], 3),
        }
    await api.close()
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"containment: {results['containment']}")
    for backend in models:
        r = results[backend]
        target = TARGET[backend]
        warm_ms, cold_ms = r["median_warm_s"] * 1000, r["median_cold_s"] * 1000
        print(
            f"{backend}: first content through the gateway (warm) {warm_ms:.0f} ms"
            f" vs direct cold {cold_ms:.0f} ms: ratio {r['ratio_warm_to_cold']:.3f} (<= {target})"
        )
        if args.no_burst:
            continue
        b = results[f"{backend}_burst6"]
        print(
            f"{backend} burst of 6: wall {b['pool_on']['wall_s']} s with the pool,"
            f" {b['pool_off']['wall_s']} s without: ratio {b['wall_ratio_on_to_off']} (<= 1.10)"
        )
    idle = results["idle_spares"]
    print(
        f"idle spares: {idle['spares']} ({idle['processes']} processes), {idle['rss_mib']} MiB,"
        f" {idle['cpu_share_of_one_core']:.2%} of one core (< 1%)"
    )
    print(f"results: {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
