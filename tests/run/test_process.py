"""``cli_proxy/run/process.py`` on its own: ``started`` ends every process it was given.

The call-level behaviour (timeouts, kills, disconnects) is in ``test_reliability.py``; here
``started`` is driven directly with a real child process as the spare it takes over."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import cast

from cli_proxy.plan.spec import LaunchSpec
from cli_proxy.run.containment import Launcher, Prepared
from cli_proxy.run.limits import Limits
from cli_proxy.run.process import started
from tests.run.test_pool import open_pipes


class StuckSpare:
    """A spare whose hand-over never ends (its stderr reader does not stop): a call cancelled
    there is cancelled between taking the spare and running it."""

    def __init__(self, proc: asyncio.subprocess.Process, workdir: Path) -> None:
        self.proc = proc
        self.prepared = Prepared([], str(workdir), {}, host_dirs=(workdir,))
        self.handing_over = asyncio.Event()

    def starting(self) -> bool:
        return False

    async def handed_over(self) -> bytes:
        self.handing_over.set()
        await asyncio.Event().wait()
        return b""


async def test_a_call_cancelled_while_taking_over_a_spare_kills_it(tmp_path: Path) -> None:
    """The spare is the call's from the moment it was taken: a call cancelled during the
    hand-over still kills and reaps it, closes its pipes and removes its work dir (it was
    left running, owned by nobody, until the gateway died)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; sys.stdin.read()",  # a CLI waiting for its prompt
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    workdir = tmp_path / "call-1"
    workdir.mkdir()
    spare = StuckSpare(proc, workdir)
    spec = LaunchSpec.make("claude", [sys.executable], {})
    unused = cast(Launcher, None)  # a spare is taken over, never spawned
    limits = Limits(kill_grace_s=1.0)

    async def call() -> None:
        deadline = time.monotonic() + 60
        async with started(spec, unused, limits, deadline, spare):
            raise AssertionError("the hand-over never ends")

    task = asyncio.create_task(call())
    await spare.handing_over.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert proc.returncode is not None  # killed and reaped
    assert open_pipes(proc) == []
    assert not workdir.exists()
