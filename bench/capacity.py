#!/usr/bin/env python3
"""Capacity with a slow model (issue 29) and the resident size of each real CLI.

1. ``sizes``: each real CLI (claude, gemini, codex) through the gateway with its default
   containment: the tree of a spare at rest (waiting for its prompt) and of a call mid-way
   (its model API holds the answer), RSS and PSS summed over the tree. These figures are
   ``Backend.resident_mib`` (read through ``backends/registry.py``), from which the default
   process bound is derived.
2. ``slow``: the gateway with DEFAULT bounds, in front of the real claude CLI and of
   bench/fake_slow_cli.py (a Python stand-in that asks the same model API), against a fake
   model API that answers every request ``--delay`` seconds late (default 3). At concurrency
   1, 4, 8, 16: calls/s and p95 latency through the gateway and for direct spawns of the same
   launch spec (same argv, env, containment, stdin; no bound), interleaved per level; the
   gateway's queue wait, peak CLI processes and peak tree memory (RSS sum). A streamed row
   (the model streams 20 deltas after the delay) at concurrency 8. Targets at concurrency 8:
   >= 0.9x the direct calls/s and p95 <= 1.25x the direct p95.
3. ``small``: the same gateway as on a small VM (``cli_memory_budget_mib`` 2000: a bound of 8
   claude processes, calls and spares together) at concurrency 16: the bound holds, the
   excess waits in the queue, no call fails.

Usage: ``python bench/capacity.py [--delay 3] [--levels 1,4,8,16] [--only sizes|slow]``;
writes bench/capacity-results.json. Needs the real CLIs (``make real-clis``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import structlog  # noqa: E402
from aiohttp import web  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from bench.cache import cli_dir, point_clis_at  # noqa: E402
from bench.contained import contained_run  # noqa: E402
from cli_proxy.config import Settings  # noqa: E402
from cli_proxy.gateway import Gateway, live_backends  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from cli_proxy.server.app import create_app  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

FAKE_SLOW = f"{sys.executable} -I -S {ROOT / 'bench' / 'fake_slow_cli.py'}"
MODELS = {
    "claude": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
    "codex": "gpt-5.5",
    "copilot": "copilot/claude-sonnet-4.6",  # BYOK to the fake (bench/cache.py)
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def serve(settings: Settings) -> tuple[Gateway, web.AppRunner, AsyncOpenAI]:
    gw = Gateway(settings, live_backends(settings))
    runner = web.AppRunner(create_app(gw), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=600
    )
    return gw, runner, client


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_memory(procs: list[psutil.Process]) -> dict[str, float]:
    rss = pss = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return {
        "processes": len(procs),
        "rss_mib": round(rss / 2**20, 1),
        "pss_mib": round(pss / 2**20, 1),
    }


# ------------------------------------------------------------------ 1. sizes


MODEL_PATH = {
    "claude": "/v1/messages",
    "gemini": "GenerateContent",
    "codex": "/v1/responses",
    "copilot": "/v1/messages",
}


async def settled_spares(pool: Any) -> list[Any]:
    """The pool's spares once started and quiet: no CPU used over a whole second."""
    for _ in range(120):
        spares = [s for group in pool._spares.values() for s in group]
        if spares:
            procs = tree(spares[0].proc.pid)
            before = sum(sum(p.cpu_times()[:2]) for p in procs)
            await asyncio.sleep(1)
            after = sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running())
            if after - before < 0.02:
                return spares
        else:
            await asyncio.sleep(0.5)
    return [s for group in pool._spares.values() for s in group]


async def sizes(api: Any, clis: Path, backends: list[str]) -> dict[str, Any]:
    """A spare at rest and a call mid-way, per real CLI, through the gateway."""
    out: dict[str, Any] = {}
    for backend in backends:
        model = MODELS[backend]
        options: dict[str, Any] = {"bin": str(clis / backend)}
        if backend == "codex":
            options["base_url"] = api.url + "/v1"
        settings = Settings(
            backends=[backend], warm_models=[model], warm_max_total=1, **{backend: options}
        )
        gw, runner, client = await serve(settings)
        try:
            pool = gw.pool
            assert pool is not None
            spares = await settled_spares(pool)
            rest = tree_memory(tree(spares[0].proc.pid)) if spares else None
            pool.settings = type(pool.settings)(enabled=False)  # the call runs cold, alone
            for spare in spares:
                pool._discard(spare, "measured")
            pool._spares.clear()
            await asyncio.sleep(1)
            seen = len(api.requests)
            text = 'size @@fake {"initial_delay": 15, "answer": "measured"}'
            call = asyncio.create_task(
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": text}]
                )
            )
            for _ in range(600):  # until its model request has arrived: it waits now
                if any(MODEL_PATH[backend] in r["path"] for r in api.requests[seen:]):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)
            runs = list(gw.supervisor._running)
            mid = tree_memory(tree(runs[0].proc.pid)) if runs else None
            await call
            out[backend] = {"spare_at_rest": rest, "mid_call": mid}
            print(f"  {backend:<7} spare at rest {rest}  mid-call {mid}", flush=True)
        finally:
            await client.close()
            await runner.cleanup()
    return out


# ------------------------------------------------------------------ 2. slow model


@contextlib.asynccontextmanager
async def sampler() -> AsyncIterator[dict[str, float]]:
    """Peak CLI processes (this process's children: each a CLI tree) and peak tree RSS."""
    me = psutil.Process()
    peak = {"cli_processes": 0.0, "tree_rss_mib": 0.0}

    async def run() -> None:
        while True:
            kids = me.children()
            peak["cli_processes"] = max(peak["cli_processes"], len(kids))
            rss = 0
            for k in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    rss += k.memory_info().rss
            peak["tree_rss_mib"] = max(peak["tree_rss_mib"], rss / 2**20)
            await asyncio.sleep(0.2)

    task = asyncio.create_task(run())
    try:
        yield peak
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def level(fn: Callable[[int], Awaitable[None]], c: int, total: int) -> dict[str, Any]:
    """``total`` calls, ``c`` at a time: calls/s, latencies, peaks."""
    lat: list[float] = []
    todo = iter(range(total))

    async def worker() -> None:
        for i in todo:
            t = time.perf_counter()
            await fn(i)
            lat.append(time.perf_counter() - t)

    async with sampler() as peak:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        wall = time.perf_counter() - t0
    return {
        "calls_per_s": round(total / wall, 3),
        "p95_s": round(pct(lat, 95), 3),
        "median_s": round(statistics.median(lat), 3),
        "peak_cli_processes": int(peak["cli_processes"]),
        "peak_tree_rss_mib": round(peak["tree_rss_mib"], 1),
    }


def directive(i: int, delay: float, streamed: bool) -> str:
    spec: dict[str, Any] = {"initial_delay": delay, "answer": f"answer number {i} " * 5}
    if streamed:
        spec.update(chunks=20, delay=0.05)
    return f"call {i} @@fake " + json.dumps(spec)


async def direct(gw: Gateway, text: str) -> None:
    """The same launch spec spawned directly, no bound: write stdin, read to the end."""
    req = ChatCompletionRequest.model_validate(
        {"model": MODELS["claude"], "messages": [{"role": "user", "content": text}]}
    )
    out = await contained_run(gw, gw.plan(req))
    assert b'"result"' in out, out[-500:]


async def small(name: str, binary: str, delay: float, c: int = 16) -> dict[str, Any]:
    """Concurrency ``c`` against a bound of 8 (a 4 GiB machine's share for claude)."""
    settings = Settings(backends=["claude"], claude_bin=binary, cli_memory_budget_mib=2000)
    gw, runner, client = await serve(settings)
    sup = gw.supervisor
    bound = sup.bounds.max_processes
    most = 0

    async def through(i: int) -> None:
        messages = [{"role": "user", "content": directive(i, delay, False)}]
        r = await client.chat.completions.create(model=MODELS["claude"], messages=messages)  # type: ignore[arg-type]
        assert (r.choices[0].message.content or "").startswith("answer number")

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, sup.processes())
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        await through(-1)
        sup.peak_processes = 0
        with structlog.testing.capture_logs() as logs:
            g = await level(through, c, 2 * c)
        waits = [e["queue_wait_ms"] / 1000 for e in logs if e.get("queue_wait_ms") is not None]
        g.update(
            bound=bound,
            peak_processes_counted=sup.peak_processes,
            processes_sampled_max=most,
            queued_calls=sum(1 for w in waits if w > 0.05),
            queue_wait_p95_s=round(pct(waits, 95), 3) if waits else None,
            errors=sum(1 for e in logs if e.get("status", 200) != 200),
        )
    finally:
        watcher.cancel()
        await client.close()
        await runner.cleanup()
    held = g["peak_processes_counted"] <= bound and g["peak_cli_processes"] <= bound
    print(
        f"  {name} c{c}, bound {bound}: {g['calls_per_s']:.2f}/s p95 {g['p95_s']:.2f} s, "
        f"CLI procs peak {g['peak_cli_processes']} (counted {g['peak_processes_counted']}), "
        f"{g['queued_calls']} of {2 * c} calls queued (p95 {g['queue_wait_p95_s']} s), "
        f"{g['errors']} errors: bound {'held' if held else 'EXCEEDED'}",
        flush=True,
    )
    return g


async def slow(name: str, binary: str, delay: float, levels: list[int]) -> dict[str, Any]:
    settings = Settings(backends=["claude"], claude_bin=binary)  # default bounds and limits
    gw, runner, client = await serve(settings)
    sup = gw.supervisor
    rows: dict[str, Any] = {"bounds": sup.bounds.describe()}
    print(f"  {name}: bounds {sup.bounds.describe()}", flush=True)

    async def through(i: int, streamed: bool = False) -> None:
        text = directive(i, delay, streamed)
        messages = [{"role": "user", "content": text}]
        if streamed:
            stream = await client.chat.completions.create(
                model=MODELS["claude"],
                messages=messages,
                stream=True,  # type: ignore[arg-type]
            )
            got = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        else:
            r = await client.chat.completions.create(model=MODELS["claude"], messages=messages)  # type: ignore[arg-type]
            got = r.choices[0].message.content or ""
        assert got.startswith("answer number"), got

    try:
        await through(-1)  # warm-up: page cache, a spare
        for streamed in (False, True):
            for c in [8] if streamed else levels:
                total = max(4, 2 * c)
                sup.peak_processes = 0
                with structlog.testing.capture_logs() as logs:
                    g = await level(lambda i, s=streamed: through(i, s), c, total)  # type: ignore[misc]
                waits = [
                    e["queue_wait_ms"] / 1000 for e in logs if e.get("queue_wait_ms") is not None
                ]
                starts = [e["start_wait_ms"] / 1000 for e in logs if "start_wait_ms" in e]
                g["start_wait_p95_s"] = round(pct(starts, 95), 3) if starts else None
                g["queue_wait_p95_s"] = round(pct(waits, 95), 3) if waits else None
                g["queue_wait_max_s"] = round(max(waits), 3) if waits else None
                g["peak_processes_counted"] = sup.peak_processes
                g["errors"] = sum(1 for e in logs if e.get("status", 200) != 200)
                d = await level(lambda i, s=streamed: direct(gw, directive(i, delay, s)), c, total)
                key = f"c{c}" + ("_streamed" if streamed else "")
                ratio = g["calls_per_s"] / d["calls_per_s"]
                p95 = g["p95_s"] / d["p95_s"]
                rows[key] = {
                    "gateway": g,
                    "direct": d,
                    "throughput_ratio": round(ratio, 3),
                    "p95_ratio": round(p95, 3),
                }
                target = " (target >= 0.9, <= 1.25)" if c == 8 else ""
                print(
                    f"  {name} {key:<12} gateway {g['calls_per_s']:.2f}/s p95 {g['p95_s']:.2f} s"
                    f" | direct {d['calls_per_s']:.2f}/s p95 {d['p95_s']:.2f} s"
                    f" | ratio {ratio:.2f}, p95 x{p95:.2f}{target}"
                    f" | queue p95 {g['queue_wait_p95_s']} s, start wait p95"
                    f" {g['start_wait_p95_s']} s, CLI procs peak"
                    f" {g['peak_cli_processes']} (direct {d['peak_cli_processes']}),"
                    f" tree RSS peak {g['peak_tree_rss_mib']:.0f} MiB",
                    flush=True,
                )
    finally:
        await client.close()
        await runner.cleanup()
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--delay", type=float, default=3.0)
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--only", choices=["sizes", "slow", "small"])
    ap.add_argument("--clis", default="fake,claude", help="slow rows: fake and/or claude")
    ap.add_argument("--sizes", default="claude,gemini,codex", help="backends to measure")
    ap.add_argument("--out", default=str(ROOT / "bench" / "capacity-results.json"))
    args = ap.parse_args()
    clis = cli_dir()
    api = await start_fake_model_api()
    point_clis_at(api.url)
    os.environ["CODEX_API_KEY"] = "bench"
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "loadavg_at_start": os.getloadavg(),
        "delay_s": args.delay,
    }
    print(f"capacity bench: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)
    try:
        if args.only in (None, "sizes"):
            print(
                "1. resident size of each real CLI tree (through the gateway, default containment)"
            )
            results["sizes"] = await sizes(api, clis, args.sizes.split(","))
        if args.only in (None, "slow"):
            print(f"2. slow model ({args.delay:g} s), default bounds, gateway vs direct spawns")
            levels = [int(x) for x in args.levels.split(",")]
            bins = {"fake": FAKE_SLOW, "claude": str(clis / "claude")}
            for name in args.clis.split(","):
                results[f"slow_{name}"] = await slow(name, bins[name], args.delay, levels)
        if args.only in (None, "small"):
            print("3. a small VM's bound (8 processes) at concurrency 16")
            bins = {"fake": FAKE_SLOW, "claude": str(clis / "claude")}
            for name in args.clis.split(","):
                results[f"small_{name}"] = await small(name, bins[name], args.delay)
    finally:
        await api.close()
    results["loadavg_at_end"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"results: {args.out}; load at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
