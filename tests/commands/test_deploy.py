"""Scale-out as docs/deploy.md describes it: replicas behind HAProxy, readiness that turns
503 the moment a replica drains, and a rolling restart that no client notices.

The rolling-restart test runs the real ``haproxy`` (Debian package; ``make test`` installs
it through ``make balancer`` where it may) with docs/deploy/haproxy.cfg, only its addresses
rewritten, in front of three ``cli-proxy serve`` processes with fake CLIs. Steady load goes
through it with the OpenAI SDK, retries off, while each replica in turn gets SIGTERM and is
started again. Run with ``-s`` to see the figures (calls sent, failed, p95 latency)."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from openai import AsyncOpenAI

from cli_proxy.config import Settings
from tests.conftest import CODEX_FAKE_CLI, FAKE_CLI, FAKE_PY, ServeFactory, fake

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CFG = ROOT / "docs" / "deploy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
REPLICAS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    port: int
    scratch: str
    proc: asyncio.subprocess.Process | None = None
    log: list[dict[str, object]] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLI_PROXY_")}
        env["TMPDIR"] = self.scratch
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli_proxy",
            "serve",
            "--port",
            str(self.port),
            "--log-json",
            "--claude-bin",
            f"{FAKE_PY} {FAKE_CLI} claude",
            "--gemini-bin",
            f"{FAKE_PY} {FAKE_CLI} gemini",
            "--codex-bin",
            f"{FAKE_PY} {CODEX_FAKE_CLI}",
            "--max-concurrency",
            "8",
            "--drain-timeout",
            "20",
            stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert self.proc.stderr is not None
        async with asyncio.timeout(60):
            while True:
                line = await self.proc.stderr.readline()
                assert line, "the replica exited before listening"
                with contextlib.suppress(ValueError):
                    self.log.append(json.loads(line))
                    if self.log[-1].get("event") == "listening":
                        break
        self._drain = asyncio.create_task(self._read_log())

    async def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            with contextlib.suppress(ValueError):
                self.log.append(json.loads(line))

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        if self._drain is not None:
            await self._drain
        return code


@contextlib.asynccontextmanager
async def replicas(n: int) -> AsyncIterator[list[Replica]]:
    scratch = tempfile.mkdtemp(prefix="cli-proxy-deploy-")
    group = [Replica(free_port(), scratch) for _ in range(n)]
    try:
        await asyncio.gather(*(r.start() for r in group))
        yield group
    finally:
        for r in group:
            if r.proc is not None and r.proc.returncode is None:
                r.proc.kill()
                await r.proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)


async def eventually(check: Callable[[], Awaitable[bool]], limit: float = 20) -> None:
    """Poll ``check`` until it holds (the processes under test say so only by their state)."""
    async with asyncio.timeout(limit):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


def logged(replica: Replica, event: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(e.get("event") == event for e in replica.log)

    return check


def busy(session: aiohttp.ClientSession, replica: Replica) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        async with session.get(f"{replica.url}/health") as r:
            return bool((await r.json())["running"])

    return check


def haproxy_config(
    front: int, stats: int, backends: list[int], changes: dict[str, str] | None = None
) -> str:
    """docs/deploy/haproxy.cfg with this test's ports (and ``changes``, old -> new)."""
    text = HAPROXY_CFG.read_text()
    for old, new in (changes or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{front}")
    text = text.replace("127.0.0.1:8404", f"127.0.0.1:{stats}")
    for i, port in enumerate(backends, 1):
        text = text.replace(f"127.0.0.1:{8080 + i}", f"127.0.0.1:{port}")
    lines = text.splitlines(keepends=True)  # fewer replicas: the servers beyond them go
    text = "".join(ln for ln in lines if not re.match(r"\s+server \S+ 127\.0\.0\.1:80\d\d", ln))
    assert text.count("server replica") == len(backends)
    return text


async def server_states(session: aiohttp.ClientSession, stats: int) -> dict[str, dict[str, str]]:
    async with session.get(f"http://127.0.0.1:{stats}/stats;csv") as r:
        text = (await r.text()).lstrip("# ")
    rows = csv.DictReader(io.StringIO(text))
    return {row["svname"]: row for row in rows if row["pxname"] == "replicas"}


async def wait_until(
    session: aiohttp.ClientSession, stats: int, name: str, status: str, limit: float = 30
) -> None:
    async def up() -> bool:
        return (await server_states(session, stats))[name]["status"] == status

    await eventually(up, limit)


# ------------------------------------------------------------------------- readiness


async def test_ready_needs_no_key_and_answers_503_as_an_openai_error(serve: ServeFactory) -> None:
    served = await serve(api_keys=["s3cret"])
    async with aiohttp.ClientSession() as session:
        url = served.server.make_url("/health/ready")
        async with session.get(url) as r:
            assert r.status == 200 and await r.json() == {"status": "ready", "running": 0}
        async with session.get(served.server.make_url("/v1/models")) as r:
            assert r.status == 401  # the rest still needs the key
        served.gateway.supervisor.draining = True
        async with session.get(url) as r:
            body = await r.json()
            assert r.status == 503 and r.content_type == "application/json"
            assert body["error"]["code"] == "shutting_down" and body["error"]["message"]


def test_the_systemd_unit_lets_the_gateway_drain() -> None:
    """systemd must signal the gateway alone (KillMode=mixed) and wait longer than its drain
    and kill grace before SIGKILL."""
    unit = (ROOT / "docs" / "deploy" / "cli-proxy@.service").read_text()
    values = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[0] != "#"
    )
    assert values["KillMode"] == "mixed" and values["KillSignal"] == "SIGTERM"
    defaults = Settings()
    assert int(values["TimeoutStopSec"]) > defaults.drain_timeout_s + defaults.kill_grace_s


async def test_ready_turns_503_when_draining_while_health_stays_200() -> None:
    """The balancer's signal: /health/ready is 503 from the first SIGTERM, while the running
    call still finishes; /health (liveness) answers 200 "draining"; no API key needed."""
    async with replicas(1) as (replica,), aiohttp.ClientSession() as session:
        async with session.get(f"{replica.url}/health/ready") as r:
            assert r.status == 200 and (await r.json())["status"] == "ready"
        client = AsyncOpenAI(base_url=f"{replica.url}/v1", api_key="x", max_retries=0)
        slow = asyncio.create_task(
            client.chat.completions.create(
                model="claude-sonnet-4-6",
                messages=[{"role": "user", "content": "slow " + fake(delay=0.5, chunks=4)}],
            )
        )
        await eventually(busy(session, replica))
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGTERM)
        await eventually(logged(replica, "draining"))
        async with session.get(f"{replica.url}/health/ready") as r:
            body = await r.json()
            assert r.status == 503 and body["error"]["code"] == "shutting_down"
        async with session.get(f"{replica.url}/health") as r:
            assert r.status == 200 and (await r.json())["status"] == "draining"
        answer = await slow
        assert answer.choices[0].message.content == "ok"
        assert await replica.stop() == 0


@contextlib.asynccontextmanager
async def balancer(config: str, tmp_path: Path, stats: int) -> AsyncIterator[None]:
    """The real haproxy with ``config`` (validated first), until every server is UP."""
    assert HAPROXY is not None
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(config)
    check = await asyncio.create_subprocess_exec(
        HAPROXY, "-c", "-f", str(cfg), stdout=asyncio.subprocess.DEVNULL
    )
    assert await check.wait() == 0, "the haproxy configuration does not validate"
    lb = await asyncio.create_subprocess_exec(
        HAPROXY, "-db", "-f", str(cfg), stdout=asyncio.subprocess.DEVNULL
    )
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(30):
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    states = await server_states(session, stats)
                    if states and all(s["status"] == "UP" for s in states.values()):
                        break
                await asyncio.sleep(0.1)
        yield
    finally:
        lb.terminate()
        await lb.wait()


needs_haproxy = pytest.mark.skipif(
    HAPROXY is None,
    reason="haproxy is not installed (`make balancer` installs the Debian package as root; "
    "`make test` runs it): the balancer tests need the real haproxy",
)


@needs_haproxy
@pytest.mark.parametrize("size", [100, 300_000])
async def test_a_call_that_meets_a_draining_replica_is_retried_elsewhere(
    tmp_path: Path, size: int
) -> None:
    """Deterministic: replica1 drains (a slow call keeps it in its drain) and is still UP
    for haproxy (checks every 60 s); ``balance first`` sends every call to it. Its 503
    shutting_down is retried on replica2, a request larger than HAProxy's default 16 kB
    buffer too (the config's tune.bufsize)."""
    front, stats = free_port(), free_port()
    async with replicas(2) as (draining, healthy):
        changes = {"balance leastconn": "balance first", "inter 1s": "inter 60s"}
        config = haproxy_config(front, stats, [draining.port, healthy.port], changes)
        async with balancer(config, tmp_path, stats):
            direct = AsyncOpenAI(base_url=f"{draining.url}/v1", api_key="x", max_retries=0)
            slow = asyncio.create_task(
                direct.chat.completions.create(
                    model="claude-sonnet-4-6",
                    messages=[{"role": "user", "content": fake(delay=1.0, chunks=8)}],
                )
            )
            async with aiohttp.ClientSession() as session:
                await eventually(busy(session, draining))
            assert draining.proc is not None
            draining.proc.send_signal(signal.SIGTERM)
            await eventually(logged(draining, "draining"))
            client = AsyncOpenAI(
                base_url=f"http://127.0.0.1:{front}/v1", api_key="x", max_retries=0
            )
            content = "y" * size + " " + fake(answer="from elsewhere")
            r = await client.chat.completions.create(
                model="claude-sonnet-4-6", messages=[{"role": "user", "content": content}]
            )
            assert r.choices[0].message.content == "from elsewhere"
            assert (await slow).choices[0].message.content == "ok"
            await draining.stop()
    refused = [e for e in draining.log if e.get("status") == 503]
    served = [e for e in healthy.log if e.get("event") == "chat_completion"]
    assert len(refused) == 1 and len(served) == 1


# -------------------------------------------------------------------- rolling restart


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    during: list[float] = field(default_factory=list)  # calls that overlapped a restart
    failures: list[str] = field(default_factory=list)
    restarting: bool = False


async def worker(client: AsyncOpenAI, load: Load, stop: asyncio.Event, n: int) -> None:
    """One client in a loop: non-streaming and streaming, claude and gemini, now and then a
    large prompt (60 kB: held in HAProxy's buffer, so still retryable)."""
    i = 0
    while not stop.is_set():
        i += 1
        model = "claude-sonnet-4-6" if (n + i) % 2 else "gemini-2.5-flash"
        text = ("x" * 60_000 if i % 7 == 0 else f"call {n}.{i} ") + fake(delay=0.04, chunks=4)
        messages = [{"role": "user", "content": text}]
        overlapped = load.restarting
        t0 = time.monotonic()
        try:
            if i % 2:
                r = await client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
                assert r.choices[0].message.content == "ok", r
            else:
                stream = await client.chat.completions.create(
                    model=model,
                    messages=messages,  # type: ignore[arg-type]
                    stream=True,
                )
                parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
                assert "".join(parts) == "ok", parts
        except Exception as exc:
            load.failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            continue
        elapsed = time.monotonic() - t0
        load.latencies.append(elapsed)
        if overlapped or load.restarting:
            load.during.append(elapsed)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)] if ordered else float("nan")


@pytest.mark.soak
@pytest.mark.timeout(600)
@needs_haproxy
async def test_rolling_restart_behind_haproxy_loses_no_call(tmp_path: Path) -> None:
    front, stats = free_port(), free_port()
    async with replicas(REPLICAS) as group, aiohttp.ClientSession() as session:
        config = haproxy_config(front, stats, [r.port for r in group])
        async with balancer(config, tmp_path, stats):
            client = AsyncOpenAI(
                base_url=f"http://127.0.0.1:{front}/v1", api_key="x", max_retries=0, timeout=60
            )
            load, stop = Load(), asyncio.Event()
            workers = [asyncio.create_task(worker(client, load, stop, n)) for n in range(6)]
            await asyncio.sleep(2)  # steady state first
            restart_started = time.monotonic()
            phases: list[tuple[float, float, float]] = []  # stop (drain), start, until UP
            for i, replica in enumerate(group, 1):
                load.restarting = True
                t0 = time.monotonic()
                assert await replica.stop() == 0  # SIGTERM: drains, then exits
                t1 = time.monotonic()
                await replica.start()  # same port, fresh process
                t2 = time.monotonic()
                await wait_until(session, stats, f"replica{i}", "UP")
                phases.append((t1 - t0, t2 - t1, time.monotonic() - t2))
                load.restarting = False
                await asyncio.sleep(1)  # steady load on the full set again
            restart_s = time.monotonic() - restart_started
            stop.set()
            await asyncio.gather(*workers)
            states = await server_states(session, stats)
    sent = len(load.latencies) + len(load.failures)
    retries = sum(int(s["wretr"] or 0) for s in states.values())
    redispatched = sum(int(s["wredis"] or 0) for s in states.values())
    refused = sum(1 for r in group for e in r.log if e.get("status") == 503)
    print(
        f"\nrolling restart of {REPLICAS} replicas behind haproxy in {restart_s:.1f} s: "
        f"{sent} calls sent, {len(load.failures)} failed, p95 {p95(load.latencies) * 1000:.0f} ms "
        f"(during restarts: {len(load.during)} calls, p95 {p95(load.during) * 1000:.0f} ms); "
        f"503 shutting_down answered by draining replicas: {refused}; "
        f"haproxy retries {retries}, redispatches {redispatched}; per replica "
        + ", ".join(f"stop {a:.1f} s, start {b:.1f} s, UP {c:.1f} s" for a, b, c in phases)
    )
    assert load.failures == [], load.failures[:5]
    assert len(load.during) >= 3 * REPLICAS
    # every replica served calls after its restart (the balancer took it back)
    assert all(int(s["stot"]) > 0 for s in states.values())
