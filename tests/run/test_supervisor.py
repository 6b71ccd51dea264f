"""``cli_proxy/run/supervisor.py`` on its own: a slot's release waits for its run's tree.

The HTTP-level bounds are in ``test_capacity.py``; here the supervisor is driven directly, with
a run whose end (kill and reap, ``CliRun.ending``) the test holds open, as a tree that takes
its kill grace to die does."""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

from cli_proxy.run.limits import Bounds
from cli_proxy.run.process import CliRun
from cli_proxy.run.supervisor import Supervisor


class DyingRun:
    """What the supervisor reads of a ``CliRun`` whose tree is still being killed."""

    def __init__(self) -> None:
        self.ending: asyncio.Future[None] = asyncio.get_running_loop().create_future()


async def test_a_call_cancelled_while_its_tree_dies_holds_its_slot_until_reaped() -> None:
    """Bound 1. The call is cancelled while its tree is being killed (its ``close`` is
    shielded, so the kill goes on): the slot and the process stay counted until the tree is
    reaped, and the next call is admitted only then, never beside a tree still alive."""
    sup = Supervisor(Bounds(max_processes=1, max_starting=1), max_queue=4)
    run = DyingRun()
    killing = asyncio.Event()

    async def call() -> None:
        async with sup.admit("claude") as slot:
            await slot.cold_start()
            slot.start.release()  # type: ignore[union-attr]
            slot.run = cast(CliRun, run)
            killing.set()
            await asyncio.sleep(3600)  # the call's close, awaiting the shielded kill

    first = asyncio.create_task(call())
    await killing.wait()
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    assert (sup.running, sup.processes()) == (1, 1)  # its tree is still alive

    admitted = asyncio.Event()

    async def next_call() -> None:
        async with sup.admit("claude"):
            admitted.set()

    second = asyncio.create_task(next_call())
    await asyncio.sleep(0.05)
    assert not admitted.is_set() and sup.waiting == 1
    run.ending.set_result(None)  # reaped
    await asyncio.wait_for(second, 5)
    assert admitted.is_set()
    assert (sup.running, sup.processes(), sup.waiting) == (0, 0, 0)


async def test_a_call_whose_tree_is_reaped_frees_its_slot_at_once() -> None:
    """The usual end: the run's end is done when the call leaves its slot."""
    sup = Supervisor(Bounds(max_processes=1, max_starting=1), max_queue=4)
    run = DyingRun()
    run.ending.set_result(None)
    async with sup.admit("claude") as slot:
        await slot.cold_start()
        slot.run = cast(CliRun, run)
    assert (sup.running, sup.processes()) == (0, 0)
