"""No descendant survives its call or the gateway, however it tries to escape
(docs/security.md). Both launchers; bwrap's tests skip with a note where it cannot run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import psutil
import pytest
from openai import AsyncOpenAI

from cli_proxy.run.containment import BwrapLauncher
from tests.conftest import ServeFactory, fake
from tests.run.test_reliability import (
    alive,
    gateway_process,
    marker,
    wait_gone,
    wait_until,
    with_marker,
)

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-6"
BWRAP = BwrapLauncher.available()
needs_bwrap = pytest.mark.skipif(
    not BWRAP, reason="bubblewrap (Debian package 'bubblewrap') is not installed or cannot run"
)
LAUNCHERS = [pytest.param("bwrap", marks=needs_bwrap), "pdeathsig"]
ESCAPES = ["plain", "setsid", "double_fork"]


@pytest.mark.parametrize("escape", ESCAPES)
@needs_bwrap
async def test_bwrap_call_leaves_no_descendant(serve: ServeFactory, escape: str) -> None:
    """The PID namespace dies with the call: even a setsid or double-forked grandchild."""
    s = await serve(launcher="bwrap")
    mark = marker()
    r = await s.client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": fake(answer="done", child=mark, escape=escape)}],
    )
    assert r.choices[0].message.content == "done"
    await wait_gone(with_marker(mark), 3, f"the {escape} grandchild")
    assert with_marker(mark) == []


def gateway(launcher: str, scratch: Path) -> Any:
    """The gateway as its own process, with this launcher and its work dirs in ``scratch``."""
    env = {"CLI_PROXY_WORK_ROOT": str(scratch / "work"), "TMPDIR": str(scratch)}
    env["CLI_PROXY_LAUNCHER"] = launcher
    return gateway_process("--max-concurrency", "4", env=env, containment=launcher)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_kill9_with_three_calls_in_flight_leaves_nothing(launcher: str) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="cli-proxy-seal-"))
    marks = {escape: marker() for escape in ESCAPES}
    try:
        async with gateway(launcher, scratch) as (proc, url):
            client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
            calls = [
                asyncio.create_task(
                    client.chat.completions.create(
                        model=MODEL,
                        messages=[
                            {"role": "user", "content": fake(hang=30, child=m, escape=escape)}
                        ],
                    )
                )
                for escape, m in marks.items()
            ]
            await wait_until(
                lambda: all(with_marker(m) for m in marks.values()), 10, "three grandchildren"
            )
            procs = descendants(proc.pid) + [p for m in marks.values() for p in with_marker(m)]
            if launcher == "bwrap":
                assert not any((scratch / "work").glob("*/*")), "bwrap keeps work dirs in memory"
            else:
                # the three calls' work dirs, and a warm spare's if one has started
                assert len(list((scratch / "work").glob("*/call-*"))) in (3, 4)
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
            if launcher == "pdeathsig":
                # without a PID namespace, escaped grandchildren outlive a kill -9 (documented
                # gap): the test removes them itself, collecting again, as a double fork may
                # finish after the first look; the next gateway removes the work dirs
                for _ in range(50):
                    found = procs + [p for m in marks.values() for p in with_marker(m)]
                    for p in found:
                        with contextlib.suppress(psutil.Error):
                            p.kill()
                    await asyncio.sleep(0.05)
                async with gateway(launcher, scratch):
                    pass
            await wait_gone(procs, 5, "every process of the killed gateway's calls")
            for task in calls:
                with contextlib.suppress(Exception):
                    await task
            await client.close()
        assert not any(alive(p) for p in procs)
        assert [m for m in marks.values() if with_marker(m)] == []
        leftovers = (
            [p for p in (scratch / "work").glob("**/*")] if (scratch / "work").exists() else []
        )
        assert leftovers == [], leftovers
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.parametrize("escape", ["setsid", "double_fork"])
async def test_pdeathsig_subreaper_sweeps_escaped_grandchildren(escape: str) -> None:
    """Without bwrap, the gateway process is a child subreaper: a grandchild that escaped the
    CLI's session is re-parented to it and killed when the call ends."""
    scratch = Path(tempfile.mkdtemp(prefix="cli-proxy-seal-"))
    mark = marker()
    try:
        async with (
            gateway("pdeathsig", scratch) as (_, url),
            AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client,
        ):
            content = fake(answer="ok", child=mark, escape=escape)
            r: Any = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": content}]
            )
            assert r.choices[0].message.content == "ok"
            await wait_gone(with_marker(mark), 5, f"the {escape} grandchild")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
