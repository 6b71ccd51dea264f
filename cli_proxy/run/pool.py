"""Warm starts: CLI processes started before the request, each serving exactly one call.

A spare is a CLI process started from exactly the ``LaunchSpec`` a call would use (argv,
environment, containment, private work dir), waiting for its prompt: claude in stream-json
input mode waits with no time limit; gemini (ACP) gets its ``initialize`` and ``session/new``
requests at once (the spec's ``warm_prefix``, which every call's stdin starts with, warm or
cold) and holds its answers, so its session is open when the call's prompt comes. A call whose
spec matches a ready spare takes it and writes the rest of its stdin; otherwise it cold-starts.
Either way the process serves that one call and is gone: no ``--resume``, no reuse.

Policy: one spare per recently used spec by default (started after a call with that spec,
or at start-up for configured models), bounded per spec and in total; spares older than
``max_age_s`` are replaced (a login can expire). Spares count as processes under the
supervisor's bound (``limits.py``): one starts only into room no call needs (nobody
queued, a start slot free), and a call that needs the room makes one stand down
(``stand_down``), so spares never push a call out or the process count over the bound.
A spare that died or printed anything before its prompt is discarded, never handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from cli_proxy.logs import log
from cli_proxy.plan.spec import LaunchSpec
from cli_proxy.run.containment import Launcher, Prepared, reaped, spawn
from cli_proxy.run.process import kill_tree
from cli_proxy.run.supervisor import StartSlot, Supervisor


@dataclass(frozen=True, slots=True)
class PoolSettings:
    enabled: bool = True
    max_per_key: int = 1
    max_total: int = 4
    max_age_s: float = 900.0
    key_idle_s: float = 1800.0  # a spec unused this long keeps no spare


@dataclass(eq=False)
class Spare:
    """A started CLI waiting for its prompt."""

    spec: LaunchSpec
    proc: asyncio.subprocess.Process
    prepared: Prepared
    born: float
    start: StartSlot | None = None  # held until its start is over (``limits.start_over``)
    stderr: bytearray = field(default_factory=bytearray)
    _drain: asyncio.Task[None] | None = None

    def starting(self) -> bool:
        """Still starting (its CPU busy since its spawn): a call that takes it now waits for
        the rest of that start."""
        return self.start is not None and self.start.held

    def start_drain(self) -> None:
        self._drain = asyncio.create_task(self._read_stderr())

    async def _read_stderr(self) -> None:
        if self.proc.stderr is None:  # merged into stdout
            return
        while chunk := await self.proc.stderr.read(65536):
            self.stderr += chunk[: max(0, 65536 - len(self.stderr))]

    def usable(self) -> bool:
        """Alive, and silent on stdout: a CLI that printed before its prompt is not trusted.
        With stderr merged into stdout, a banner (codex: "Reading prompt from stdin...") is
        allowed, not a JSON event; it stays in the stream for the parser."""
        stdout = self.proc.stdout
        if self.proc.returncode is not None or stdout is None or stdout.at_eof():
            return False
        # StreamReader has no public peek; its buffer holds what arrived and was not read
        pending = bytes(getattr(stdout, "_buffer", b""))
        if self.spec.duplex:  # its answers to the warm prefix (a session opened): the parser's
            return True
        if self.spec.merge_stderr:
            return not any(line.lstrip().startswith(b"{") for line in pending.splitlines())
        return not pending

    async def handed_over(self) -> bytes:
        """Stop reading stderr here (the run reads it from now on); what came so far."""
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
        return bytes(self.stderr)


class WarmPool:
    """Spares per launch spec; see the module docstring."""

    def __init__(self, launcher: Launcher, supervisor: Supervisor, settings: PoolSettings) -> None:
        self.launcher = launcher
        self.supervisor = supervisor
        self.settings = settings
        self._spares: dict[LaunchSpec, list[Spare]] = {}
        self._starting: dict[LaunchSpec, int] = {}
        self._recent: OrderedDict[LaunchSpec, float] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False
        self._dying = 0  # spares being killed: still processes until reaped
        self._changed = asyncio.Event()  # a start or a kill finished
        self.served_warm = 0  # spares whose start was over
        self.served_warming = 0  # spares taken while still starting
        self.served_cold = 0
        self.discarded = 0
        self.stood_down = 0
        supervisor.spares = self.processes
        supervisor.stand_down = self.stand_down
        supervisor.room_freed = self.refill

    # ------------------------------------------------------------------ calls

    def take(self, spec: LaunchSpec, born_after: float = 0.0) -> Spare | None:
        """A ready spare for ``spec`` (removed from the pool), or None: start cold. A spare
        born before ``born_after`` (its login changed since: it may hold old tokens) is
        discarded."""
        spares = self._spares.get(spec, [])
        while spares:
            spare = spares.pop(0)
            age = time.monotonic() - spare.born
            if spare.usable() and age < self.settings.max_age_s and spare.born >= born_after:
                if spare.starting():
                    self.served_warming += 1
                else:
                    self.served_warm += 1
                return spare
            self._discard(spare, "unusable")
        self.served_cold += 1
        return None

    def want(self, spec: LaunchSpec) -> None:
        """A call used ``spec``: keep a spare ready for the next one."""
        if not self.settings.enabled or self._closed:
            return
        self._recent[spec] = time.monotonic()
        self._recent.move_to_end(spec)
        self._schedule_fill()
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._recycle())

    def refill(self) -> None:
        """A slot was released: start the spares that waited for one."""
        if self.settings.enabled and not self._closed and self._recent:
            self._schedule_fill()

    def processes(self) -> int:
        """Spares alive: ready, starting, or being killed."""
        return self._count() + self._dying

    async def stand_down(self) -> bool:
        """Make room for a call: kill one spare (the least recently used spec's oldest) and
        wait until it is reaped; a spare still starting is waited for first. False when
        there is none."""
        while True:
            if self._dying:  # one is already going: its room comes when it is reaped
                await self._wait_change()
                return True
            for spec in self._recent_first(reverse=False):
                if self._spares.get(spec):
                    spare = self._spares[spec].pop(0)
                    self.stood_down += 1
                    log.debug("warm_spare_stood_down", backend=spec.backend)
                    await self._kill_counted(spare)
                    return True
            if not sum(self._starting.values()):
                return False
            await self._wait_change()

    def _recent_first(self, reverse: bool) -> list[LaunchSpec]:
        known = [s for s in self._spares if s not in self._recent]  # no longer wanted first
        return known + (list(reversed(self._recent)) if reverse else list(self._recent))

    async def _wait_change(self) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), 1.0)

    # ------------------------------------------------------------------ filling

    def _count(self, spec: LaunchSpec | None = None) -> int:
        if spec is not None:
            return len(self._spares.get(spec, [])) + self._starting.get(spec, 0)
        return sum(map(len, self._spares.values())) + sum(self._starting.values())

    def _schedule_fill(self) -> None:
        task = asyncio.create_task(self._fill())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fill(self) -> None:
        """Start spares for the most recently used specs, within the limits, while the
        supervisor has room no call needs (a spare must not take CPU or memory from calls)."""
        s = self.settings
        for spec in reversed(self._recent):
            while (
                not self._closed
                and self._count(spec) < s.max_per_key
                and self._count() < s.max_total
                and self.supervisor.spare_room()
            ):
                if not await self._start(spec):
                    break

    async def _start(self, spec: LaunchSpec) -> bool:
        """Start one spare; False when it could not be started (not retried in this fill)."""
        start = self.supervisor.try_start_slot()
        if start is None:  # calls are starting: refilled when a start slot frees
            return False
        self._starting[spec] = self._starting.get(spec, 0) + 1
        try:
            proc, prepared = await spawn(spec, self.launcher, self.supervisor.limits.line_limit)
        except Exception as exc:  # a call will cold-start and report it properly
            start.release()
            log.warning("warm_start_failed", backend=spec.backend, error=str(exc)[:200])
            self._starting[spec] -= 1
            self._changed.set()
            self._recent.pop(spec, None)  # do not retry a spec that cannot start
            return False
        start.watch(proc.pid, lambda: False)  # a spare prints nothing: until its CPU is idle
        spare = Spare(spec, proc, prepared, time.monotonic(), start)
        spare.start_drain()
        try:
            if spec.warm_prefix:
                assert proc.stdin is not None
                proc.stdin.write(spec.warm_prefix)
                await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self._discard(spare, "died at start")
            return False
        finally:
            self._starting[spec] -= 1
            self._changed.set()
        if self._closed:
            self._discard(spare, "pool closed")
            return False
        self._spares.setdefault(spec, []).append(spare)
        return True

    # ------------------------------------------------------------------ recycling

    async def _recycle(self) -> None:
        """Replace spares older than the maximum age; drop specs unused for long."""
        period = max(1.0, min(self.settings.max_age_s, self.settings.key_idle_s) / 4)
        while not self._closed:
            await asyncio.sleep(period)
            now = time.monotonic()
            for spec, at in list(self._recent.items()):
                if now - at > self.settings.key_idle_s:
                    del self._recent[spec]
            for spec, spares in list(self._spares.items()):
                for spare in list(spares):
                    if now - spare.born >= self.settings.max_age_s or spec not in self._recent:
                        spares.remove(spare)
                        self._discard(spare, "recycled")
            self._schedule_fill()

    def _discard(self, spare: Spare, why: str) -> None:
        self.discarded += 1
        log.debug("warm_spare_discarded", backend=spare.spec.backend, why=why)
        task = asyncio.create_task(self._kill_counted(spare))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _kill_counted(self, spare: Spare) -> None:
        """Kill a spare taken out of the pool; it counts as a process until reaped."""
        self._dying += 1
        task = asyncio.ensure_future(self._kill(spare))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._reaped)
        await asyncio.shield(task)

    def _reaped(self, _: object) -> None:
        self._dying -= 1
        self._changed.set()

    async def _kill(self, spare: Spare) -> None:
        await spare.handed_over()
        await kill_tree(spare.proc, self.supervisor.limits.kill_grace_s)
        spare.prepared.cleanup()
        await reaped(spare.proc.pid)

    # ------------------------------------------------------------------ lifecycle

    def ready(self) -> dict[str, int]:
        """Spares waiting, by backend."""
        ready: dict[str, int] = {}
        for spec, spares in self._spares.items():
            ready[spec.backend] = ready.get(spec.backend, 0) + len(spares)
        return ready

    def status(self) -> dict[str, object]:
        return {
            "enabled": self.settings.enabled,
            "ready": self.ready(),
            "starting": sum(self._starting.values()),
            "served_warm": self.served_warm,
            "served_warming": self.served_warming,
            "served_cold": self.served_cold,
            "discarded": self.discarded,
            "stood_down": self.stood_down,
        }

    async def close(self) -> None:
        """Kill every spare (shutdown); nothing new starts afterwards."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        for spares in self._spares.values():
            for spare in spares:
                self._discard(spare, "shutdown")
        self._spares.clear()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
