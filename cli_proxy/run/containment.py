"""Containment: turn a ``LaunchSpec`` into a started CLI process in its own private work dir.

A launcher decides how the process is wrapped so that it cannot outlive the gateway; it is
chosen by name (``LAUNCHERS``), so a sandboxing launcher can replace the default without the
supervisor or the run code knowing how a process was started.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import psutil

from cli_proxy.failures import CliMissing
from cli_proxy.plan.spec import LaunchSpec
from cli_proxy.run.proctree import child_pids, descendant_pids

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


def die_with_gateway() -> Callable[[], None] | None:
    """A ``preexec_fn`` for a helper process the gateway starts outside a call's launcher
    (a backend's one-off probe): SIGKILL when the gateway dies, even by ``kill -9``. The
    death signal follows the thread that started it, so start and wait in one thread."""
    return _die_with(os.getpid())


_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False
_spawned: set[int] = set()  # CLI processes started and not yet reaped
_spawning = 0  # spawns under way: a new child may not be in _spawned yet


def enable_subreaper() -> bool:
    """Make the gateway the reaper of its CLIs' orphans (``PR_SET_CHILD_SUBREAPER``): a
    grandchild that escapes by ``setsid`` or a double fork is re-parented to the gateway,
    not to init, and ``sweep_orphans`` kills it. For the gateway process only (``serve``),
    never inside a host application."""
    global _subreaper
    if _PRCTL is None or _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return False
    _subreaper = True
    return True


def kill_orphans() -> list[int]:
    """SIGKILL the gateway's children that are not CLIs it started (re-parented orphans)
    and their descendants; returns their pids, to be reaped. Runs on the event loop thread
    and is skipped while a spawn is under way, so a CLI just forked is never taken for one."""
    if not _subreaper or _spawning:
        return []
    pids = []
    for child in child_pids(os.getpid()):
        if child in _spawned:
            continue
        pids.append(child)
        for pid in [*descendant_pids(child), child]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return pids


def _reap(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


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


@dataclass(slots=True)
class Prepared:
    """A contained process ready to exec, and what to undo once it has been reaped."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    preexec: Callable[[], None] | None = None
    pass_fds: tuple[int, ...] = ()
    host_dirs: tuple[
        Path, ...
    ] = ()  # work dir (and private home) on the host, removed by cleanup()

    def release_fds(self) -> None:
        """The child has its copies once it started; ours are closed at once."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = ()

    def cleanup(self) -> None:
        self.release_fds()
        for path in self.host_dirs:
            remove_workdir(path)
        self.host_dirs = ()


class Launcher(ABC):
    """How a CLI process is wrapped at exec, and where its private work dir lives."""

    name: ClassVar[str]

    @abstractmethod
    def prepare(self, spec: LaunchSpec, binary: str) -> Prepared:
        """The contained command for ``spec`` (its binary already resolved)."""

    def describe(self) -> str:
        return self.name

    @classmethod
    def available(cls) -> bool:
        return True


class PdeathsigLauncher(Launcher):
    """The CLI gets SIGKILL when the gateway dies (``PR_SET_PDEATHSIG``); its work dir is a
    fresh private directory on the host, below ``work_root`` (mode 0700, never below a
    world-writable directory).

    Through ``setpriv --pdeathsig`` (util-linux) where present: a preexec_fn forces a full
    fork() of the gateway instead of vfork(), measured ~5 ms more per call
    (docs/performance.md). Only the direct child gets the signal: a grandchild that the CLI
    leaves behind is caught by the subreaper sweep while the gateway lives, not after a
    ``kill -9`` of the gateway. The bwrap launcher has neither gap.
    """

    name = "pdeathsig"
    _setpriv = shutil.which("setpriv") if sys.platform == "linux" else None

    def __init__(self, work_root: Path | None = None) -> None:
        self.work_root = work_root or default_work_root()
        sweep_stale_workdirs(self.work_root)

    def prepare(self, spec: LaunchSpec, binary: str) -> Prepared:
        workdir = make_workdir(spec, self.work_root)
        env = {**spec.environ, "TMPDIR": str(workdir)}  # CLIs drop error reports there
        dirs: tuple[Path, ...] = (workdir,)
        if spec.home is not None:
            # beside the work dir, not in it: the CLI must not see it as workspace content
            home = Path(tempfile.mkdtemp(prefix="home-", dir=workdir.parent))
            _write_files(home, spec.home.files)
            for rel, real in spec.home.login:
                target = home / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(os.path.realpath(real))  # see _login_binds
            env.update(dict.fromkeys(spec.home.env, str(home)))
            dirs = (workdir, home)
        argv = [binary, *spec.argv[1:]]
        if self._setpriv is not None:
            argv = [self._setpriv, "--pdeathsig", "KILL", "--", *argv]
            return Prepared(argv, str(workdir), env, host_dirs=dirs)
        return Prepared(argv, str(workdir), env, _die_with(os.getpid()), host_dirs=dirs)

    def describe(self) -> str:
        via = "setpriv" if self._setpriv else "preexec prctl"
        reaper = "subreaper sweep" if _subreaper else "no subreaper"
        return (
            f"{self.name} (PR_SET_PDEATHSIG via {via}, {reaper}; no PID namespace: install "
            f"bubblewrap for one; work dirs in {self.work_root})"
        )


SANDBOX_WORKDIR = "/tmp/cli-proxy/work"
SANDBOX_HOME = "/tmp/cli-proxy/home"
"""The work dir's and the private home's paths inside the sandbox: the same for every call,
so the CLIs' system prompts (which name them) are byte-identical across calls and the
provider can cache them."""


class BwrapLauncher(Launcher):
    """bubblewrap: the CLI runs in its own PID namespace that dies with it and with the
    gateway (``--unshare-pid --die-with-parent``: setsid and double-fork escapes die too, even
    after ``kill -9`` of the gateway), sees the host read-only, a private in-memory ``/tmp``
    holding its work dir at a fixed path, and of HOME only what its CLI needs (its login and
    state: ``Backend.home_paths``). Nothing of the call is written to the host disk but what
    the CLI writes to those state paths.
    """

    name = "bwrap"
    _bwrap = shutil.which("bwrap") if sys.platform == "linux" else None

    def __init__(self, home_paths: dict[str, tuple[str, ...]] | None = None) -> None:
        self.home_paths = home_paths or {}

    @classmethod
    def available(cls) -> bool:
        return cls._bwrap is not None and _bwrap_runs(cls._bwrap)

    def prepare(self, spec: LaunchSpec, binary: str) -> Prepared:
        assert self._bwrap is not None
        env = spec.environ
        home = env.get("HOME", "")
        fds: list[int] = []
        argv = [
            self._bwrap,
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        if home and home != "/":
            private = spec.home is not None
            argv += ["--tmpfs", home, *self._home_binds(home, binary, env, spec.backend, private)]
        argv += _ro_binds_below("/tmp", binary, env)  # a CLI installed below /tmp stays visible
        argv += _ro_binds_named(env, hidden=("/tmp", home))
        for path in spec.read_paths:
            argv += ["--ro-bind", path, path]
        argv += ["--dir", SANDBOX_WORKDIR, *_files(SANDBOX_WORKDIR, spec.workdir_files, fds)]
        if spec.home is not None:
            argv += ["--dir", SANDBOX_HOME, *_files(SANDBOX_HOME, spec.home.files, fds)]
            argv += _login_binds(spec.home.login)
            for rel, real in spec.home.login:
                argv += ["--symlink", os.path.realpath(real), f"{SANDBOX_HOME}/{rel}"]
            env.update(dict.fromkeys(spec.home.env, SANDBOX_HOME))
        argv += ["--chdir", SANDBOX_WORKDIR, "--", binary, *spec.argv[1:]]
        return Prepared(argv, "/", {**env, "TMPDIR": SANDBOX_WORKDIR}, pass_fds=tuple(fds))

    def _home_binds(
        self, home: str, binary: str, env: dict[str, str], backend: str, private: bool
    ) -> list[str]:
        """The real HOME is hidden but for the CLI's own state (read-write, unless the call has
        a private home) and, read-only, the top-level directories where the CLI or PATH
        live (so ``~/.local/bin/claude`` or nvm keep working)."""
        out: list[str] = []
        state = () if private else self.home_paths.get(backend, ())
        for rel in state:
            path = os.path.join(home, rel)
            if os.path.exists(path):
                out += ["--bind", path, path]
        return out + _ro_binds_below(home, binary, env, skip={r.split("/")[0] for r in state})

    def describe(self) -> str:
        return f"{self.name} (PID namespace, private /tmp, HOME limited to each CLI's state)"


CA_FILE_VAR = re.compile(r"(?:^SSL_CERT_(?:FILE|DIR)|_CA_(?:CERTS|CERTIFICATE|BUNDLE))$")
"""Variables naming CA certificates the CLI must read (a corporate proxy's CA, say):
``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``/``_DIR``, ``REQUESTS_CA_BUNDLE`` and a CLI's
own (``<NAME>_CA_CERTIFICATE``), whichever its environment allowlist passes on."""


def _ro_binds_named(env: Mapping[str, str], hidden: tuple[str, ...]) -> list[str]:
    """``--ro-bind`` for the CA files the environment names, where the sandbox hides them
    (below /tmp or HOME): without them a CLI behind a TLS-inspecting proxy cannot connect."""
    out: list[str] = []
    roots = tuple(h.rstrip("/") + "/" for h in hidden if h and h != "/")
    for var, path in env.items():
        if CA_FILE_VAR.search(var) and path.startswith(roots) and os.path.exists(path):
            out += ["--ro-bind", path, path]
    return out


def _login_binds(login: tuple[tuple[str, str], ...]) -> list[str]:
    """The directory of each login file, bound read-write at its own path, with its other
    entries masked (directories by an empty tmpfs, files by /dev/null).

    Never the file alone: codex and claude write a refreshed login to a temp file beside it
    and rename that over it, and a rename onto a bind-mounted file fails (EBUSY), so the
    fresh tokens were lost while the provider had already spent the old refresh token. The
    private home links the file (``--symlink``); the CLI resolves the link and its temp file
    and rename land in the user's real directory. ``<name>.lock`` beside it stays visible:
    codex locks it while writing. Entries created after the call started are not masked.
    """
    dirs: dict[str, set[str]] = {}
    for _rel, real in login:
        path = os.path.realpath(real)
        dirs.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
    out: list[str] = []
    for folder, names in sorted(dirs.items()):
        out += ["--bind", folder, folder]
        keep = names | {f"{n}.lock" for n in names}
        try:
            with os.scandir(folder) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name in keep:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        out += ["--tmpfs", entry.path]
                    elif entry.is_file(follow_symlinks=False):
                        out += ["--ro-bind", "/dev/null", entry.path]
        except OSError:
            pass
    return out


def _ro_binds_below(
    root: str, binary: str, env: Mapping[str, str], skip: set[str] | None = None
) -> list[str]:
    """``--ro-bind`` for each top-level directory below ``root`` that holds the binary (or
    its real path) or a PATH entry: those stay visible when ``root`` is hidden."""
    tops: set[str] = set()
    for place in (binary, os.path.realpath(binary), *env.get("PATH", "").split(os.pathsep)):
        if place.startswith(root.rstrip("/") + "/"):
            tops.add(os.path.relpath(place, root).split(os.sep)[0])
    out: list[str] = []
    for top in sorted(tops - (skip or set())):
        path = os.path.join(root, top)
        if os.path.exists(path):
            out += ["--ro-bind", path, path]
    return out


def _files(base: str, files: tuple[tuple[str, bytes], ...], fds: list[int]) -> list[str]:
    """bwrap arguments that create ``files`` below ``base`` from in-memory copies."""
    out: list[str] = []
    for rel, content in files:
        fd = _memfd(rel, content)
        fds.append(fd)
        out += ["--file", str(fd), f"{base}/{rel}"]
    return out


def _write_files(root: Path, files: tuple[tuple[str, bytes], ...]) -> None:
    for rel, content in files:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


@functools.cache
def _bwrap_runs(bwrap: str) -> bool:
    """Whether bwrap can make a PID namespace here (not in every container): probed once."""
    probe = subprocess.run(
        [bwrap, "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    return probe.returncode == 0


def _memfd(name: str, content: bytes) -> int:
    """An in-memory file holding ``content``, its offset at 0 (bwrap ``--file`` reads it)."""
    fd = os.memfd_create(name.replace("/", "_"), 0)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


LAUNCHERS: dict[str, type[Launcher]] = {"bwrap": BwrapLauncher, "pdeathsig": PdeathsigLauncher}


def make_launcher(
    name: str,
    home_paths: dict[str, tuple[str, ...]] | None = None,
    work_root: Path | None = None,
) -> Launcher:
    """``auto``: bwrap where it works here, else pdeathsig."""
    if name == "auto":
        name = "bwrap" if BwrapLauncher.available() else "pdeathsig"
    if name == "bwrap":
        if not BwrapLauncher.available():
            raise ValueError("launcher 'bwrap' asked for, but bwrap is missing or cannot run here")
        return BwrapLauncher(home_paths)
    if name == "pdeathsig":
        return PdeathsigLauncher(work_root)
    raise ValueError(f"unknown launcher {name!r}; known: auto, {', '.join(LAUNCHERS)}")


def default_work_root() -> Path:
    """A private root for host work dirs, not below a world-writable directory (a world-
    writable parent lets any local user plant files a CLI looks for, e.g. CLAUDE.md)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and os.path.isdir(runtime) else Path.home() / ".cache"
    return base / "cli-proxy" / "work"


def sweep_stale_workdirs(root: Path) -> None:
    """Remove work dirs a gateway killed with -9 left behind (their owner process is gone).
    Each gateway works in ``root/<pid>-<start time>``."""
    if not root.is_dir():
        return
    for entry in root.iterdir():
        pid, _, started = entry.name.partition("-")
        if not pid.isdigit():
            continue
        try:
            alive = f"{psutil.Process(int(pid)).create_time():.0f}" == started
        except psutil.Error:
            alive = False
        if not alive:
            shutil.rmtree(entry, ignore_errors=True)


def _own_root(root: Path) -> Path:
    own = root / f"{os.getpid()}-{psutil.Process().create_time():.0f}"
    own.mkdir(parents=True, exist_ok=True, mode=0o700)
    return own


def make_workdir(spec: LaunchSpec, root: Path) -> Path:
    """A fresh private directory holding only the backend's work-dir files."""
    path = Path(tempfile.mkdtemp(prefix="call-", dir=_own_root(root)))
    _write_files(path, spec.workdir_files)
    return path


def remove_workdir(path: Path) -> None:
    """Usually empty: one rmdir; rmtree (10x the cost, profiled) only when something is left."""
    try:
        os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


async def spawn(
    spec: LaunchSpec, launcher: Launcher, line_limit: int
) -> tuple[asyncio.subprocess.Process, Prepared]:
    """Start the CLI of ``spec`` contained, in a new session (so its group can be killed),
    reading stdout lines of at most ``line_limit`` bytes. The caller must ``cleanup()`` the
    returned ``Prepared`` once the process is reaped."""
    global _spawning
    binary = resolve_binary(spec.argv[0], spec.environ)
    prepared = launcher.prepare(spec, binary)
    _spawning += 1
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if spec.merge_stderr else asyncio.subprocess.PIPE,
            cwd=prepared.cwd,
            env=prepared.env,
            start_new_session=True,
            preexec_fn=prepared.preexec,
            pass_fds=prepared.pass_fds,
            limit=line_limit,
        )
    except FileNotFoundError:
        prepared.cleanup()
        raise CliMissing(spec.argv[0]) from None
    except PermissionError:
        prepared.cleanup()
        raise CliMissing(spec.argv[0], executable=True) from None
    except BaseException:
        prepared.cleanup()
        raise
    finally:
        _spawning -= 1
    _spawned.add(proc.pid)
    prepared.release_fds()
    return proc, prepared


async def reaped(pid: int) -> None:
    """The CLI ``pid`` has been reaped: kill and reap what it may have left behind."""
    _spawned.discard(pid)
    orphans = kill_orphans()
    if orphans:
        await asyncio.to_thread(_reap, orphans)
