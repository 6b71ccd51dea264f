"""The bounds and time limits of ``cli_proxy/run/limits.py`` over real HTTP, with the fake CLI as a
real child process: start bound, process bound with spares standing down, per-backend cap,
the default on a small machine, and the four time limits (queue, idle, write, whole call).

No timing assertions beyond order: limits are short, and what is checked is what happened
(which calls overlapped, what was killed, what the client got)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import psutil
import pytest
import structlog

from cli_proxy.backends.registry import names, resident_mib
from cli_proxy.commands.main import build_parser, settings_from_args
from cli_proxy.config import Settings
from cli_proxy.run import limits
from cli_proxy.run.limits import Bounds
from tests.conftest import FAKE_CLI, Served, ServeFactory, fake, stalled_stream
from tests.run.test_reliability import error_of, fake_clis, wait_until

MODEL = "claude-sonnet-4-6"
OTHER = "claude-opus-4-1"  # another launch spec (argv), so another spare


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def ask(s: Served, text: str, model: str = MODEL) -> tuple[int, Any]:
    try:
        r = await s.client.chat.completions.create(model=model, messages=user(text))  # type: ignore[arg-type]
    except openai.APIStatusError as exc:
        return exc.status_code, exc
    return 200, r


def cli_trees(flavour: str | None = None) -> int:
    """CLI processes this process (the gateway) has started and not reaped: its direct
    children (a bwrap or the fake CLI itself), zombies included (still a process)."""
    n = 0
    for p in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(p.cmdline())
            if str(FAKE_CLI) in cmd and (flavour is None or f"{FAKE_CLI} {flavour}" in cmd):
                n += 1
    return n


@contextlib.asynccontextmanager
async def sampled(*probes: Callable[[], int]) -> AsyncIterator[list[int]]:
    """The peak of each probe, sampled every 10 ms while the block runs."""
    peaks = [0] * len(probes)

    async def sample() -> None:
        while True:
            for i, probe in enumerate(probes):
                peaks[i] = max(peaks[i], probe())
            await asyncio.sleep(0.01)

    task = asyncio.create_task(sample())
    try:
        yield peaks
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for i, probe in enumerate(probes):
            peaks[i] = max(peaks[i], probe())


def most_at_once(windows: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in windows] + [(b, -1) for _, b in windows])
    now = peak = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        peak = max(peak, now)
    return peak


# ------------------------------------------------------------------ process bounds


async def test_start_bound_counted_by_the_cli(serve: ServeFactory, tmp_path: Path) -> None:
    """Six calls at once, two start slots: never more than two CLIs in their start window
    (first statement to first output line, as the CLI itself recorded it)."""
    record = tmp_path / "starts.jsonl"
    # pdeathsig: the CLI writes its record to a host /tmp path (bwrap's /tmp is private)
    s = await serve(max_concurrency=6, max_starting=2, start_window_s=60, launcher="pdeathsig")
    msg = fake(boot=0.3, record=str(record), answer="up")
    results = await asyncio.gather(*(ask(s, msg) for _ in range(6)))
    assert [code for code, _ in results] == [200] * 6
    windows = [(w["start"], w["booted"]) for w in map(json.loads, record.read_text().splitlines())]
    assert len(windows) == 6
    assert most_at_once(windows) <= 2, windows
    assert s.gateway.supervisor.status()["starting"] == 0


async def test_spares_and_calls_never_exceed_the_process_bound(serve: ServeFactory) -> None:
    """Bound 3, a warm pool that would keep up to 4 spares, no queue: a spare of another
    model stands down for the third call instead of pushing it out (429), and CLI
    processes (running + spares) never exceed 3."""
    s = await serve(
        max_concurrency=3, max_queue=0, warm_pool=True, warm_max_total=4, warm_max_per_key=2
    )
    pool = s.gateway.pool
    assert pool is not None
    assert (await ask(s, "first"))[0] == 200  # then spares for MODEL start
    await wait_until(lambda: sum(pool.status()["ready"].values()) >= 2, 20, "two spares")  # type: ignore[union-attr, arg-type]
    assert cli_trees() <= 3
    async with sampled(cli_trees, s.gateway.supervisor.processes) as peaks:
        results = await asyncio.gather(
            *(ask(s, fake(answer=f"call {i}", hang=0.8), OTHER) for i in range(3))
        )
        await asyncio.sleep(0.5)  # spares refill once the calls are done
    assert sorted(code for code, _ in results) == [200, 200, 200], results
    assert pool.stood_down >= 2
    assert peaks[0] <= 3 and peaks[1] <= 3, peaks
    assert s.gateway.supervisor.peak_processes <= 3


async def test_spares_wait_for_room_no_call_needs(serve: ServeFactory) -> None:
    """With every slot busy no spare starts; once a slot frees, it does (within bound)."""
    s = await serve(max_concurrency=2, warm_pool=True, warm_max_total=2)
    pool = s.gateway.pool
    assert pool is not None
    async with sampled(cli_trees) as peaks:
        results = await asyncio.gather(*(ask(s, fake(hang=0.6)) for _ in range(4)))
        await wait_until(lambda: sum(pool.status()["ready"].values()) >= 1, 20, "a spare")  # type: ignore[union-attr, arg-type]
    assert [code for code, _ in results] == [200] * 4
    assert peaks[0] <= 2, peaks


async def test_per_backend_cap(serve: ServeFactory) -> None:
    """claude capped at 1 call: its calls queue one by one while gemini runs beside them."""
    s = await serve(max_concurrency=4, claude={"max_concurrency": 1})
    assert s.gateway.supervisor.bounds.per_backend == {"claude": 1}
    done: list[str] = []

    async def call(model: str, name: str, hang: float) -> int:
        code, _ = await ask(s, fake(answer=name, hang=hang), model)
        done.append(name)
        return code

    async with sampled(lambda: cli_trees("claude"), lambda: cli_trees("gemini")) as peaks:
        codes = await asyncio.gather(
            *(call(MODEL, f"claude {i}", 0.5) for i in range(3)),
            call("gemini-2.5-pro", "gemini", 0.3),
        )
    assert codes == [200] * 4
    assert peaks[0] == 1 and peaks[1] == 1, peaks
    assert done.index("gemini") < done.index("claude 2")  # not stuck behind claude's queue


def test_per_backend_cap_from_env_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLI_PROXY_CLAUDE__MAX_CONCURRENCY", "3")
    assert Settings().options_for("claude").max_concurrency == 3
    args = build_parser().parse_args(["serve", "--gemini-max-concurrency", "2"])
    settings = settings_from_args(args)
    assert settings.options_for("gemini").max_concurrency == 2
    assert settings.options_for("claude").max_concurrency == 3  # env and flag together
    bounds, _ = limits.from_settings(settings)
    assert bounds.per_backend == {"claude": 3, "gemini": 2}


def test_default_bound_from_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented formula: clamp(floor(memory / 2 / largest CLI size), 1, ceiling)."""
    gib = 2**30
    every = ["claude", "gemini", "codex"]
    sizes = resident_mib(every)  # each backend's measured size, from the registry
    size = max(sizes.values())
    # this machine class (2 cores, 24 GiB) admits at least 8 calls at once
    assert Bounds.derive(sizes, memory_bytes=24 * gib, cpus=2).max_processes >= 8
    small = Bounds.derive(sizes, memory_bytes=2 * gib, cpus=1)
    assert small.max_processes == 1024 // size  # a 2 GiB VM: what fits half its memory
    assert small.max_processes * size <= 1024 and small.max_starting == 1
    assert Bounds.derive(sizes, memory_bytes=gib // 4).max_processes == 1  # never 0
    assert Bounds.derive(sizes, memory_bytes=1024 * gib).max_processes == limits.PROCESS_CEILING
    claude_only = Bounds.derive(resident_mib(["claude"]), memory_bytes=2 * gib)
    assert claude_only.max_processes == 1024 // resident_mib(["claude"])["claude"]
    # the machine's memory as the gateway sees it, a container's limit included
    monkeypatch.setattr(limits.psutil, "virtual_memory", lambda: type("M", (), {"total": 8 * gib}))
    monkeypatch.setattr(limits, "_cgroup_memory_limit", lambda: 2 * gib)
    derived = limits.from_settings(Settings(backends=every))[0]
    assert derived.source == "memory" and derived.max_processes == 1024 // size
    assert limits.from_settings(Settings(max_concurrency=5))[0].max_processes == 5


async def test_health_shows_bounds_and_queue(serve: ServeFactory) -> None:
    s = await serve(max_concurrency=1, max_starting=1, claude={"max_concurrency": 1})
    holder = asyncio.create_task(ask(s, fake(hang=1.0)))
    await wait_until(lambda: s.gateway.supervisor.running == 1, 10, "the first call")
    queued = asyncio.create_task(ask(s, "second"))
    await wait_until(lambda: s.gateway.supervisor.waiting == 1, 10, "the queued call")
    async with aiohttp.ClientSession() as http, http.get(s.server.make_url("/health")) as r:
        health = await r.json()
    assert health["bounds"] == {
        "max_processes": 1,
        "source": "max_concurrency",
        "memory_budget_mib": health["bounds"]["memory_budget_mib"],
        "cli_resident_mib": max(resident_mib(names()).values()),
        "max_starting": 1,
        "per_backend": {"claude": 1},
    }
    assert health["running_by_backend"] == {"claude": 1}
    assert health["queue"]["waiting"] == 1 and health["queue"]["max_queue"] == 32
    assert health["queue"]["oldest_wait_s"] >= 0
    assert (await holder)[0] == 200 and (await queued)[0] == 200


# ------------------------------------------------------------------ time limits


async def test_steady_stream_runs_past_the_idle_limit(serve: ServeFactory) -> None:
    """Silence, not length, ends a call: 12 deltas 0.2 s apart with a 0.5 s idle limit."""
    s = await serve(idle_timeout_s=0.5)
    stream = await s.client.chat.completions.create(
        model=MODEL,
        messages=user(fake(answer="abcdefghijkl", chunks=12, delay=0.2)),  # type: ignore[arg-type]
        stream=True,
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "abcdefghijkl"


@pytest.mark.parametrize("kind", ["progress", "stderr_progress"])
async def test_progress_output_counts_as_output(serve: ServeFactory, kind: str) -> None:
    """A CLI whose model thinks for 3 s prints progress (events the parser ignores, or
    stderr lines): with a 1 s idle limit the call completes."""
    s = await serve(idle_timeout_s=1.0)
    code, r = await ask(s, fake(answer="thought it through", **{kind: 3.0}))
    assert code == 200, r
    assert r.choices[0].message.content == "thought it through"


async def test_a_silent_cli_still_receiving_is_not_idle(serve: ServeFactory) -> None:
    """After its first line the CLI prints nothing for 3 s but keeps reading (its model's
    thoughts arriving, unprinted, as with gemini and codex): 1 s idle limit, it completes."""
    s = await serve(idle_timeout_s=1.0)
    code, r = await ask(s, fake(answer="read it all", silent_reads=3.0))
    assert code == 200, r
    assert r.choices[0].message.content == "read it all"


async def test_a_silent_cli_reading_nothing_is_killed_at_the_idle_limit(
    serve: ServeFactory,
) -> None:
    """Printed its first line, then neither prints nor reads: hung, killed, 504."""
    s = await serve(idle_timeout_s=0.5)
    code, exc = await ask(s, fake(answer="never", linger=30, chunks=1, no_result=True))
    assert code == 504, exc
    assert "printed nothing for 0.5 s" in error_of(exc)["message"]
    assert fake_clis() == []


async def test_whole_call_cap_still_stops_a_runaway(serve: ServeFactory) -> None:
    """A CLI that keeps talking forever is stopped by timeout_s (the runaway guard)."""
    s = await serve(timeout_s=2.5, idle_timeout_s=1.0)
    code, exc = await ask(s, fake(progress=30))
    assert code == 504
    assert "did not finish within 2.5 s (timeout_s)" in error_of(exc)["message"]
    assert fake_clis() == []


async def test_queue_timeout_is_429_with_retry_after(serve: ServeFactory) -> None:
    s = await serve(max_concurrency=1, queue_timeout_s=0.3)
    holder = asyncio.create_task(ask(s, fake(hang=3)))
    await wait_until(lambda: s.gateway.supervisor.running == 1, 10, "the first call")
    with structlog.testing.capture_logs() as logs:
        code, exc = await ask(s, "queued")
    assert code == 429
    assert isinstance(exc, openai.RateLimitError)
    assert exc.response.headers["Retry-After"] == "2"
    body = error_of(exc)
    assert body["code"] == "too_many_concurrent_requests" and "queue_timeout_s" in body["message"]
    done = [e for e in logs if e["event"] == "chat_completion"]
    assert done and done[0]["status"] == 429 and done[0]["queue_wait_ms"] >= 300
    holder.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await holder
    await wait_until(lambda: not fake_clis(), 10, "the first CLI to go")


async def test_a_queued_call_keeps_its_whole_budget(serve: ServeFactory) -> None:
    """timeout_s 2.5: the first call takes ~1.5 s, the second waits for it and then takes
    ~1.5 s itself. Its clock starts at admission, so it completes (before: 504)."""
    s = await serve(max_concurrency=1, queue_timeout_s=30, timeout_s=2.5)
    first = asyncio.create_task(ask(s, fake(answer="first", hang=1.5)))
    await wait_until(lambda: s.gateway.supervisor.running == 1, 10, "the first call")
    with structlog.testing.capture_logs() as logs:
        code, r = await ask(s, fake(answer="second", hang=1.5))
    assert code == 200, r
    assert r.choices[0].message.content == "second"
    assert (await first)[0] == 200
    done = [e for e in logs if e["event"] == "chat_completion"]
    assert max(e["queue_wait_ms"] for e in done) > 0  # it did wait, and had its whole time


async def test_client_read_timeout_caps_a_non_streamed_call(served: Served) -> None:
    """openai-python sends its read timeout: a non-streamed call is not run past it, and
    its CLI tree is gone when the answer goes out."""
    url = served.server.make_url("/v1/chat/completions")
    body = {"model": MODEL, "messages": user(fake(hang=30))}
    t0 = time.monotonic()
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=body, headers={"x-stainless-read-timeout": "1.0"}) as resp,
    ):
        status, err = resp.status, (await resp.json())["error"]
    assert fake_clis() == []  # killed and reaped before the answer
    assert status == 504 and err["code"] == "cli_timeout"
    assert "x-stainless-read-timeout" in err["message"]
    assert time.monotonic() - t0 < 30  # not the CLI's 30 s: order, not a figure


async def test_sdk_read_timeout_header_is_sent_and_obeyed(served: Served) -> None:
    """The real SDK: its 1 s timeout reaches the gateway, which stops the CLI itself (the
    run is killed as a timeout, not as a cancelled request)."""
    client = openai.AsyncOpenAI(base_url=served.base_url, api_key="x", max_retries=0, timeout=1.0)
    try:
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(openai.APITimeoutError):
                await client.chat.completions.create(model=MODEL, messages=user(fake(hang=30)))  # type: ignore[arg-type]
            await wait_until(lambda: not fake_clis(), 10, "the CLI")
            await wait_until(
                lambda: any(e["event"] == "chat_completion" for e in logs), 10, "the log line"
            )
    finally:
        await client.close()
    (done,) = [e for e in logs if e["event"] == "chat_completion"]
    assert done["client_read_timeout_s"] == 1.0
    assert done["killed"] in ("timeout", "cancelled")  # whichever came first: never left


async def test_stream_keepalives_come_before_the_clients_read_timeout(served: Served) -> None:
    """A stream whose client reads with a 0.8 s timeout gets keep-alives at least every
    0.4 s while its CLI is silent; the header does not cut a stream."""
    url = served.server.make_url("/v1/chat/completions")
    body = {
        "model": MODEL,
        "stream": True,
        "messages": user(fake(answer="late", chunks=1, hang=2.0)),
    }
    got: list[bytes] = []
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=body, headers={"x-stainless-read-timeout": "0.8"}) as resp,
    ):
        assert resp.status == 200
        async for line in resp.content:
            got.append(line)
    text = b"".join(got)
    assert text.index(b": keep-alive") < text.index(b'"late"') < text.index(b"[DONE]")


async def test_a_stalled_reader_frees_its_slot_within_the_calls_cap(serve: ServeFactory) -> None:
    """D2: the whole-call cap bounds the write phase too. A client that stops reading is
    dropped at timeout_s (2 s), long before write_timeout_s (60 s)."""
    s = await serve(timeout_s=2.0, write_timeout_s=60, keepalive_s=0)
    sup = s.gateway.supervisor
    with structlog.testing.capture_logs() as logs:
        writer, head = await stalled_stream(s)  # then it reads no more
        assert head.startswith(b"HTTP/1.1 200"), head
        await wait_until(lambda: sup.running == 0, 30, "the slot to be freed")
    dropped = [e for e in logs if e["event"] == "slow_client_dropped"]
    assert dropped and "time limit" in dropped[0]["why"]
    assert fake_clis() == []
    writer.close()
