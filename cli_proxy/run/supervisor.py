"""Admission: the bounds of ``limits.py`` applied. Call slots, a bounded FIFO queue, start
slots, room for spares, and shutdown.

The supervisor never starts a process; it hands out slots and knows the runs in them, so
that shutdown can kill every tree. A slot is released only after the run in it has been
reaped (the caller's ``process.started`` block closes inside the slot's block; a call
cancelled while its tree is being killed leaves its slot to the end of that kill).

Processes alive = running calls + the pool's spares (ready, starting or being killed).
That sum never exceeds ``bounds.max_processes``: a spare starts only into room no call
needs (none waiting, room left), and a call that needs room makes a spare stand down
(``make_room``) before it spawns, instead of being queued or refused because of a spare.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from cli_proxy.failures import ShuttingDown, SlotsBusy
from cli_proxy.run.limits import Bounds, CallBudget, Limits, start_over
from cli_proxy.run.process import CliRun


class StartSlot:
    """One of ``bounds.max_starting``: held from before a spawn until the start is over."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._held = True
        self._watch: asyncio.Task[None] | None = None

    def watch(self, pid: int, output_seen: Callable[[], bool]) -> None:
        """Release once the CLI ``pid`` has finished starting (``limits.start_over``)."""
        window = self._supervisor.bounds.start_window_s
        self._watch = asyncio.create_task(start_over(pid, output_seen, window))
        self._watch.add_done_callback(lambda _: self.release())

    @property
    def held(self) -> bool:
        """The start is not over yet."""
        return self._held

    def release(self) -> None:
        if self._held:
            self._held = False
            self._supervisor._start_done()
        if self._watch is not None and not self._watch.done():
            self._watch.cancel()


@dataclass
class Slot:
    """One admitted call: its backend, its deadline, the run it holds."""

    supervisor: Supervisor
    backend: str
    admitted_at: float
    deadline: float
    limits: Limits
    queue_wait_s: float = 0.0
    run: CliRun | None = None
    start: StartSlot | None = None

    has_process: bool = False
    start_wait_s: float = 0.0  # for room (a spare standing down) and a start slot

    def took_spare(self) -> None:
        """The call runs in a spare: the pool's process became this call's."""
        self.has_process = True
        self.supervisor._procs += 1

    async def cold_start(self) -> None:
        """About to spawn (no spare taken): make room among the processes (a spare stands
        down if need be), then take a start slot."""
        t0 = time.monotonic()
        await self.supervisor.make_room()
        self.has_process = True
        self.supervisor._procs += 1
        self.start = await self.supervisor.start_slot()
        self.start_wait_s = time.monotonic() - t0

    def track(self, run: CliRun) -> None:
        """Register the started run, so shutdown can kill it."""
        self.run = run
        run.stats.queue_wait_s = self.queue_wait_s
        sup = self.supervisor
        sup._running.add(run)
        sup.peak_processes = max(sup.peak_processes, sup.processes())
        if self.start is not None and run.proc.pid is not None:
            self.start.watch(run.proc.pid, lambda: run.stats.first_byte_s is not None)
        if self.supervisor._closing:  # shutdown began while it was spawning: missed by it
            run.stats.killed = "shutdown"
            raise ShuttingDown()


@dataclass
class _Waiter:
    backend: str
    future: asyncio.Future[None]
    since: float


@dataclass
class Supervisor:
    """Call slots (``bounds.max_processes``, per-backend caps), a bounded FIFO queue, start
    slots, the process count with spares, and every run (for shutdown)."""

    bounds: Bounds
    max_queue: int
    limits: Limits = field(default_factory=Limits)
    retry_after_s: int = 2
    _running: set[CliRun] = field(default_factory=set)
    _calls: Counter[str] = field(default_factory=Counter)  # admitted calls per backend
    _procs: int = 0  # admitted calls with a process (spawned, or room made for one)
    _queue: deque[_Waiter] = field(default_factory=deque)
    _login_waiting: int = 0  # calls waiting for their login's refresh (``queued``)
    _starting: int = 0
    _start_queue: deque[asyncio.Future[None]] = field(default_factory=deque)
    _closing: bool = False
    draining: bool = False  # stopping: running calls go on; queued and new ones get 503
    spares: Callable[[], int] = lambda: 0
    """The pool's processes (ready, starting, being killed)."""
    stand_down: Callable[[], Awaitable[bool]] | None = None
    """Kill one spare to make room (the pool's); False when it has none."""
    room_freed: Callable[[], None] = lambda: None
    """Called when a call slot or a start slot is released (the pool refills then)."""
    peak_processes: int = 0

    @property
    def max_concurrency(self) -> int:
        return self.bounds.max_processes

    @property
    def running(self) -> int:
        """Calls holding a slot, their CLI started or not (what a drain waits for)."""
        return sum(self._calls.values())

    @property
    def waiting(self) -> int:
        """Calls queued for a slot, and calls waiting for their login's refresh."""
        return len(self._queue) + self._login_waiting

    @property
    def starting(self) -> int:
        """Start slots held (cold spawns and spare refills still starting)."""
        return self._starting

    @property
    def closing(self) -> bool:
        return self._closing

    def processes(self) -> int:
        """CLI processes alive (or about to be): calls' processes and spares."""
        return self._procs + self.spares()

    def spare_room(self) -> bool:
        """May a spare start now? Only into room no call needs, nor will soon: every
        admitted call keeps room for its own process."""
        return (
            not self._closing
            and not self.draining
            and not self._queue
            and self.running + self.spares() < self.bounds.max_processes
            and self._starting < self.bounds.max_starting
            and not self._start_queue
        )

    def status(self) -> dict[str, object]:
        now = time.monotonic()
        return {
            "bounds": self.bounds.describe(),
            "running": self.running,
            "running_by_backend": {b: n for b, n in self._calls.items() if n},
            "starting": self._starting,
            "processes": self.processes(),
            "peak_processes": self.peak_processes,
            "queue": {
                "waiting": len(self._queue),
                "max_queue": self.max_queue,
                "oldest_wait_s": round(now - self._queue[0].since, 3) if self._queue else 0.0,
                "queue_timeout_s": self.limits.queue_timeout_s,
            },
        }

    # ------------------------------------------------------------------ calls

    def _can_admit(self, backend: str) -> bool:
        cap = self.bounds.per_backend.get(backend)
        return self.running < self.bounds.max_processes and (
            cap is None or self._calls[backend] < cap
        )

    def _dispatch(self) -> None:
        """Admit queued calls in arrival order; a call whose backend is at its cap lets the
        ones behind it (other backends) pass."""
        for waiter in list(self._queue):
            if waiter.future.done():
                continue
            if self._can_admit(waiter.backend):
                self._queue.remove(waiter)
                self._calls[waiter.backend] += 1
                waiter.future.set_result(None)

    def drain(self) -> None:
        """Stop taking calls (SIGTERM): running calls go on; every queued one and every new
        one gets 503 with Retry-After at once, instead of waiting out the drain to be
        refused (or to start at its end and be killed)."""
        self.draining = True
        self._refuse_queued()

    def _refuse_queued(self) -> None:
        """Every queued call leaves the queue with 503 (``admit`` sees its future cancelled)."""
        for waiter in list(self._queue):
            if not waiter.future.done():
                waiter.future.cancel()

    @contextlib.asynccontextmanager
    async def admit(
        self, backend: str = "", budget: CallBudget | None = None
    ) -> AsyncIterator[Slot]:
        """Wait for a slot (bounded queue, ``queue_timeout_s``); released when the block ends."""
        if self._closing or self.draining:
            raise ShuttingDown(self.retry_after_s)
        budget = budget or self.limits.budget(stream=False)
        started = time.monotonic()
        if self._queue or not self._can_admit(backend):
            if self.waiting >= self.max_queue:  # login waiters count (``queued``)
                raise self._busy("all CLI slots are busy and the wait queue is full")
            waiter = _Waiter(backend, asyncio.get_running_loop().create_future(), started)
            self._queue.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter.future), budget.queue_limit_s())
            except BaseException as exc:
                stopped = waiter.future.cancelled()  # by drain() or shutdown()
                if waiter.future.done() and not stopped:
                    self._release(backend)  # admitted just as it gave up
                else:
                    waiter.future.cancel()
                    with contextlib.suppress(ValueError):
                        self._queue.remove(waiter)
                if stopped and (self._closing or self.draining):
                    raise ShuttingDown(self.retry_after_s) from None
                if isinstance(exc, TimeoutError):
                    waited = time.monotonic() - started
                    raise self._busy(
                        f"no CLI slot became free within {waited:.3g} s (queue_timeout_s)"
                    ) from None
                raise
        else:
            self._calls[backend] += 1
        admitted = time.monotonic()
        deadline, limits = budget.deadline(admitted)
        slot = Slot(self, backend, admitted, deadline, limits, admitted - started)
        try:
            if self._closing:  # shut down while this request waited in the queue
                raise ShuttingDown(self.retry_after_s)
            yield slot
        finally:
            if slot.start is not None:
                slot.start.release()
            ending = slot.run.ending if slot.run is not None else None
            if ending is not None and not ending.done():
                ending.add_done_callback(lambda _: self._leave(slot))
            else:
                self._leave(slot)

    def _leave(self, slot: Slot) -> None:
        """A call is over and its tree reaped: its slot, its process and its run are free.
        A call cancelled while its tree was being killed leaves that kill running (shielded,
        ``CliRun.close``): until it is reaped the tree is still a process under the bound,
        its slot still taken (a drain waits for it) and its run still listed (shutdown waits
        for it)."""
        if slot.run is not None:
            self._running.discard(slot.run)
        if slot.has_process:
            self._procs -= 1
        self._release(slot.backend)

    def _release(self, backend: str) -> None:
        self._calls[backend] -= 1
        self._dispatch()
        self.room_freed()

    @contextlib.contextmanager
    def queued(self) -> Iterator[None]:
        """A call that waits before ``admit`` (for its login's refresh: ``logins.py``) counts
        as queued: the queue bound, ``/health`` and the drain on stop see it."""
        if self._closing or self.draining:
            raise ShuttingDown(self.retry_after_s)
        if self.waiting >= self.max_queue:
            raise self._busy("the wait queue is full")
        self._login_waiting += 1
        try:
            yield
        finally:
            self._login_waiting -= 1

    def _busy(self, message: str) -> SlotsBusy:
        return SlotsBusy(
            f"{message} ({self.running} running of {self.bounds.max_processes}, "
            f"{self.waiting} queued); retry later",
            self.retry_after_s,
        )

    # ------------------------------------------------------------------ processes

    async def make_room(self) -> None:
        """An admitted call is about to spawn: while that would put the processes above the
        bound, a spare stands down (killed and reaped first)."""
        while self.processes() + 1 > self.bounds.max_processes and self.stand_down is not None:
            if not await self.stand_down():
                break

    async def start_slot(self) -> StartSlot:
        """One of ``max_starting`` start slots (calls queue for one in order)."""
        if self._starting >= self.bounds.max_starting or self._start_queue:
            future = asyncio.get_running_loop().create_future()
            self._start_queue.append(future)
            try:
                await future
            except BaseException:
                if future.done() and not future.cancelled():
                    self._start_done()  # handed over just as it was cancelled
                else:
                    with contextlib.suppress(ValueError):
                        self._start_queue.remove(future)
                raise
        else:
            self._starting += 1
        return StartSlot(self)

    def try_start_slot(self) -> StartSlot | None:
        """A start slot for a spare, only when no call waits for one."""
        if self._starting >= self.bounds.max_starting or self._start_queue:
            return None
        self._starting += 1
        return StartSlot(self)

    def _start_done(self) -> None:
        while self._start_queue:
            future = self._start_queue.popleft()
            if not future.done():
                future.set_result(None)  # handed over: _starting stays
                return
        self._starting -= 1
        self.room_freed()

    async def shutdown(self) -> None:
        """Kill every tree still running; queued calls get 503 at once. Used on server stop."""
        self._closing = True
        self._refuse_queued()
        runs = list(self._running)
        for r in runs:
            if r.ending is None:
                r.stats.killed = "shutdown"
        await asyncio.gather(*(r.close() for r in runs), return_exceptions=True)
