"""Process lifecycle and concurrency over real HTTP: timeouts, tree kills, disconnects,
shutdown, a gateway killed by signal, the slot limit and its queue, the structured log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import psutil
import pytest
import structlog
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from tests.conftest import FAKE_CLI, FAKE_PY, Served, ServeFactory, fake

MODEL = "claude-sonnet-4-6"
ROOT = Path(__file__).resolve().parents[2]


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def marker() -> float:
    """A unique sleep length for a ``child`` grandchild: its cmdline identifies it."""
    return round(60 + random.random() * 100, 6)


def with_marker(value: float) -> list[psutil.Process]:
    needle = f"time.sleep({value})"
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if p.info["status"] != psutil.STATUS_ZOMBIE and needle in " ".join(
                p.info["cmdline"] or []
            ):
                found.append(p)
    return found


def fake_clis(root: psutil.Process | None = None) -> list[psutil.Process]:
    """Live fake CLIs the gateway (this process, or ``root``) started: its direct children,
    so a grandchild caught between fork and exec does not count."""
    out = []
    for p in (root or psutil.Process()).children():
        with contextlib.suppress(psutil.Error):
            if str(FAKE_CLI) in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def wait_until(cond: Callable[[], object], within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_gone(procs: list[psutil.Process], within: float, what: str) -> None:
    await wait_until(lambda: not any(alive(p) for p in procs), within, f"{what} to die")


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    body: Any = exc.body
    assert isinstance(body, dict) and {"message", "type", "param", "code"} <= set(body), body
    return body


# ------------------------------------------------------------------ timeouts


async def test_total_timeout_is_504_and_kills(serve: ServeFactory) -> None:
    s = await serve(timeout_s=1.0, idle_timeout_s=10)
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        await s.client.chat.completions.create(
            model=MODEL,
            messages=user(fake(hang=5)),  # type: ignore[arg-type]
        )
    elapsed = time.monotonic() - t0
    assert info.value.status_code == 504
    body = error_of(info.value)
    assert body["type"] == "timeout_error" and body["code"] == "cli_timeout"
    assert "within 1 s" in body["message"]
    assert elapsed < 4
    assert fake_clis() == []  # killed and reaped before the answer went out
    assert s.gateway.supervisor.running == 0


async def test_idle_timeout_is_504_and_kills_grandchild(serve: ServeFactory) -> None:
    s = await serve(idle_timeout_s=0.5)
    mark = marker()
    with pytest.raises(openai.APIStatusError) as info:
        await s.client.chat.completions.create(
            model=MODEL,
            messages=user(fake(hang=20, child=mark)),  # type: ignore[arg-type]
        )
    assert info.value.status_code == 504
    assert "printed nothing for 0.5 s" in error_of(info.value)["message"]
    assert fake_clis() == []
    await wait_gone(with_marker(mark), 2, "grandchild")
    assert with_marker(mark) == []


async def test_timeout_before_any_answer_is_a_real_504_when_streaming(
    serve: ServeFactory,
) -> None:
    s = await serve(idle_timeout_s=0.5)
    with pytest.raises(openai.APIStatusError, match="printed nothing") as info:
        await s.client.chat.completions.create(
            model=MODEL,
            messages=user(fake(hang=20)),  # type: ignore[arg-type]
            stream=True,
        )
    assert info.value.status_code == 504
    assert fake_clis() == []


async def test_timeout_mid_stream_is_error_event(serve: ServeFactory) -> None:
    s = await serve(idle_timeout_s=0.5, stream_head_hold_s=0)  # the head goes out at once
    stream = await s.client.chat.completions.create(
        model=MODEL,
        messages=user(fake(hang=20)),  # type: ignore[arg-type]
        stream=True,
    )
    with pytest.raises(openai.APIError, match="printed nothing"):
        async for _ in stream:
            pass
    assert fake_clis() == []


async def test_grandchild_killed_when_run_finishes(served: Served) -> None:
    """A CLI that exits normally but leaves a child behind (holding its stdout open)."""
    mark = marker()
    t0 = time.monotonic()
    r = await served.client.chat.completions.create(
        model=MODEL,
        messages=user(fake(answer="done", child=mark)),  # type: ignore[arg-type]
    )
    assert r.choices[0].message.content == "done"
    assert time.monotonic() - t0 < 5  # not held up until the idle timeout by the child
    await wait_gone(with_marker(mark), 2, "grandchild")


# ------------------------------------------------------------------ disconnects


async def _first_chunk_then_close(s: Served, spec: dict[str, Any]) -> list[psutil.Process]:
    payload = {"model": MODEL, "messages": user(fake(**spec)), "stream": True}
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            s.server.make_url("/v1/chat/completions"),
            json=payload,
            headers={"Authorization": "Bearer test"},
        )
        assert resp.status == 200
        first = await resp.content.readline()
        assert first.startswith(b"data: ")
        clis = fake_clis()
        assert len(clis) == 1
        resp.close()  # drop the connection mid-stream
    return clis


@pytest.mark.parametrize(
    "spec",
    [
        {"hang": 30},  # silent CLI: only handler cancellation notices the disconnect
        {"answer": "z" * 40, "chunks": 40, "delay": 0.5},  # chatty CLI
    ],
    ids=["silent", "chatty"],
)
async def test_client_disconnect_kills_cli(served: Served, spec: dict[str, Any]) -> None:
    mark = marker()
    clis = await _first_chunk_then_close(served, {**spec, "child": mark})
    # killed, not run out: the chatty CLI would still be writing 20 s later, the silent one
    # sleeping for 30 (bounds, not timings: a loaded machine may take a few seconds)
    t0 = time.monotonic()
    await wait_gone(clis, 10, "the CLI after the client went away")
    await wait_gone(with_marker(mark), 10, "grandchild")
    assert time.monotonic() - t0 < 10
    await wait_until(lambda: served.gateway.supervisor.running == 0, 10, "slot to free")


async def test_sdk_stream_close_kills_cli(served: Served) -> None:
    stream = await served.client.chat.completions.create(
        model=MODEL,
        messages=user(fake(answer="q" * 30, chunks=30, delay=0.5)),  # type: ignore[arg-type]
        stream=True,
    )
    async for chunk in stream:
        assert chunk.choices[0].delta.role == "assistant"
        break
    clis = fake_clis()
    assert len(clis) == 1
    await stream.close()
    await wait_gone(clis, 2, "the CLI after stream.close()")


async def test_nonstream_client_timeout_kills_cli(served: Served) -> None:
    client = AsyncOpenAI(base_url=served.base_url, api_key="x", max_retries=0, timeout=0.5)
    try:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model=MODEL,
                messages=user(fake(hang=30)),  # type: ignore[arg-type]
            )
    finally:
        await client.close()
    await wait_until(lambda: not fake_clis(), 2, "the CLI after the client timed out")


# ------------------------------------------------------------------ shutdown


async def test_server_shutdown_kills_running_clis(serve: ServeFactory) -> None:
    s = await serve(max_concurrency=2, max_queue=2)
    mark = marker()
    tasks = [
        asyncio.create_task(
            s.client.chat.completions.create(
                model=MODEL,
                messages=user(fake(hang=30, child=mark)),  # type: ignore[arg-type]
                stream=stream,
            )
        )
        for stream in (False, True, False)  # the third one waits in the queue
    ]
    await wait_until(lambda: len(fake_clis()) == 2, 5, "two CLIs")
    await wait_until(lambda: s.gateway.supervisor.waiting == 1, 2, "one queued request")
    clis = fake_clis()
    t0 = time.monotonic()
    await s.server.close()  # runner.cleanup(): app shutdown
    assert time.monotonic() - t0 < 5
    await wait_gone(clis, 1, "running CLIs after shutdown")
    await wait_gone(with_marker(mark), 2, "grandchildren after shutdown")
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:  # each either failed or got a (stream) response that then failed
        assert isinstance(r, (openai.APIError, openai.AsyncStream)), r
    assert fake_clis() == []  # the queued request did not start a CLI after shutdown
    assert s.gateway.supervisor.running == 0


def gateway_cmd(*extra: str) -> list[str]:
    """``cli-proxy serve`` as a process of its own on the fake claude, JSON logs on stderr;
    tests/commands/test_keys_reload.py starts its gateways with it too."""
    return [
        sys.executable,
        "-m",
        "cli_proxy",
        "serve",
        "--port",
        "0",
        "--backends",
        "claude",
        "--claude-bin",
        f"{FAKE_PY} {FAKE_CLI} claude",
        "--log-json",
        "--idle-timeout",
        "60",
        *extra,
    ]


@contextlib.asynccontextmanager
async def gateway_process(
    *extra: str, env: dict[str, str] | None = None, containment: str | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``cli-proxy serve`` as its own process with the fake CLI; ``env`` adds variables,
    ``containment`` is a word its start-up log line must name."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("CLI_PROXY_")}
    # a gateway killed with -9 cannot remove its runs' temp dirs: keep them out of /tmp
    scratch = tempfile.mkdtemp(prefix="cli-proxy-test-")
    full["TMPDIR"] = scratch
    full.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        *gateway_cmd(*extra), stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=full
    )
    assert proc.stderr is not None
    try:
        url = None
        # only a bound on a hang: at load 8 a start with bwrap took over 20 s (a full-suite run)
        async with asyncio.timeout(90):
            while url is None:
                line = await proc.stderr.readline()
                assert line, "the gateway exited before listening"
                with contextlib.suppress(ValueError):
                    ev = json.loads(line)
                    if ev.get("event") == "starting" and containment is not None:
                        assert containment in ev["containment"]
                    if ev.get("event") == "listening":
                        url = ev["url"]
        drain = asyncio.create_task(proc.stderr.read())
        yield proc, url
        drain.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)


async def _start_hanging_call(url: str, mark: float | None = None) -> asyncio.Task[Any]:
    client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)

    async def call() -> Any:
        try:
            spec: dict[str, Any] = {"hang": 30}
            if mark is not None:
                spec["child"] = mark
            return await client.chat.completions.create(model=MODEL, messages=user(fake(**spec)))  # type: ignore[arg-type]
        finally:
            await client.close()

    return asyncio.create_task(call())


async def test_gateway_kill9_leaves_no_orphan_cli() -> None:
    async with gateway_process() as (proc, url):
        task = await _start_hanging_call(url)
        gw = psutil.Process(proc.pid)
        clis = await wait_until(lambda: fake_clis(gw), 10, "the CLI to start")
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        await wait_gone(clis, 2, "the CLI after kill -9 of the gateway (PDEATHSIG)")
        with pytest.raises(openai.APIConnectionError):
            await task


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
async def test_gateway_signal_stops_clis_before_exit(sig: signal.Signals) -> None:
    mark = marker()
    async with gateway_process() as (proc, url):
        task = await _start_hanging_call(url, mark)
        gw = psutil.Process(proc.pid)
        clis = await wait_until(lambda: fake_clis(gw), 10, "the CLI to start")
        await wait_until(lambda: with_marker(mark), 5, "the grandchild to start")
        proc.send_signal(sig)  # the first signal drains: the 30 s call would be waited for
        await asyncio.sleep(0.3)
        assert proc.returncode is None
        proc.send_signal(sig)  # the second stops at once
        async with asyncio.timeout(8):
            code = await proc.wait()
        assert code == 0
        # gone by the time the gateway exited: nothing left for PDEATHSIG to clean
        assert not any(alive(p) for p in clis)
        await wait_gone(with_marker(mark), 1, "the grandchild")
        with pytest.raises(openai.APIError):
            await task


# ------------------------------------------------------------------ concurrency


async def _status_of(coro: Any) -> tuple[int, Any]:
    try:
        r = await coro
    except openai.APIStatusError as exc:
        return exc.status_code, exc
    return 200, r


async def test_queue_full_is_429_with_retry_after(serve: ServeFactory) -> None:
    s = await serve(max_concurrency=1, max_queue=1)
    msgs = user(fake(answer="slow", hang=0.8))
    calls = [
        _status_of(s.client.chat.completions.create(model=MODEL, messages=msgs))  # type: ignore[arg-type]
        for _ in range(3)
    ]
    results = await asyncio.gather(*calls)
    statuses = sorted(code for code, _ in results)
    assert statuses == [200, 200, 429]
    exc = next(r for code, r in results if code == 429)
    assert isinstance(exc, openai.RateLimitError)
    assert exc.response.headers["Retry-After"] == "2"
    assert exc.response.headers["Content-Type"].startswith("application/json")
    body = error_of(exc)
    assert body["type"] == "rate_limit_error"
    assert body["code"] == "too_many_concurrent_requests"
    for code, r in results:
        if code == 200:
            ChatCompletion.model_validate(r.model_dump())


async def test_sdk_retries_429_then_succeeds(serve: ServeFactory) -> None:
    s = await serve(max_concurrency=1, max_queue=0)
    s.gateway.supervisor.retry_after_s = 1
    retrying = AsyncOpenAI(base_url=s.base_url, api_key="x", max_retries=1, timeout=30)
    try:
        holder = asyncio.create_task(
            s.client.chat.completions.create(
                model=MODEL,
                messages=user(fake(answer="held", hang=0.5)),  # type: ignore[arg-type]
            )
        )
        await wait_until(lambda: s.gateway.supervisor.running == 1, 5, "the first CLI")
        t0 = time.monotonic()
        raw = await retrying.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=user(fake(answer="after retry")),  # type: ignore[arg-type]
        )
        assert raw.retries_taken == 1
        assert time.monotonic() - t0 >= 0.9  # honoured Retry-After: 1
        r = raw.parse()
        assert r.choices[0].message.content == "after retry"
        assert (await holder).choices[0].message.content == "held"
    finally:
        await retrying.close()


# ------------------------------------------------------------------ structured log


def _events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e.get("event") == name]


async def test_log_one_event_per_request_without_prompt(served: Served) -> None:
    secret = "s3cr3t-prompt-text-" + str(random.random())
    with structlog.testing.capture_logs() as logs:
        await served.client.chat.completions.create(
            model=MODEL,
            messages=user(secret + fake(answer="logged")),  # type: ignore[arg-type]
        )
        stream = await served.client.chat.completions.create(
            model="gemini-2.5-flash",
            messages=user(secret + fake(answer="logged too")),  # type: ignore[arg-type]
            stream=True,
        )
        async for _ in stream:
            pass
        with pytest.raises(openai.APIStatusError):
            await served.client.chat.completions.create(
                model=MODEL,
                messages=user(secret + fake(exit=1, stderr="boom")),  # type: ignore[arg-type]
            )
    done = _events(logs, "chat_completion")
    assert len(done) == 3
    ids = {e["request_id"] for e in done}
    assert len(ids) == 3
    for e in done:
        for key in (
            "request_id",
            "model",
            "backend",
            "pid",
            "queue_wait_ms",
            "first_byte_ms",
            "duration_ms",
            "exit_code",
            "prompt_tokens",
            "completion_tokens",
            "status",
        ):
            assert key in e, (key, e)
        assert isinstance(e["pid"], int)
        assert e["queue_wait_ms"] >= 0 and e["duration_ms"] > 0
    ok, streamed, failed = done
    assert ok["backend"] == "claude" and streamed["backend"] == "gemini"
    assert ok["status"] == 200 and ok["exit_code"] == 0 and ok["prompt_tokens"] > 0
    assert ok["completion_tokens"] > 0 and ok["first_byte_ms"] > 0
    assert streamed["stream"] is True and streamed["exit_code"] == 0
    assert failed["status"] == 502 and failed["exit_code"] == 1
    assert secret not in repr(logs)


async def test_log_prompts_opt_in(serve: ServeFactory) -> None:
    s = await serve(log_prompts=True)
    secret = "visible-prompt-" + str(random.random())
    wrapper = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(0))  # debug too
    try:
        with structlog.testing.capture_logs() as logs:
            await s.client.chat.completions.create(
                model=MODEL,
                messages=user(secret + fake(answer="x")),  # type: ignore[arg-type]
            )
    finally:
        structlog.configure(wrapper_class=wrapper)
    assert secret in repr(logs)
    assert len(_events(logs, "chat_completion")) == 1


async def test_log_records_disconnect_and_429(serve: ServeFactory) -> None:
    s = await serve(max_concurrency=1, max_queue=0)
    with structlog.testing.capture_logs() as logs:
        clis = await _first_chunk_then_close(s, {"hang": 30})
        await wait_gone(clis, 2, "the CLI")
        await wait_until(lambda: _events(logs, "chat_completion"), 2, "the log event")
        holder = asyncio.create_task(
            s.client.chat.completions.create(
                model=MODEL,
                messages=user(fake(answer="x", hang=0.5)),  # type: ignore[arg-type]
            )
        )
        await wait_until(lambda: s.gateway.supervisor.running == 1, 5, "the first CLI")
        with pytest.raises(openai.RateLimitError):
            await s.client.chat.completions.create(model=MODEL, messages=user("hi"))  # type: ignore[arg-type]
        await holder
    gone, busy, ok = _events(logs, "chat_completion")
    assert gone["status"] == 499 and gone["killed"] == "cancelled"
    assert busy["status"] == 429 and busy["pid"] is None
    assert ok["status"] == 200


async def test_sigterm_drains_running_calls_and_refuses_new_ones() -> None:
    async with gateway_process() as (proc, url):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        running = asyncio.create_task(
            client.chat.completions.create(
                model=MODEL,
                messages=user(fake(answer="finished", hang=1.5)),  # type: ignore[arg-type]
            )
        )
        gw = psutil.Process(proc.pid)
        await wait_until(lambda: fake_clis(gw), 10, "the CLI to start")
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        with pytest.raises(openai.APIStatusError) as info:  # new calls: 503 while draining
            await client.chat.completions.create(model=MODEL, messages=user("late"))  # type: ignore[arg-type]
        assert info.value.status_code == 503
        health = url.removesuffix("/v1") + "/health"
        async with aiohttp.ClientSession() as s, s.get(health) as h:
            assert (await h.json())["status"] == "draining"
        done = await running  # the call under way finished normally
        assert done.choices[0].message.content == "finished"
        async with asyncio.timeout(10):
            assert await proc.wait() == 0
        await client.close()


async def test_sigterm_refuses_queued_calls_at_once_while_running_ones_drain() -> None:
    """Issue 24 (D6): queued calls get 503 with Retry-After as soon as the drain begins,
    not at its end (before, they waited the whole drain, or started late and were cut)."""
    async with gateway_process("--max-concurrency", "1", "--max-queue", "4") as (proc, url):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
        running = asyncio.create_task(
            client.chat.completions.create(
                model=MODEL,
                messages=user(fake(answer="finished", hang=4)),  # type: ignore[arg-type]
            )
        )
        gw = psutil.Process(proc.pid)
        await wait_until(lambda: fake_clis(gw), 10, "the CLI to start")
        health = url.removesuffix("/v1") + "/health"
        queued = [
            asyncio.create_task(
                _status_of(
                    client.chat.completions.with_raw_response.create(
                        model=MODEL,
                        messages=user(fake(answer="queued")),  # type: ignore[arg-type]
                    )
                )
            )
            for _ in range(2)
        ]
        async with aiohttp.ClientSession() as s:

            async def waiting() -> int:
                async with s.get(health) as h:
                    return int((await h.json()).get("waiting", 0))

            deadline = time.monotonic() + 10
            while await waiting() < 2:
                assert time.monotonic() < deadline, "the calls never queued"
                await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        done, _ = await asyncio.wait(
            [running, *queued], return_when=asyncio.FIRST_COMPLETED, timeout=30
        )
        assert running not in done  # the queued calls were answered first: no waiting out
        for task in queued:
            status, err = await task
            assert status == 503, err
            assert err.response.headers["Retry-After"] == "2"
            assert err.body["code"] == "shutting_down"  # type: ignore[index]
        assert len(fake_clis(gw)) == 1  # neither queued call started a CLI
        done_call = await running  # the running call drained normally
        assert done_call.choices[0].message.content == "finished"
        async with asyncio.timeout(10):
            assert await proc.wait() == 0
        await client.close()
