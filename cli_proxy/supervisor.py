"""Admission: how many CLI processes run at once, a bounded queue, and shutdown.

The supervisor never starts a process; it hands out slots and knows the runs in them, so
that shutdown can kill every tree. A slot is released only after the run in it has been
reaped (the caller's ``process.started`` block closes inside the slot's block).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from .failures import ShuttingDown, SlotsBusy
from .process import CliRun, Limits


@dataclass
class Slot:
    """One admitted call: when it was admitted, its deadline, the run it holds."""

    supervisor: Supervisor
    admitted_at: float
    deadline: float
    queue_wait_s: float = 0.0
    run: CliRun | None = None

    def track(self, run: CliRun) -> None:
        """Register the started run, so shutdown can kill it."""
        self.run = run
        run.stats.queue_wait_s = self.queue_wait_s
        self.supervisor._running.add(run)
        if self.supervisor._closing:  # shutdown began while it was spawning: missed by it
            run.stats.killed = "shutdown"
            raise ShuttingDown()


@dataclass
class Supervisor:
    """Caps concurrent CLI processes, queues a bounded number of waiters, tracks all runs."""

    max_concurrency: int
    max_queue: int
    limits: Limits = field(default_factory=Limits)
    retry_after_s: int = 2
    _running: set[CliRun] = field(default_factory=set)
    _waiting: int = 0
    _admitted: int = 0  # slots held: running calls, and calls still starting their CLI
    _sem: asyncio.Semaphore | None = None
    _stop: asyncio.Event | None = None  # set by drain() and shutdown(): wakes the queue
    _closing: bool = False
    draining: bool = False  # stopping: running calls go on; queued and new ones get 503

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def admitted(self) -> int:
        """Calls holding a slot, their CLI started or not: what a drain waits for."""
        return self._admitted

    @property
    def closing(self) -> bool:
        return self._closing

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._sem

    def _stopping(self) -> asyncio.Event:
        if self._stop is None:
            self._stop = asyncio.Event()
        return self._stop

    def drain(self) -> None:
        """Stop taking calls (SIGTERM): running calls go on; every queued one and every new
        one gets 503 with Retry-After at once, instead of waiting out the drain to be
        refused (or to start at its end and be killed)."""
        self.draining = True
        self._stopping().set()

    @contextlib.asynccontextmanager
    async def admit(self) -> AsyncIterator[Slot]:
        """Wait for a slot (bounded queue, bounded wait); release it when the block ends."""
        if self._closing or self.draining:
            raise ShuttingDown(self.retry_after_s)
        started = time.monotonic()
        sem = self._semaphore()
        if sem.locked():
            if self._waiting >= self.max_queue:
                raise self._busy("all CLI slots are busy and the wait queue is full")
            self._waiting += 1
            try:
                await self._queue_for(sem)
            finally:
                self._waiting -= 1
        else:
            await sem.acquire()
        slot = Slot(self, started, started + self.limits.timeout_s)
        slot.queue_wait_s = time.monotonic() - started
        self._admitted += 1
        try:
            if self._closing:  # shut down while this request waited in the queue
                raise ShuttingDown(self.retry_after_s)
            yield slot
        finally:
            self._admitted -= 1
            if slot.run is not None:
                self._running.discard(slot.run)
            sem.release()

    @contextlib.contextmanager
    def queued(self) -> Iterator[None]:
        """A call that waits before ``admit`` (for its login's refresh: ``logins.py``) counts
        as queued: the queue bound, ``/health`` and the drain on stop see it."""
        if self._closing or self.draining:
            raise ShuttingDown(self.retry_after_s)
        if self._waiting >= self.max_queue:
            raise self._busy("the wait queue is full")
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1

    async def _queue_for(self, sem: asyncio.Semaphore) -> None:
        """Wait in the queue for a slot: until one is free (then it is held), the queue
        wait ends (429), or the gateway stops (503)."""
        acquire = asyncio.ensure_future(sem.acquire())
        stop = asyncio.ensure_future(self._stopping().wait())
        try:
            await asyncio.wait(
                (acquire, stop), timeout=self.limits.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:  # the caller was cancelled (its client went away)
            stop.cancel()
            if acquire.done() and not acquire.cancelled():
                sem.release()
            else:
                acquire.cancel()  # a slot granted meanwhile is handed on by the semaphore
            raise
        stop.cancel()
        if acquire.done() and not (self.draining or self._closing):
            return
        if acquire.done():
            sem.release()
        else:
            acquire.cancel()
        if self.draining or self._closing:
            raise ShuttingDown(self.retry_after_s)
        raise self._busy("timed out waiting for a free CLI slot")

    def _busy(self, message: str) -> SlotsBusy:
        return SlotsBusy(
            f"{message} ({self.max_concurrency} running, {self.max_queue} queued); retry later",
            self.retry_after_s,
        )

    async def shutdown(self) -> None:
        """Kill every tree still running; used on server stop."""
        self._closing = True
        self._stopping().set()
        runs = list(self._running)
        for r in runs:
            r.stats.killed = "shutdown"
        await asyncio.gather(*(r.kill() for r in runs), return_exceptions=True)
