"""Spawn, watch and reliably kill CLI processes.

Each CLI runs in its own session (process group) with the prompt on stdin, so
the whole tree can be signalled at once; a supervisor caps how many run at a
time and kills every tree it started on shutdown. A run is only over once its
process has been reaped, so a freed slot never hides a live child.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .errors import APIError

_STDOUT_LIMIT = 64 * 1024 * 1024  # one stream-json line may carry a whole long answer
_STDERR_KEEP = 64 * 1024
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05
_PIPE_GRACE_S = 1.0  # after the CLI exited: how long its pipes may stay open


def _load_prctl() -> Callable[..., int] | None:
    if sys.platform != "linux":
        return None
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


# Resolved once in the parent: the code between fork and exec must not dlopen (other
# threads may hold the loader lock at fork time).
_PRCTL = _load_prctl()


def _die_with(parent: int) -> Callable[[], None] | None:
    """Linux: the CLI gets SIGKILL if the gateway dies, even by ``kill -9``."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the gateway died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


@dataclass(slots=True)
class Limits:
    timeout_s: float = 300.0
    idle_timeout_s: float = 120.0
    kill_grace_s: float = 3.0


@dataclass(slots=True)
class RunStats:
    pid: int | None = None
    queue_wait_s: float = 0.0
    first_byte_s: float | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    killed: str | None = None
    stderr: str = ""


class CliRun:
    """One running CLI process: stdout lines as they arrive, then the exit code."""

    def __init__(self, proc: asyncio.subprocess.Process, deadline: float, limits: Limits) -> None:
        self.proc = proc
        self.deadline = deadline
        self.limits = limits
        self.stats = RunStats(pid=proc.pid)
        self._stderr = bytearray()
        self._started = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self._watcher: asyncio.Task[None] | None = None

    def _start_io(self, stdin_data: bytes) -> None:
        self._tasks.append(asyncio.create_task(self._feed_stdin(stdin_data)))
        self._tasks.append(asyncio.create_task(self._drain_stderr()))
        self._watcher = asyncio.create_task(self._watch_exit())

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

    async def _feed_stdin(self, data: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI exited early; its exit code and stderr tell why
        finally:
            with contextlib.suppress(Exception):
                stdin.close()

    async def _drain_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        while chunk := await stream.read(65536):
            self._stderr += chunk
            if len(self._stderr) > 2 * _STDERR_KEEP:
                del self._stderr[:-_STDERR_KEEP]

    async def lines(self) -> AsyncIterator[bytes]:
        """Yield stdout lines; raise APIError(504) on the total or idle timeout."""
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            remaining = self.deadline - time.monotonic()
            wait = min(self.limits.idle_timeout_s, remaining)
            try:
                line = await asyncio.wait_for(stdout.readline(), timeout=max(wait, 0.0))
            except TimeoutError:
                total = remaining <= self.limits.idle_timeout_s
                self.stats.killed = "timeout" if total else "idle_timeout"
                await self.kill()
                what = (
                    f"the CLI did not finish within {self.limits.timeout_s:g} s"
                    if total
                    else f"the CLI printed nothing for {self.limits.idle_timeout_s:g} s"
                )
                raise APIError(504, what, code="cli_timeout") from None
            except ValueError as exc:  # a line beyond the stream limit
                self.stats.killed = "oversized_output"
                await self.kill()
                raise APIError(502, f"the CLI printed an oversized line: {exc}") from None
            if not line:
                if self.stats.killed == "shutdown":
                    raise APIError(503, "the gateway is shutting down", code="shutting_down")
                return
            if self.stats.first_byte_s is None:
                self.stats.first_byte_s = time.monotonic() - self._started
            yield line

    async def wait(self) -> int:
        """Exit code once stdout is done; stderr is fully read by then."""
        remaining = max(self.deadline - time.monotonic(), 0.0)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout=max(remaining, 1.0))
        except TimeoutError:
            self.stats.killed = "timeout"
            await self.kill()
            raise APIError(504, "the CLI closed its output but did not exit") from None
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

    async def close(self) -> None:
        """Always called: kills a still-running tree and reaps it, or the leftovers of a
        finished one."""
        try:
            if self.proc.returncode is None:
                if self.stats.killed is None:
                    self.stats.killed = "cancelled"
                await asyncio.shield(self.kill())
            else:
                await asyncio.shield(sweep_group(self.proc.pid, self.limits.kill_grace_s))
        finally:
            if self._watcher is not None:
                self._watcher.cancel()
        self.stats.duration_s = time.monotonic() - self._started
        self.stats.stderr = self.stderr
        if self.proc.returncode is not None and self.stats.exit_code is None:
            self.stats.exit_code = self.proc.returncode


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
        try:
            root = psutil.Process(proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            pass
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


def _remove_workdir(path: str) -> None:
    """Usually empty: one rmdir; rmtree (10x the cost, profiled) only when something is left."""
    try:
        os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


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

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return self._waiting

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._sem

    @contextlib.asynccontextmanager
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdin: bytes,
        prepare: Callable[[Path], None] | None = None,
    ) -> AsyncIterator[CliRun]:
        """Wait for a slot, start the CLI in a fresh empty directory, always clean up."""
        if self._closing:
            raise APIError(503, "the gateway is shutting down", code="shutting_down")
        started = time.monotonic()
        deadline = started + self.limits.timeout_s
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
        run: CliRun | None = None
        cwd = tempfile.mkdtemp(prefix="cli-proxy-")
        try:
            if self._closing:  # shut down while this request waited in the queue
                raise APIError(503, "the gateway is shutting down", code="shutting_down")
            if prepare is not None:
                prepare(Path(cwd))
            # TMPDIR too: CLIs drop error reports there, and those contain the prompt
            proc = await _spawn(argv, {**env, "TMPDIR": cwd}, cwd)
            run = CliRun(proc, deadline, self.limits)
            run.stats.queue_wait_s = time.monotonic() - started
            self._running.add(run)
            if self._closing:  # shutdown began while it was spawning: missed by shutdown()
                run.stats.killed = "shutdown"
                raise APIError(503, "the gateway is shutting down", code="shutting_down")
            run._start_io(stdin)
            yield run
        finally:
            try:
                if run is not None:
                    await run.close()
            finally:  # even if cancelled again while closing: the kill itself is shielded
                if run is not None:
                    self._running.discard(run)
                sem.release()
                _remove_workdir(cwd)

    def _busy(self, message: str) -> APIError:
        return APIError(
            429,
            f"{message} ({self.max_concurrency} running, {self.max_queue} queued); retry later",
            code="too_many_concurrent_requests",
            headers={"Retry-After": str(self.retry_after_s)},
        )

    async def shutdown(self) -> None:
        """Kill every tree still running; used on server stop."""
        self._closing = True
        runs = list(self._running)
        for r in runs:
            r.stats.killed = "shutdown"
        await asyncio.gather(*(r.kill() for r in runs), return_exceptions=True)


# ``setpriv --pdeathsig`` (util-linux, on every Debian-like system) sets PR_SET_PDEATHSIG
# and execs the CLI. Preferred over a preexec_fn, which forces a full fork() of the gateway
# instead of vfork(): measured ~5 ms more per call (docs/performance.md).
_SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def _launch(
    argv: Sequence[str], env: Mapping[str, str]
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to exec and the preexec hook (if any) that make the CLI die with us."""
    binary = argv[0]
    if os.sep not in binary:
        found = shutil.which(binary, path=env.get("PATH", os.defpath))
        if found is None:
            raise FileNotFoundError(binary)
        binary = found
    elif not os.path.exists(binary):
        raise FileNotFoundError(binary)
    elif not os.access(binary, os.X_OK):
        raise PermissionError(binary)
    if _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", binary, *argv[1:]], None
    return [binary, *argv[1:]], _die_with(os.getpid())


async def _spawn(
    argv: Sequence[str], env: Mapping[str, str], cwd: str
) -> asyncio.subprocess.Process:
    try:
        command, preexec = _launch(argv, env)
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=preexec,
            limit=_STDOUT_LIMIT,
        )
    except FileNotFoundError:
        raise APIError(
            503,
            f"CLI binary not found: {argv[0]!r}; install it or set its path "
            "(see docs/configuration.md)",
            code="cli_not_found",
        ) from None
    except PermissionError:
        raise APIError(
            503, f"CLI binary is not executable: {argv[0]!r}", code="cli_not_found"
        ) from None
