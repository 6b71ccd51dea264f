"""``cli-proxy doctor``: why a backend does or does not answer, in one screen.

One line per backend (binary, version and whether the tests cover it, login present), then
the containment in force, the warm pool's memory and where replayed fixtures come from. A
newcomer whose call fails learns here whether the CLI is missing, logged out, or running
without bubblewrap (no prompt caching). Exit status 0 when at least one backend can serve.

Nothing here prints a secret: a login is named by its file or its variable's name.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cli_proxy import __version__
from cli_proxy.backends.base import LoginState
from cli_proxy.backends.registry import backend_class, names
from cli_proxy.config import Settings
from cli_proxy.run.containment import BwrapLauncher, PdeathsigLauncher, default_work_root
from cli_proxy.run.limits import CLI_AT_REST_MIB
from cli_proxy.run.limits import from_settings as limits_from_settings

VERSION_TIMEOUT_S = 15.0
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?")
_PIN = re.compile(r"^\s*([A-Z][A-Z0-9_]*)_(VERSION|NPM)\s*\??:?=\s*(\S+)\s*$")


@dataclass(frozen=True)
class Pin:
    """A CLI release the test suite runs on (``make test`` installs it)."""

    version: str
    npm: str | None = None


@functools.cache
def pinned_clis() -> dict[str, Pin]:
    """backend name -> pinned release, read from ``pinned-clis.mk``: the Makefile includes
    the same file, so what doctor calls "tested" is what ``make test`` installs."""
    text = resources.files("cli_proxy").joinpath("pinned-clis.mk").read_text(encoding="utf-8")
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _PIN.match(line)
        if m:
            found.setdefault(m.group(1).lower(), {})[m.group(2)] = m.group(3)
    return {n: Pin(v["VERSION"], v.get("NPM")) for n, v in found.items() if "VERSION" in v}


def login_state(name: str, env: Mapping[str, str], home: Path, drop: frozenset[str]) -> LoginState:
    """Whether ``name``'s CLI has a login to serve with (the backend knows where it is)."""
    if name not in names():
        return LoginState(None, "unknown (no login check for this backend)")
    return backend_class(name).login_state(env, home, drop)


@dataclass(frozen=True)
class BackendReport:
    name: str
    command: list[str]
    path: str | None
    version: str | None
    pin: Pin | None
    login: LoginState

    @property
    def tested(self) -> bool:
        return self.pin is not None and self.version == self.pin.version

    @property
    def can_serve(self) -> bool:
        return self.path is not None and self.login.present is not False

    @property
    def status(self) -> str:
        if self.path is None:
            return "missing"
        return "ready" if self.can_serve else "no login"

    def line(self) -> str:
        shown = " ".join([self.path or self.command[0], *self.command[1:]])
        if self.path is None:
            hint = f"npm install -g {self.pin.npm}@{self.pin.version}" if self.pin else ""
            hint = f"install it ({hint}) or set" if hint else "install it or set"
            return f"`{shown}` not found on PATH: {hint} --{self.name}-bin"
        if self.version is None:
            version = "version unknown"
        elif self.tested:
            version = f"{self.version} (tested)"
        elif self.pin is not None:
            version = f"{self.version} (untested: the tests pin {self.pin.version})"
        else:
            version = f"{self.version} (untested)"
        return f"{shown} {version}; login: {self.login.detail}"


def npm_version(binary: str) -> str | None:
    """The version of an npm-installed CLI from its package.json (the package whose ``bin``
    is this file): instant, where ``gemini --version`` takes seconds to start Node."""
    try:
        real = Path(binary).resolve(strict=True)
    except OSError:
        return None
    for parent in list(real.parents)[:6]:
        manifest = parent / "package.json"
        if not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        bins = data.get("bin") if isinstance(data, dict) else None
        targets = bins.values() if isinstance(bins, dict) else [bins] if bins else []
        if any(isinstance(t, str) and (parent / t).resolve() == real for t in targets):
            version = data.get("version")
            return version if isinstance(version, str) else None
        return None
    return None


def run_version(command: list[str], env: Mapping[str, str]) -> str | None:
    """``<command> --version``, as the gateway would start it (its env), bounded in time; in
    a session of its own, so a CLI that hangs is killed with whatever it started."""
    try:
        proc = subprocess.Popen(
            [*command, "--version"],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out = b""
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group: a launcher's children too
        proc.communicate()
    m = _VERSION.search(out.decode("utf-8", "replace"))
    return m.group(0) if m else None


def check_backend(
    name: str, settings: Settings, env: Mapping[str, str], home: Path
) -> BackendReport:
    cls = backend_class(name)
    backend = cls(settings.options_for(name), frozenset(settings.drop_env))
    command = backend.command
    path = shutil.which(command[0], path=env.get("PATH", os.defpath))
    version = None
    if path is not None:
        child_env = backend.env(env)
        version = (npm_version(path) if len(command) == 1 else None) or run_version(
            [path, *command[1:]], child_env
        )
    login = login_state(name, env, home, frozenset(settings.drop_env))
    return BackendReport(name, command, path, version, pinned_clis().get(name), login)


def containment_line(settings: Settings) -> str:
    if settings.launcher in ("auto", "bwrap") and BwrapLauncher.available():
        return (
            "bwrap: PID namespace, private /tmp, HOME limited to each CLI's state; "
            "same in-sandbox paths every call, so prompts cache"
        )
    if settings.launcher == "bwrap":
        return "bwrap asked for (launcher=bwrap) but bubblewrap is missing or cannot run here"
    why = "launcher=pdeathsig" if settings.launcher == "pdeathsig" else "no usable bubblewrap"
    work = settings.work_root or default_work_root()
    setpriv = "setpriv" if PdeathsigLauncher._setpriv else "a preexec hook (full fork, ~5 ms)"
    return (
        f"pdeathsig fallback ({why}; via {setpriv}; work dirs in {work}). It costs: prompt "
        "caching (each call's own work dir path is in its prompt; one CLI measured 27% of "
        "input read from cache instead of 95%), and a kill -9 of the gateway leaves escaped "
        "grandchildren running. Install bubblewrap (apt-get install bubblewrap)"
    )


def warm_pool_line(settings: Settings, ready: list[str]) -> str:
    if not settings.warm_pool or settings.warm_max_total == 0 or settings.warm_max_per_key == 0:
        return "off (warm_pool=false): every call starts its CLI cold"
    sizes = {n: CLI_AT_REST_MIB[n] for n in ready if n in CLI_AT_REST_MIB}
    each = ", ".join(f"~{mib} MiB per {n} spare" for n, mib in sizes.items())
    if not sizes:
        return f"up to {settings.warm_max_total} spares; no ready backend to pre-start"
    worst = settings.warm_max_total * max(sizes.values())
    return (
        f"up to {settings.warm_max_total} spares ({each}): at most ~{worst} MiB RSS "
        "(warm_max_total bounds it, warm_pool=false turns it off)"
    )


def capacity_line(settings: Settings) -> str:
    """The bounds this machine gets from the settings (``limits.py``; also on ``/health``)."""
    b, t = limits_from_settings(settings)
    if b.source == "memory":
        why = f"from {b.budget_mib} MiB for CLIs / {b.cli_mib} MiB per CLI"
    else:
        why = "max_concurrency"
    caps = ", ".join(f"{n} at most {c}" for n, c in b.per_backend.items())
    return (
        f"{b.max_processes} CLI processes at once, calls and spares ({why}); "
        f"{b.max_starting} starting at once; queue {settings.max_queue} for "
        f"{t.queue_timeout_s:g} s" + (f"; {caps}" if caps else "")
    )


def fixtures_line(settings: Settings, any_live: bool) -> str:
    from cli_proxy.fixtures.sources import shipped_fixtures
    from cli_proxy.fixtures.store import FixtureError, FixtureStore

    directory = settings.replay_dir or shipped_fixtures()
    try:
        count = f"{len(FixtureStore.load(directory))} recorded fixtures in {directory}"
    except FixtureError as exc:
        return f"cannot load: {exc}"
    if settings.replay_dir is not None:
        return f"{count}: served for every call (--replay)"
    if any_live:
        return f"{count}: not served (a CLI is found; --replay DIR serves fixtures)"
    return f"{count}: SERVED, no CLI is found (replay mode)"


def run(settings: Settings, env: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    """The report's lines and the exit status (0: at least one backend can serve)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    with ThreadPoolExecutor(max_workers=max(1, len(settings.backends))) as pool:
        reports = list(pool.map(lambda n: check_backend(n, settings, env, home), settings.backends))
    ready = [r.name for r in reports if r.can_serve]
    width = max([11, *(len(r.name) for r in reports)])
    lines = [f"cli-proxy {__version__}: doctor"]
    lines += [f"{r.name:<{width}} {r.status:<8} {r.line()}" for r in reports]
    lines.append(f"{'containment':<{width}} {containment_line(settings)}")
    lines.append(f"{'capacity':<{width}} {capacity_line(settings)}")
    lines.append(f"{'warm pool':<{width}} {warm_pool_line(settings, ready)}")
    found = any(r.path is not None for r in reports)
    lines.append(f"{'fixtures':<{width}} {fixtures_line(settings, found)}")
    verdict = (
        f"{len(ready)} of {len(reports)} backends can serve: {', '.join(ready)}"
        if ready
        else f"no backend can serve (of {', '.join(settings.backends)})"
    )
    lines.append(f"{'result':<{width}} {verdict}")
    return (0 if ready else 1), lines
