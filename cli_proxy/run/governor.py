"""The limits of each client key, applied at admission (docs/keys.md).

For one call of one key, in this order:

1. **models**: the name asked for, and every target an alias tries, must match the key's
   ``models`` globs (else ``NotAllowed``: 403);
2. **target**: a direct call goes to its model; an alias goes to the first target that can
   take it now (its backend present and logged in, no reported window at or over the key's
   ``max_window_percent`` (100 % without one), no rate-limit cool-down). A direct call to a
   backend whose window is at or over the key's limit is refused (``OverLimit``: 429,
   Retry-After at that window's reset); a cool-down or a missing login never refuses a
   direct call (it gets the backend's own answer);
3. **tokens_per_day**: the rolling-24 h tokens of finished calls plus the estimates of the
   calls in flight must be under the budget (then this call is counted in flight at its
   estimate: calls fired at once overshoot by about one call at most);
4. **max_concurrent**: a call over it waits, at most the queue time, then 429. Counted in
   the usage store (a lease per call in flight), so it holds across the workers that share
   a state dir.

Windows come from what each backend's CLI last reported (``RateLimit``; ``rejected`` is
100 %); a window whose reset has passed no longer counts. A backend's login is what the
gateway knows of it (``login_block``): refused when its last call ended ``cli_auth_failed``
or ``login_expired`` (until a call of it answers or its login files change), missing when
no credential is there (doctor's check) and no call of it has answered yet. The governor
holds no secret: keys are ``ClientKey`` values (name and digest).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli_proxy.failures import NotAllowed, OverLimit
from cli_proxy.read.events import RateLimit
from cli_proxy.run.keys import ClientKey, KeyRing
from cli_proxy.run.usage import Entry, UsageStore

LOGIN_CHECK_S = 2.0  # a backend's login files are looked at (a few stats) at most this often
LEASE_POLL_S = 0.05  # a call over max_concurrent looks for another worker's ended lease
DEFAULT_COOL_DOWN_S = 60.0  # a rate-limit answer that says no reset
UNKNOWN_RESET_S = 60.0  # a window at the limit that says no reset: look again then
OUTPUT_GUESS_TOKENS = 1024  # a call's output, before it says (its max_tokens if lower)


def estimate_tokens(prompt_tokens: int, max_tokens: int | None = None) -> int:
    """A call's size before it runs: its prompt's estimate plus a guess at its answer."""
    out = OUTPUT_GUESS_TOKENS if max_tokens is None else min(max_tokens, OUTPUT_GUESS_TOKENS)
    return max(1, prompt_tokens + max(out, 0))


@dataclass
class Slot:
    """One admitted call of one key: file its usage once (``finish``), whatever happens."""

    governor: Governor
    key: ClientKey
    estimate: int
    reservation: int | None = None
    done: bool = False
    concurrent: bool = False

    def finish(
        self,
        model: str,
        *,
        error: bool = False,
        input_tokens: int | None = None,
        cached_input_tokens: int = 0,
        output_tokens: int | None = None,
        requests: int = 1,
    ) -> None:
        """File the call under ``model`` (the target that answered) with the CLI's usage,
        or, when it reported none, with the estimate (never zero tokens for a call that
        ran: ``input_tokens`` None means "not reported")."""
        if self.done:
            return
        self.done = True
        self.governor._release(self)
        if self.governor.store is None:
            return
        entry = Entry(
            model,
            requests,
            1 if error else 0,
            self.estimate if input_tokens is None else input_tokens,
            cached_input_tokens,
            0 if output_tokens is None else output_tokens,
        )
        self.governor.store.record(self.key.name, entry, self.reservation)

    def drop(self) -> None:
        """Forget this admission without filing anything (an attempt that fell through)."""
        if self.done:
            return
        self.done = True
        self.governor._release(self)
        if self.governor.store is not None and self.reservation is not None:
            self.governor.store.release(self.reservation)


@dataclass(frozen=True, slots=True)
class LoginFact:
    """What the files and environment say of a backend's login (doctor's check): ``present``
    None when it cannot tell; ``version`` changes when the login does (the login files'
    inode, mtime and size, the variables set), so a refusal is forgotten after a re-login."""

    present: bool | None
    detail: str = ""
    version: object = None


def no_login_check(backend: str) -> LoginFact:
    """No live backends (replayed fixtures, unit tests): nothing known, nothing skipped."""
    return LoginFact(None)


@dataclass
class _Running:
    count: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class Governor:
    """Keys, their limits, the backends' windows and cool-downs, and the usage store."""

    def __init__(
        self,
        ring: KeyRing,
        store: UsageStore | None = None,
        clock: Callable[[], float] = time.time,
        login_check: Callable[[str], LoginFact] = no_login_check,
    ) -> None:
        self.ring = ring
        self.store = store
        self._clock = clock
        self.windows: dict[str, dict[str, RateLimit]] = {}
        self.cool_until: dict[str, float] = {}
        self._running: dict[str, _Running] = {}
        self.login_check = login_check
        self.refused: dict[str, tuple[str, object]] = {}  # backend -> (why, login version)
        self.answered: set[str] = set()  # backends a call of which answered (a login works)
        self._logins: dict[str, tuple[float, LoginFact]] = {}  # backend -> (checked, fact)

    # ---------------------------------------------------------------- state

    def reload(self, ring: KeyRing) -> None:
        """New keys at once; calls in flight keep the key they were admitted with."""
        self.ring = ring

    def report(self, backend: str, reports: Sequence[RateLimit]) -> None:
        """The windows a backend's CLI just reported (the latest per window wins); a
        ``rejected`` one starts a cool-down until its reset."""
        if not reports:
            return
        windows = self.windows.setdefault(backend, {})
        for r in reports:
            windows[r.window] = r
            if r.status == "rejected":
                self.cool(backend, None if r.resets_at is None else r.resets_at - self._clock())

    def cool(self, backend: str, seconds: float | None) -> None:
        """A rate- or usage-limit answer from ``backend``: alias choice skips it until then."""
        s = DEFAULT_COOL_DOWN_S if seconds is None or seconds <= 0 else seconds
        until = self._clock() + s
        self.cool_until[backend] = max(self.cool_until.get(backend, 0.0), until)

    def cooling(self, backend: str) -> float | None:
        """Seconds left of ``backend``'s cool-down, or None."""
        left = self.cool_until.get(backend, 0.0) - self._clock()
        return left if left > 0 else None

    def _login(self, backend: str) -> LoginFact:
        now = time.monotonic()
        seen = self._logins.get(backend)
        if seen is None or now - seen[0] >= LOGIN_CHECK_S:
            seen = self._logins[backend] = (now, self.login_check(backend))
        return seen[1]

    def login_refused(self, backend: str, why: str) -> None:
        """A call of ``backend`` ended with its login refused (``cli_auth_failed``,
        ``login_expired``): alias choice skips it until a call of it answers or its login
        changes (a re-login rewrites its files)."""
        self._logins.pop(backend, None)
        self.refused[backend] = (why, self._login(backend).version)
        self.answered.discard(backend)

    def login_worked(self, backend: str) -> None:
        """A call of ``backend`` answered: its login serves, whatever its files say."""
        self.refused.pop(backend, None)
        self.answered.add(backend)

    def login_block(self, backend: str) -> str | None:
        """Why alias choice skips ``backend`` for its login (None: it may go): refused by
        its last call, or no credential at all and no call of it has answered."""
        refused = self.refused.get(backend)
        fact = self._login(backend)
        if refused is not None:
            if fact.version == refused[1]:
                return f"its login was refused ({refused[0]})"
            del self.refused[backend]  # logged in again since
        if fact.present is False and backend not in self.answered:
            return f"no login ({fact.detail})" if fact.detail else "no login"
        return None

    def window_use(self, backend: str) -> tuple[float, float | None, str] | None:
        """The most used live window of ``backend``: (percent, resets_at, name), or None."""
        now, worst = self._clock(), None
        for r in self.windows.get(backend, {}).values():
            if r.resets_at is not None and r.resets_at <= now:
                continue  # reset since it was reported
            pct = 100.0 if r.status == "rejected" else (r.utilization or 0.0) * 100.0
            if worst is None or pct > worst[0]:
                worst = (pct, r.resets_at, r.window)
        return worst

    def window_block(self, key: ClientKey | None, backend: str) -> float | None:
        """Seconds until ``backend``'s window drops under the key's limit (None: it may go)."""
        limit = 100.0 if key is None or key.max_window_percent is None else key.max_window_percent
        use = self.window_use(backend)
        if use is None or use[0] < limit:
            return None
        resets = use[1]
        return UNKNOWN_RESET_S if resets is None else max(1.0, resets - self._clock())

    # ---------------------------------------------------------------- models and targets

    def targets(self, key: ClientKey | None, asked: str) -> tuple[str, ...]:
        """The models ``asked`` may go to for this key, in order (an alias's allowed
        targets; else the name itself). ``NotAllowed`` if none."""
        if key is not None and not key.allows(asked):
            raise NotAllowed(
                f"the key '{key.name}' may not use the model '{asked}' (its models list)"
            )
        targets = self.ring.targets(asked)
        if targets is None:
            return (asked,)
        allowed = tuple(t for t in targets if key is None or key.allows(t))
        if not allowed:
            assert key is not None
            raise NotAllowed(
                f"the key '{key.name}' may use none of the models the alias '{asked}' tries"
            )
        return allowed

    def choose(
        self,
        key: ClientKey | None,
        targets: Sequence[str],
        backend_of: Callable[[str], str | None],
        skip: Sequence[str] = (),
    ) -> tuple[str, str]:
        """An alias's first target that can take a call now: (model, backend). ``OverLimit``
        (Retry-After: the soonest a target frees) when none can."""
        waits: list[float] = []
        for target in targets:
            if target in skip:
                continue
            backend = backend_of(target)
            if backend is None or self.login_block(backend) is not None:
                continue
            blocked = self.window_block(key, backend)
            cooling = self.cooling(backend)
            if blocked is None and cooling is None:
                return target, backend
            waits.append(max(blocked or 0.0, cooling or 0.0))
        raise OverLimit(
            "no model of this alias can take a call now (windows at the key's limit, "
            "rate-limit cool-downs, or backends not available or not logged in)",
            "no_model_available",
            min(waits) if waits else UNKNOWN_RESET_S,
        )

    def check_window(self, key: ClientKey | None, model: str, backend: str) -> None:
        """A direct call: refused when its backend's window is at or over the key's
        ``max_window_percent``. A cool-down does not refuse it."""
        if key is None or key.max_window_percent is None:
            return
        blocked = self.window_block(key, backend)
        if blocked is not None:
            use = self.window_use(backend)
            pct, name = (use[0], use[2]) if use else (100.0, "?")
            raise OverLimit(
                f"the {name} window of the model '{model}' is {pct:.0f} % used, at or over "
                f"the key's limit of {key.max_window_percent:g} %; retry after it resets",
                "window_limit",
                blocked,
            )

    # ---------------------------------------------------------------- admission

    async def admit(self, key: ClientKey | None, estimate: int, wait_s: float) -> Slot | None:
        """Admit one call of ``key`` at ``estimate`` tokens: the token budget, then the
        concurrency (waiting at most ``wait_s``). None for no key (no limits).

        With a store, both are counted in it (a lease per call), so they hold for every
        worker sharing the state dir; a call over ``max_concurrent`` waits for a lease to
        end: woken at once by one of this worker's calls ending, else it looks again every
        ``LEASE_POLL_S`` (another worker's)."""
        if key is None:
            return None
        slot = Slot(self, key, estimate)
        budgeted = key.tokens_per_day is not None
        if self.store is None or not (budgeted or key.max_concurrent is not None):
            if key.max_concurrent is not None:  # no store: this worker's count
                await self._acquire(key, wait_s)
                slot.concurrent = True
            return slot
        deadline = time.monotonic() + wait_s
        running = self._running.get(key.name) or self._running.setdefault(key.name, _Running())
        while True:
            running.changed.clear()
            seen = self.store.admit(key.name, key.tokens_per_day, estimate, key.max_concurrent)
            if seen.lease is not None:
                slot.reservation = seen.lease
                return slot
            budget = seen.budget
            if budget is not None and budget.retry_after_s is not None:
                raise OverLimit(
                    f"the key '{key.name}' has spent its {key.tokens_per_day} tokens of the "
                    f"last 24 h ({budget.used} used, {budget.inflight} in flight)",
                    "token_budget_exhausted",
                    budget.retry_after_s,
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._busy(key, seen.running, wait_s)
            with contextlib.suppress(TimeoutError):  # a lease of this worker ended, or look
                async with asyncio.timeout(min(LEASE_POLL_S, left)):
                    await running.changed.wait()

    @staticmethod
    def _busy(key: ClientKey, running: int, wait_s: float) -> OverLimit:
        return OverLimit(
            f"the key '{key.name}' already has {running} calls running, its "
            f"limit (max_concurrent = {key.max_concurrent})",
            "key_concurrency_limit",
            max(1.0, math.ceil(wait_s / 4) or 1.0),
        )

    async def _acquire(self, key: ClientKey, wait_s: float) -> None:
        assert key.max_concurrent is not None
        running = self._running.setdefault(key.name, _Running())
        deadline = time.monotonic() + wait_s
        while running.count >= key.max_concurrent:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._busy(key, running.count, wait_s)
            running.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await running.changed.wait()
        running.count += 1

    def _release(self, slot: Slot) -> None:
        """Wake this worker's callers waiting for a lease of the key (the store's lease
        itself ends with the usage filed, or with ``drop``)."""
        running = self._running.get(slot.key.name)
        if slot.concurrent:
            slot.concurrent = False
            assert running is not None
            running.count -= 1
        if running is not None:
            running.changed.set()

    def running(self, name: str) -> int:
        """The key's calls in flight: on the host with a store, else in this worker."""
        if self.store is not None:
            return self.store.running(name)
        r = self._running.get(name)
        return r.count if r else 0

    # ---------------------------------------------------------------- report

    def status(self) -> list[dict[str, Any]]:
        """Each key's use against its limits (``/status``, ``/metrics``); no secret."""
        tokens = self.store.tokens_24h() if self.store is not None else {}
        running = self.store.running_all() if self.store is not None else {}
        return [
            {
                "name": k.name,
                **k.limits(),
                "running": running.get(k.name, 0) if self.store else self.running(k.name),
                "tokens_24h": tokens.get(k.name, 0),
            }
            for k in self.ring.keys
        ]
