"""What is known of a backend's CLI without running a call: its binary on PATH, its version
(from its npm package.json, else ``--version``, bounded in time), whether the tests cover that
release (``pinned-clis.mk``), and its login (the backend's own login facts). ``cli-proxy
doctor`` prints it; the status page shows it."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol

from cli_proxy.backends.base import BackendOptions, LoginState
from cli_proxy.backends.registry import backend_class, names

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


class CheckSettings(Protocol):
    """What a check reads of the settings (``config.Settings``, a layer above this one)."""

    @property
    def drop_env(self) -> Sequence[str]: ...

    def options_for(self, backend: str) -> BackendOptions: ...


def check_backend(
    name: str, settings: CheckSettings, env: Mapping[str, str], home: Path
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
