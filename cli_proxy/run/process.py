"""Run, watch and reliably kill one CLI process.

Each CLI runs in its own session (process group) with the prompt on stdin, so the whole tree
can be signalled at once. A run is only over once its process has been reaped and its work
dir removed (``started``), so a freed slot never hides a live child. How the process is
wrapped at exec is ``containment.py``'s job; how many run at once is ``supervisor.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import psutil

from cli_proxy.failures import CliFailed, CliTimeout, FailureKind, ShuttingDown
from cli_proxy.plan.spec import LaunchSpec
from cli_proxy.run.containment import Launcher, Prepared, reaped, spawn
from cli_proxy.run.limits import Limits
from cli_proxy.run.proctree import tree


class Handover(Protocol):
    """A pre-started process handed to a call (``pool.Spare``)."""

    proc: asyncio.subprocess.Process
    prepared: Prepared

    async def handed_over(self) -> bytes:
        """What it wrote to stderr while it waited; stops the spare's own stderr reader."""
        ...

    def starting(self) -> bool:
        """Still starting: the call waits for the rest of its start."""
        ...


_STDERR_KEEP = 64 * 1024
_POLL_S = 0.05
_PIPE_GRACE_S = 1.0  # after the CLI exited: how long its pipes may stay open
LINGER_GRACE_S = 2.0  # after the CLI's result: how long it may take to exit
FAILED_GRACE_S = 0.2  # after a result that says the call failed


@dataclass(slots=True)
class RunStats:
    pid: int | None = None
    queue_wait_s: float = 0.0
    first_byte_s: float | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    killed: str | None = None
    stderr: str = ""
    warm: bool = False  # served by a pre-started process
    warming: bool = False  # ... taken while it was still starting
    start_s: float = 0.0  # spawning it, or taking over a spare


class CliRun:
    """One running CLI process: stdout lines as they arrive, then the exit code."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        deadline: float,
        limits: Limits,
        warm: bool = False,
    ) -> None:
        self.proc = proc
        self.deadline = deadline
        self.limits = limits
        self.stats = RunStats(pid=proc.pid, warm=warm)
        self._stderr = bytearray()
        self._started = time.monotonic()
        self.last_output = self._started  # stdout or stderr: what the idle timeout watches
        self._read_chars: int | None = None  # bytes the tree has read (a silent CLI's pulse)
        self._tasks: list[asyncio.Task[None]] = []
        self._watcher: asyncio.Task[None] | None = None
        # the kill and reap of its tree once begun (``close``): a supervisor shutting down
        # waits for it, even when the call that began it was cancelled meanwhile
        self.ending: asyncio.Task[None] | None = None
        self._stdin_queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._stdin_closed = False

    def feed(self, stdin_data: bytes, keep_open: bool = False) -> None:
        """Write the input while stdout and stderr are read; then close stdin, unless
        ``keep_open`` (a duplex protocol: ``send`` writes more, ``close_stdin`` ends it)."""
        self._stdin_queue.put_nowait(stdin_data)
        if not keep_open:
            self.close_stdin()
        self._tasks.append(asyncio.create_task(self._write_stdin()))
        self._tasks.append(asyncio.create_task(self._drain_stderr()))
        self._watcher = asyncio.create_task(self._watch_exit())

    def send(self, data: bytes) -> None:
        """Queue more input, written in order after what came before (duplex protocols)."""
        if data and not self._stdin_closed:
            self._stdin_queue.put_nowait(data)

    def close_stdin(self) -> None:
        """No more input: stdin is closed once what is queued has been written."""
        if not self._stdin_closed:
            self._stdin_closed = True
            self._stdin_queue.put_nowait(None)

    async def _watch_exit(self) -> None:
        """Once the CLI itself has exited, whatever is left in its process group is a
        leftover (a child it did not wait for). Such a child inherits the CLI's pipes and
        would hold the answer open until the idle timeout, so it is killed; pipes still
        held after that (by something that left the group) are closed on our side."""
        # polled: proc.wait() would also wait for the pipes a leftover child may hold
        while self.proc.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(_POLL_S)
        await sweep_group(self.proc.pid, self.limits.kill_grace_s)
        await asyncio.sleep(_PIPE_GRACE_S)
        _close_pipes(self.proc)

    async def _write_stdin(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while (data := await self._stdin_queue.get()) is not None:
                stdin.write(data)
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI exited early; its exit code and stderr tell why
        finally:
            with contextlib.suppress(Exception):
                stdin.close()

    async def _drain_stderr(self) -> None:
        stream = self.proc.stderr
        if stream is None:  # merged into stdout: the parser reads it
            return
        while chunk := await stream.read(65536):
            self.last_output = time.monotonic()  # progress on stderr is output too
            self._stderr += chunk
            if len(self._stderr) > 2 * _STDERR_KEEP:
                del self._stderr[:-_STDERR_KEEP]

    async def lines(self, wake: Callable[[], float | None] | None = None) -> AsyncIterator[bytes]:
        """Yield stdout lines; raise ``CliTimeout`` at the call's deadline or after
        ``idle_timeout_s`` without any sign of work. Every stdout line counts (also events
        the parser ignores: thinking, progress, pings), stderr output, and bytes the CLI's
        tree reads (its model's stream arriving while it prints nothing), looked at every
        half idle period: silence, not length, ends a working call. ``wake``: how long the
        reader may wait now before it yields ``b""`` instead (a parser's timer)."""
        stdout = self.proc.stdout
        assert stdout is not None
        idle_s = self.limits.idle_timeout_s
        every = idle_s / 2
        next_look, last_look = self._started + every, self._started
        pending: asyncio.Future[bytes] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(stdout.readline())
                now = time.monotonic()
                wait = min(next_look, self.last_output + idle_s, self.deadline) - now
                tick = wake() if wake is not None else None
                timer = tick is not None and tick < wait
                if tick is not None and timer:
                    wait = tick
                done, _ = await asyncio.wait({pending}, timeout=max(wait, 0.0))
                if not done:
                    if timer:  # the parser's timer, not a time-out (the read goes on)
                        yield b""
                        continue
                    now = time.monotonic()
                    idle = now - self.last_output >= idle_s
                    if now < self.deadline and (now >= next_look or idle):
                        if await self._received():  # it read since the last look
                            self.last_output = max(self.last_output, last_look)
                        last_look, next_look = now, now + every
                    if now < self.deadline and now - self.last_output < idle_s:
                        continue
                    total = now >= self.deadline
                    self.stats.killed = "timeout" if total else "idle_timeout"
                    await self.kill()
                    what = (
                        f"the CLI did not finish within {self.limits.timeout_s:g} s "
                        f"({self.limits.cap_reason})"
                        if total
                        else f"the CLI printed nothing for {idle_s:g} s (idle_timeout_s) and "
                        "received nothing from its model"
                    )
                    raise CliTimeout(what)
                task, pending = pending, None
                try:
                    line = task.result()
                except ValueError as exc:  # a line beyond the stream limit
                    self.stats.killed = "oversized_output"
                    await self.kill()
                    raise CliFailed(
                        FailureKind.OVERSIZED_OUTPUT, f"the CLI printed an oversized line: {exc}"
                    ) from None
                if not line:
                    if self.stats.killed == "shutdown":
                        raise ShuttingDown()
                    return
                self.last_output = time.monotonic()
                if self.stats.first_byte_s is None:
                    self.stats.first_byte_s = self.last_output - self._started
                yield line
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending

    async def _received(self) -> bool:
        """Has the CLI's tree read anything since the last look? Some CLIs print nothing
        while their model thinks (gemini stream-json, codex exec --json: thought and
        reasoning events arrive, nothing is printed; tests/data/real-cli/thinking-*.json):
        bytes still arriving mean it is working, not hung."""
        read = await asyncio.to_thread(tree_read_chars, self.proc.pid)
        grew = read is not None and self._read_chars is not None and read > self._read_chars
        self._read_chars = read
        return grew

    async def wait(self, grace_s: float | None = None) -> int:
        """Exit code once stdout is done; stderr is fully read by then.

        ``grace_s``: the CLI already gave its result; if it has not exited by then it is
        killed ("lingered") and the answer stands. Otherwise a CLI that closed its output but
        does not exit gets the idle timeout, not the rest of the total one."""
        self.close_stdin()  # a duplex CLI exits once its input ends
        remaining = max(self.deadline - time.monotonic(), 0.0)
        limit = grace_s if grace_s is not None else min(self.limits.idle_timeout_s, remaining)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout=max(limit, 0.05))
        except TimeoutError:
            if grace_s is not None:
                self.stats.killed = "lingered"
                await self.kill()
                await self._join_io()
                self.stats.exit_code = self.proc.returncode
                return self.proc.returncode if self.proc.returncode is not None else -9
            self.stats.killed = "timeout"
            await self.kill()
            raise CliTimeout("the CLI closed its output but did not exit") from None
        await self._join_io()
        self.stats.exit_code = code
        return code

    @property
    def stderr(self) -> str:
        return self._stderr[-_STDERR_KEEP:].decode("utf-8", "replace")

    async def _join_io(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 5)

    async def kill(self) -> None:
        """SIGTERM the whole tree, SIGKILL what is left after the grace period, reap."""
        await kill_tree(self.proc, self.limits.kill_grace_s)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _end(self) -> None:
        if self.proc.returncode is None:
            await self.kill()
        else:
            await sweep_group(self.proc.pid, self.limits.kill_grace_s)
        if self.proc.returncode is not None:  # reaped: nothing more is read or written
            _close_pipes(self.proc)

    async def close(self) -> None:
        """Always called: kills a still-running tree and reaps it, or the leftovers of a
        finished one, then closes our ends of its pipes. A pipe whose reading was paused (a
        client that stopped reading) never sees its end of file: left open, its transport
        outlived the call and was closed by the garbage collector, on a loop that may be gone
        (CPython 3.11.7 then failed the next ``ast.parse`` of the thread: pytest crashed)."""
        try:
            if self.proc.returncode is None and self.stats.killed is None:
                self.stats.killed = "cancelled"
            if self.ending is None:  # one end, whoever asks (the call, or a shutdown)
                self.ending = asyncio.ensure_future(self._end())
            await asyncio.shield(self.ending)  # whole even if this call is cancelled again
        finally:
            if self._watcher is not None:
                self._watcher.cancel()
        self.stats.duration_s = time.monotonic() - self._started
        self.stats.stderr = self.stderr
        if self.proc.returncode is not None and self.stats.exit_code is None:
            self.stats.exit_code = self.proc.returncode


def tree_read_chars(pid: int) -> int | None:
    """Bytes read so far (any file, pipe or socket: /proc/PID/io rchar) by ``pid`` and its
    live descendants; None when it cannot be read."""
    try:
        procs = tree(pid)
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error, AttributeError):
            total += p.io_counters().read_chars
    return total


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live processes in process group ``pgid`` (a /proc scan: only when it is non-empty)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return []
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
    return members


def _survivors(pgid: int, procs: Sequence[psutil.Process]) -> list[psutil.Process]:
    found = {p.pid: p for p in procs if _alive(p)}
    for p in _group_members(pgid):
        found.setdefault(p.pid, p)
    return list(found.values())


def _wait_gone(pgid: int, procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := _survivors(pgid, procs)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


async def _terminate(pgid: int, procs: Sequence[psutil.Process], grace_s: float) -> None:
    """SIGTERM the group and ``procs``, SIGKILL whatever is still alive after the grace."""
    _signal_all(pgid, procs, signal.SIGTERM)
    alive = await asyncio.to_thread(_wait_gone, pgid, procs, grace_s)
    if alive:
        _signal_all(pgid, alive, signal.SIGKILL)


async def kill_tree(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """Kill the CLI, its process group and every descendant found; wait until it is reaped."""
    procs: list[psutil.Process] = []
    if proc.returncode is None:  # not reaped yet: its pid cannot belong to anyone else
        with contextlib.suppress(psutil.Error):
            procs = tree(proc.pid)
    await _terminate(proc.pid, procs, grace_s)
    deadline = time.monotonic() + max(grace_s, 5.0)
    # not proc.wait(): that also waits for the pipes, which an escaped child may hold
    while proc.returncode is None and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def sweep_group(pgid: int, grace_s: float) -> None:
    """Kill what is left in an exited CLI's process group (children it left running).

    The group id stays reserved while any member lives, so it cannot name someone else's
    group; once empty this is one failing ``killpg``.
    """
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return
    await _terminate(pgid, [], grace_s)


def _close_pipes(proc: asyncio.subprocess.Process) -> None:
    transport = getattr(proc, "_transport", None)
    if transport is None:
        return
    for fd in (0, 1, 2):
        pipe = transport.get_pipe_transport(fd)
        if pipe is not None and not pipe.is_closing():
            pipe.close()


def _signal_all(pgid: int, procs: Sequence[psutil.Process], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)  # the CLI's own group, including children we have not seen
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


@contextlib.asynccontextmanager
async def started(
    spec: LaunchSpec,
    launcher: Launcher,
    limits: Limits,
    deadline: float,
    spare: Handover | None = None,
) -> AsyncIterator[CliRun]:
    """The CLI of ``spec``, contained, with a fresh private work dir: the pre-started
    ``spare`` if given, else a new process. On exit the tree is killed (if still running) and
    reaped, then the work dir is removed, whatever happened (a spare is the call's from the
    moment it is taken: a call cancelled during its hand-over ends it too)."""
    begun = time.monotonic()
    if spare is None:
        proc, prepared = await spawn(spec, launcher, limits.line_limit)
        run = CliRun(proc, deadline, limits)
    else:
        proc, prepared = spare.proc, spare.prepared
        run = CliRun(proc, deadline, limits, warm=True)
        run.stats.warming = spare.starting()
    try:
        if spare is not None:
            run._stderr += await spare.handed_over()
        run.stats.start_s = time.monotonic() - begun
        yield run
    finally:
        try:
            await run.close()
        finally:  # even if cancelled again while closing: the kill itself is shielded
            prepared.cleanup()
            await asyncio.shield(reaped(proc.pid))
