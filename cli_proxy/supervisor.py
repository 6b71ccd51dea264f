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
    _sem: asyncio.Semaphore | None = None
    _closing: bool = False
    draining: bool = False  # stopping: calls already admitted or queued go on, new ones 503

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def closing(self) -> bool:
        return self._closing

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._sem

    @contextlib.asynccontextmanager
    async def admit(self) -> AsyncIterator[Slot]:
        """Wait for a slot (bounded queue, bounded wait); release it when the block ends."""
        if self._closing or self.draining:
            raise ShuttingDown()
        started = time.monotonic()
        sem = self._semaphore()
        if sem.locked():
            if self._waiting >= self.max_queue:
                raise self._busy("all CLI slots are busy and the wait queue is full")
            self._waiting += 1
            try:
                await asyncio.wait_for(sem.acquire(), timeout=self.limits.timeout_s)
            except TimeoutError:
                raise self._busy("timed out waiting for a free CLI slot") from None
            finally:
                self._waiting -= 1
        else:
            await sem.acquire()
        slot = Slot(self, started, started + self.limits.timeout_s)
        slot.queue_wait_s = time.monotonic() - started
        try:
            if self._closing:  # shut down while this request waited in the queue
                raise ShuttingDown()
            yield slot
        finally:
            if slot.run is not None:
                self._running.discard(slot.run)
            sem.release()

    @contextlib.contextmanager
    def queued(self) -> Iterator[None]:
        """A call that waits before ``admit`` (for its login's refresh: ``logins.py``) counts
        as queued: the queue bound, ``/health`` and the drain on stop see it."""
        if self._closing or self.draining:
            raise ShuttingDown()
        if self._waiting >= self.max_queue:
            raise self._busy("the wait queue is full")
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1

    def _busy(self, message: str) -> SlotsBusy:
        return SlotsBusy(
            f"{message} ({self.max_concurrency} running, {self.max_queue} queued); retry later",
            self.retry_after_s,
        )

    async def shutdown(self) -> None:
        """Kill every tree still running; used on server stop."""
        self._closing = True
        runs = list(self._running)
        for r in runs:
            r.stats.killed = "shutdown"
        await asyncio.gather(*(r.kill() for r in runs), return_exceptions=True)
