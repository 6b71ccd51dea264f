"""Containment: turn a ``LaunchSpec`` into a started CLI process in its own private work dir.

A launcher decides how the process is wrapped so that it cannot outlive the gateway; it is
chosen by name (``LAUNCHERS``), so a sandboxing launcher can replace the default without the
supervisor or the run code knowing how a process was started.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import signal
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .failures import CliMissing
from .plan import LaunchSpec

STDOUT_LIMIT = 64 * 1024 * 1024  # one stream-json line may carry a whole long answer
_PR_SET_PDEATHSIG = 1


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


def resolve_binary(binary: str, env: Mapping[str, str]) -> str:
    """The absolute path of the CLI binary, or ``CliMissing``."""
    if os.sep not in binary:
        found = shutil.which(binary, path=env.get("PATH", os.defpath))
        if found is None:
            raise CliMissing(binary)
        return found
    if not os.path.exists(binary):
        raise CliMissing(binary)
    if not os.access(binary, os.X_OK):
        raise CliMissing(binary, executable=True)
    return binary


@dataclass(frozen=True, slots=True)
class Command:
    """What to exec: argv, the hook to run between fork and exec (if any)."""

    argv: list[str]
    preexec: Callable[[], None] | None = None


class Launcher(ABC):
    """How a CLI process is wrapped at exec."""

    name: ClassVar[str]

    @abstractmethod
    def command(self, argv: Sequence[str], env: Mapping[str, str], workdir: Path) -> Command:
        """The command that runs ``argv`` (its binary already resolved) contained."""

    def describe(self) -> str:
        return self.name


class PdeathsigLauncher(Launcher):
    """The CLI gets SIGKILL when the gateway dies (``PR_SET_PDEATHSIG``).

    Through ``setpriv --pdeathsig`` (util-linux) where present: a preexec_fn forces a full
    fork() of the gateway instead of vfork(), measured ~5 ms more per call
    (docs/performance.md). Only the direct child gets the signal.
    """

    name = "pdeathsig"
    _setpriv = shutil.which("setpriv") if sys.platform == "linux" else None

    def command(self, argv: Sequence[str], env: Mapping[str, str], workdir: Path) -> Command:
        if self._setpriv is not None:
            return Command([self._setpriv, "--pdeathsig", "KILL", "--", *argv])
        return Command(list(argv), _die_with(os.getpid()))

    def describe(self) -> str:
        via = "setpriv" if self._setpriv else "preexec prctl"
        return f"{self.name} (PR_SET_PDEATHSIG via {via}; direct child only)"


LAUNCHERS: dict[str, type[Launcher]] = {"pdeathsig": PdeathsigLauncher}


def make_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]()
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}; known: {', '.join(LAUNCHERS)}") from None


def make_workdir(spec: LaunchSpec) -> Path:
    """A fresh private directory holding only the backend's work-dir files."""
    path = Path(tempfile.mkdtemp(prefix="cli-proxy-"))
    for rel, content in spec.workdir_files:
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return path


def remove_workdir(path: Path) -> None:
    """Usually empty: one rmdir; rmtree (10x the cost, profiled) only when something is left."""
    try:
        os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


async def spawn(spec: LaunchSpec, launcher: Launcher, workdir: Path) -> asyncio.subprocess.Process:
    """Start the CLI of ``spec`` in ``workdir``, in a new session (so its group can be killed)."""
    env = spec.environ
    binary = resolve_binary(spec.argv[0], env)
    # TMPDIR too: CLIs drop error reports there, and those contain the prompt
    env["TMPDIR"] = str(workdir)
    cmd = launcher.command([binary, *spec.argv[1:]], env, workdir)
    try:
        return await asyncio.create_subprocess_exec(
            *cmd.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env=env,
            start_new_session=True,
            preexec_fn=cmd.preexec,
            limit=STDOUT_LIMIT,
        )
    except FileNotFoundError:
        raise CliMissing(spec.argv[0]) from None
    except PermissionError:
        raise CliMissing(spec.argv[0], executable=True) from None
