"""The login gate: the user's subscription login is shared by every call and refreshed once.

Each backend reads its own CLI's login file (``backends/<name>/login.py``) into a ``Login``
with the readers below; the gate knows no CLI.

Users run the gateway on their CLI's OAuth login (``~/.codex/auth.json``,
``~/.claude/.credentials.json``, ``~/.gemini/oauth_creds.json``). Its access token expires
every few hours and the CLI then spends the refresh token, which the providers make
single-use: two CLIs refreshing at once send the same refresh token twice, and a spent one
answers ``invalid_grant`` (an identity provider may revoke the whole login). Codex sends its
refresh with no cross-process lock at all; claude's lock only helps processes that share one
``~/.claude``.

So the gateway decides who may refresh, and the CLI does the refresh (the gateway never
speaks a provider's OAuth): before a call starts, the gate reads the expiry of the login it
will use. While the access token is valid, or nearly so, calls start at once. Once a
refresh is due, exactly one call of that login starts (the refresher); the others wait,
counted as queued and bounded in time, until the credential file has changed (the refresh
landed) or the refresher has finished, and then start with the fresh token. No token is
ever logged.

Reads never block the event loop for long: a file is parsed again only when its
(inode, mtime_ns, size) changed, which one ``stat`` tells (``read_json``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cli_proxy.failures import SlotsBusy
from cli_proxy.logs import log
from cli_proxy.plan.spec import LaunchSpec
from cli_proxy.run.supervisor import Supervisor

REFRESH_AHEAD_S = 360.0
"""A refresh is due this long before the access token expires: the CLIs refresh up to five
minutes early (claude: 5 min; google-auth-library, gemini's: 5 min), so the gate must hold
the others back before any CLI starts one."""

POLL_S = 0.05
"""How often a waiting call looks at the credential file (one ``stat``)."""

FileKey = tuple[int, int, int]  # (inode, mtime_ns, size): a rename or a rewrite changes it


def file_key(path: str | Path) -> FileKey | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


_json_cache: dict[str, tuple[FileKey, dict[str, Any] | None]] = {}
_json_lock = threading.Lock()


def read_json(path: str | Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (None: missing, unreadable or not an object), parsed again
    only when the file changed; the cost of an unchanged file is one ``stat``."""
    key = file_key(path)
    name = str(path)
    if key is None:
        return None
    with _json_lock:
        cached = _json_cache.get(name)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        data = None
    value = data if isinstance(data, dict) else None
    with _json_lock:
        if len(_json_cache) > 256:
            _json_cache.clear()
        _json_cache[name] = (key, value)
    return value


@dataclass(frozen=True, slots=True)
class Login:
    """The login a call will use, as far as the gate needs it (never a token)."""

    backend: str
    path: str  # the credential file the CLI refreshes in place
    kind: str  # e.g. "chatgpt", "claude.ai oauth", "google oauth"
    expires_at: float | None  # epoch seconds the access token stops working; None: unknown
    key: FileKey | None  # the file's version when read
    relogin: str  # the command that logs in again

    def due(self, now: float | None = None) -> bool:
        """Whether a CLI starting now would refresh the login."""
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at - REFRESH_AHEAD_S

    def describe(self, now: float | None = None) -> str:
        """For logs and ``doctor``: what login, and when its access token expires."""
        if self.expires_at is None:
            return f"{self.kind} ({self.path}; expiry unknown)"
        left = self.expires_at - (time.time() if now is None else now)
        when = (
            f"expires in {left / 60:.0f} min" if left > 0 else f"expired {-left / 60:.0f} min ago"
        )
        return f"{self.kind} ({self.path}; access token {when})"


# ---------------------------------------------------------------- reading expiries


def jwt_claims(token: object) -> dict[str, Any] | None:
    """The claims of a JWT (unverified: only its own ``exp`` is read)."""
    if not isinstance(token, str) or token.count(".") != 2:
        return None
    part = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (ValueError, binascii.Error):
        return None
    return claims if isinstance(claims, dict) else None


def number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def iso_time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# ---------------------------------------------------------------- the gate


@dataclass(frozen=True, slots=True)
class Turn:
    """A call's pass through the gate."""

    born_after: float = 0.0
    """A pre-started process born (``time.monotonic``) before this is not used: it was
    started before the login last changed and may hold the old tokens."""
    refresher: bool = False


@contextlib.asynccontextmanager
async def login_free() -> AsyncIterator[Turn]:
    """The turn of a call with no gate (tests that build a ``Completion`` by hand)."""
    yield Turn()


class LoginGate:
    """Per login, at most one call runs while a refresh is due; see the module docstring.

    ``login_of`` names the login a launch spec will use (None: nothing to refresh, e.g. an
    API key, or a replayed fixture). Waiting is bounded by ``wait_s``.
    """

    def __init__(
        self,
        login_of: Callable[[LaunchSpec], Login | None],
        supervisor: Supervisor,
        wait_s: float,
    ) -> None:
        self.login_of = login_of
        self.supervisor = supervisor
        self.wait_s = wait_s
        self._refreshing: dict[str, asyncio.Event] = {}  # path -> set when its refresher ends
        self._keys: dict[str, FileKey | None] = {}
        self._changed: dict[str, float] = {}  # path -> monotonic time a change was seen
        self.refresh_turns = 0  # calls let through as the one that may refresh
        self.waited = 0  # calls that waited for a refresh

    def _read(self, spec: LaunchSpec) -> Login | None:
        login = self.login_of(spec)
        if login is not None:
            old = self._keys.get(login.path, login.key)
            if old != login.key:
                self._changed[login.path] = time.monotonic()
            self._keys[login.path] = login.key
        return login

    def status(self) -> dict[str, int]:
        return {
            "refreshing": len(self._refreshing),
            "refresh_turns": self.refresh_turns,
            "waited": self.waited,
        }

    @contextlib.asynccontextmanager
    async def turn(self, spec: LaunchSpec) -> AsyncIterator[Turn]:
        """Enter before the call takes a slot; leave once its CLI has been reaped."""
        login = self._read(spec)
        if login is not None and login.due() and login.path in self._refreshing:
            login = await self._wait(spec, login)
        if login is None or not login.due():
            yield Turn(self._changed.get(login.path, 0.0) if login is not None else 0.0)
            return
        done = self._refreshing[login.path] = asyncio.Event()
        self.refresh_turns += 1
        log.info("login_refresh_turn", backend=login.backend, login=login.describe())
        try:
            yield Turn(self._changed.get(login.path, 0.0), refresher=True)
        finally:
            del self._refreshing[login.path]
            done.set()
            after = self._read(spec)
            refreshed = after is not None and after.key != login.key
            log.info(
                "login_refresh_done" if refreshed else "login_refresh_missing",
                backend=login.backend,
                login=after.describe() if after is not None else "gone",
            )

    async def _wait(self, spec: LaunchSpec, login: Login) -> Login | None:
        """Wait while another call may refresh: until the credential file changed to a login
        that is not due, or no refresher is left (then this call may be the next one).
        Returns the login as it is then; the caller goes on synchronously, so two waiters
        woken together cannot both become the refresher."""
        self.waited += 1
        deadline = time.monotonic() + self.wait_s
        with self.supervisor.queued():
            while True:
                done = self._refreshing.get(login.path)
                current = self._read(spec)
                if current is None or not current.due() or done is None:
                    return current
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SlotsBusy(
                        f"timed out waiting for the {login.backend} login's token refresh "
                        f"(another call is refreshing it); retry later",
                        self.supervisor.retry_after_s,
                    )
                assert done is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=min(POLL_S, left))
