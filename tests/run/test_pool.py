"""Warm starts: spares serve exactly one call each, bad spares never fail a call, and the
pool keeps its limits (cli_proxy/run/pool.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import psutil
import pytest

from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.plan.spec import Plan
from cli_proxy.run import supervisor as supervisor_module
from cli_proxy.run.call import Call, LineSink
from tests.conftest import Served, ServeFactory, fake, fake_settings
from tests.run.test_reliability import wait_gone, wait_until
from tests.run.test_sealed_processes import LAUNCHERS, gateway

CLAUDE, GEMINI = "claude-sonnet-4-6", "gemini-2.5-flash"


class Runs(LineSink):
    """Collects (pid, warm) of every finished call."""

    seen: list[tuple[int | None, bool]]

    def __init__(self, seen: list[tuple[int | None, bool]]) -> None:
        self.seen = seen

    def done(self, call: Call) -> None:
        stats = call.stats
        assert stats is not None
        self.seen.append((stats.pid, stats.warm))


async def pooled(serve: ServeFactory, **overrides: Any) -> tuple[Served, list[Any]]:
    settings = fake_settings(warm_pool=True, **overrides)
    seen: list[tuple[int | None, bool]] = []
    gw = Gateway(settings, live_backends(settings))

    def sink_for(plan: Plan) -> LineSink:
        return Runs(seen)

    gw.sink_for = sink_for
    return await serve(gw), seen


def ready(served: Served, backend: str = "claude") -> int:
    assert served.gateway.pool is not None
    counts: Any = served.gateway.pool.status()["ready"]
    return int(counts.get(backend, 0))


async def ask(served: Served, model: str = CLAUDE, stream: bool = False, **spec: Any) -> str:
    content = fake(answer=spec.pop("answer", "ok"), **spec)
    if stream:
        chunks = await served.client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": content}], stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    r = await served.client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}]
    )
    return r.choices[0].message.content or ""


def open_pipes(proc: asyncio.subprocess.Process) -> list[int]:
    """The fds (0, 1, 2) whose pipe transport the gateway still holds open."""
    transport: Any = getattr(proc, "_transport", None)
    if transport is None:
        return []
    return [
        fd
        for fd in (0, 1, 2)
        if (pipe := transport.get_pipe_transport(fd)) is not None and not pipe.is_closing()
    ]


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
async def test_each_call_gets_a_process_that_served_no_other(
    serve: ServeFactory, model: str
) -> None:
    served, seen = await pooled(serve)
    backend = model.split("-")[0]
    assert await ask(served, model) == "ok"  # cold: nothing was used before
    for i in range(4):
        await wait_until(lambda: ready(served, backend) == 1, 10, "a spare")
        # the same spare serves streaming and non-streaming calls alike
        assert await ask(served, model, stream=bool(i % 2), answer=f"warm {i}") == f"warm {i}"
    # the handler of a stream may still be closing its process when the client has [DONE]
    await wait_until(lambda: len(seen) == 5, 5, "every call to finish")
    assert [warm for _, warm in seen] == [False, True, True, True, True]
    pids = [pid for pid, _ in seen]
    assert len(set(pids)) == len(pids)  # a fresh process every time


async def test_concurrent_calls_never_share_a_process(serve: ServeFactory) -> None:
    served, seen = await pooled(serve, warm_max_per_key=2, warm_max_total=2)
    await ask(served)
    await wait_until(lambda: ready(served) == 2, 10, "two spares")
    answers = await asyncio.gather(*(ask(served, answer=f"n{i}") for i in range(6)))
    assert answers == [f"n{i}" for i in range(6)]
    pids = [pid for pid, _ in seen]
    assert len(set(pids)) == len(pids) == 7
    assert sum(warm for _, warm in seen) >= 2


async def test_a_dead_spare_is_replaced_and_the_call_still_answers(serve: ServeFactory) -> None:
    served, seen = await pooled(serve)
    await ask(served)
    await wait_until(lambda: ready(served) == 1, 10, "a spare")
    assert served.gateway.pool is not None
    spare = served.gateway.pool._spares[next(iter(served.gateway.pool._spares))][0]
    for p in [*psutil.Process(spare.proc.pid).children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # a child may end between the two
            p.kill()
    with contextlib.suppress(ProcessLookupError):  # it may end with its child, and be reaped
        os.kill(spare.proc.pid, signal.SIGKILL)
    await wait_until(lambda: spare.proc.returncode is not None, 5, "the spare to die")
    assert await ask(served, answer="still fine") == "still fine"
    assert seen[-1][1] is False  # served cold
    assert served.gateway.pool.status()["discarded"] == 1
    await wait_until(lambda: ready(served) == 1, 10, "a new spare")
    # the discarded spare's pipes are closed on our side once it is reaped: left open, the
    # garbage collector closed them later, on a loop that may be gone ("Exception ignored
    # in BaseSubprocessTransport.__del__", seen once in a clean-clone run)
    await wait_until(lambda: not served.gateway.pool._dying, 10, "the spare to be reaped")
    assert open_pipes(spare.proc) == []


async def test_a_spare_taken_while_still_starting_is_served_warming(
    serve: ServeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that takes a spare still in its start (its start window not over: on a real CLI
    its CPU still busy) waits for the rest of it: counted ``warming``, not ``warm``, by the
    pool, the calls log (the status page) and the metrics; a call that takes a spare whose
    start is over (no start slot held) is ``warm``. The test ends the start windows itself
    (a CPU-idle sample depends on the machine's load)."""
    over = asyncio.Event()

    async def start_over(pid: int, output_seen: Any, window_s: float) -> None:
        await over.wait()

    monkeypatch.setattr(supervisor_module, "start_over", start_over)
    served, seen = await pooled(serve)
    gw = served.gateway
    pool = gw.pool
    assert pool is not None
    await ask(served, answer="cold")  # its spare starts meanwhile
    await wait_until(lambda: ready(served) == 1, 20, "a spare")
    assert pool._spares[next(iter(pool._spares))][0].starting()
    assert await ask(served, answer="warming") == "warming"
    over.set()
    await wait_until(lambda: ready(served) == 1 and not gw.supervisor.starting, 30, "a spare")
    assert await ask(served, answer="warm") == "warm"
    assert [warm for _, warm in seen] == [False, True, True]
    status = pool.status()
    assert [status[k] for k in ("served_cold", "served_warming", "served_warm")] == [1, 1, 1]
    assert served.metrics.calls.served == {"cold": 1, "warming": 1, "warm": 1}
    scrape = served.metrics.scrape().decode()
    for start in ("cold", "warming", "warm"):
        line = f'cli_proxy_calls_served_total{{backend="claude",start="{start}"}} 1.0'
        assert line in scrape, scrape


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
async def test_a_killed_spare_leaves_no_pipe_open(serve: ServeFactory, model: str) -> None:
    """When the pool's kill of a spare is over (here at shutdown), our ends of its pipes are
    closed: nothing is left for the garbage collector to close on a loop that may be gone
    (CPython 3.11.7: "Exception ignored in BaseSubprocessTransport.__del__ ... Event loop is
    closed", seen once in a clean-clone run)."""
    served, _ = await pooled(serve)
    await ask(served, model)
    backend = model.split("-")[0]
    await wait_until(lambda: ready(served, backend) == 1, 10, "a spare")
    pool = served.gateway.pool
    assert pool is not None
    spare = next(s for group in pool._spares.values() for s in group)
    assert open_pipes(spare.proc) != []
    await pool.close()
    assert spare.proc.returncode is not None
    assert open_pipes(spare.proc) == []  # at once, not on a later turn of the loop


async def test_spares_older_than_the_maximum_age_are_replaced(serve: ServeFactory) -> None:
    served, _ = await pooled(serve, warm_max_age_s=1.0)
    await ask(served)
    await wait_until(lambda: ready(served) == 1, 10, "a spare")
    pool = served.gateway.pool
    assert pool is not None
    first = next(iter(pool._spares.values()))[0].proc.pid

    def replaced() -> bool:
        spares = [s for group in pool._spares.values() for s in group]
        return bool(spares) and spares[0].proc.pid != first

    await wait_until(replaced, 8, "the spare to be recycled")
    assert pool.status()["discarded"] >= 1


async def test_pool_limits(serve: ServeFactory) -> None:
    served, _ = await pooled(serve, warm_max_total=2)
    for model in (CLAUDE, "claude-opus-4-6", GEMINI):
        await ask(served, model)
    pool = served.gateway.pool
    assert pool is not None
    await wait_until(lambda: pool._count() == 2, 10, "two spares")
    await asyncio.sleep(0.5)
    assert pool._count() == 2  # never more than the total
    assert all(len(group) <= 1 for group in pool._spares.values())  # one per spec


async def test_no_spare_starts_while_every_slot_is_busy(serve: ServeFactory) -> None:
    served, _ = await pooled(serve, max_concurrency=1)
    pool = served.gateway.pool
    assert pool is not None
    hanging = asyncio.create_task(ask(served, hang=1.5))
    await wait_until(lambda: served.gateway.supervisor.running == 1, 5, "the call to run")
    await asyncio.sleep(0.5)
    assert pool._count() == 0  # the one slot is busy: no spare
    assert await hanging == "ok"
    await ask(served)  # the slot is free now: a spare follows this call
    await wait_until(lambda: ready(served) == 1, 10, "a spare")


async def test_health_says_what_is_warm_and_pool_can_be_off(serve: ServeFactory) -> None:
    served, _ = await pooled(serve)
    await ask(served)
    await wait_until(lambda: ready(served) == 1, 10, "a spare")
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(served.server.make_url("/health")) as r:
        health = await r.json()
    assert health["warm"]["enabled"] is True and health["warm"]["ready"] == {"claude": 1}
    assert health["running"] == 0  # spares are not running calls
    off = await serve(warm_pool=False)
    assert off.gateway.pool is None
    await ask(off)


async def test_configured_models_are_warm_at_start(serve: ServeFactory) -> None:
    served, seen = await pooled(serve, warm_models=[CLAUDE])
    await wait_until(lambda: ready(served) == 1, 10, "a spare at start-up")
    assert await ask(served) == "ok"
    assert seen == [(seen[0][0], True)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_spares_die_with_the_gateway_even_by_kill9(launcher: str) -> None:
    import shutil
    import tempfile
    from pathlib import Path

    import aiohttp
    from openai import AsyncOpenAI

    scratch = Path(tempfile.mkdtemp(prefix="cli-proxy-pool-"))
    try:
        async with gateway(launcher, scratch) as (proc, url):
            async with AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
                r = await client.chat.completions.create(
                    model=CLAUDE, messages=[{"role": "user", "content": fake(answer="ok")}]
                )
                assert r.choices[0].message.content == "ok"
            health = url.removesuffix("/v1") + "/health"

            async def warm() -> int:
                async with aiohttp.ClientSession() as s, s.get(health) as resp:
                    return int((await resp.json())["warm"]["ready"].get("claude", 0))

            deadline = asyncio.get_running_loop().time() + 10
            while await warm() != 1:
                assert asyncio.get_running_loop().time() < deadline, "no spare"
                await asyncio.sleep(0.05)
            spares = psutil.Process(proc.pid).children(recursive=True)
            assert spares
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
            await wait_gone(spares, 5, "the spares of a killed gateway")
        if launcher == "pdeathsig":
            async with gateway(launcher, scratch):  # sweeps the dead gateway's work dirs
                pass
        assert not (scratch / "work").exists() or not any((scratch / "work").rglob("call-*"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
