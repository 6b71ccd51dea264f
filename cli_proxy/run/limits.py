"""Every bound and time limit of a call, decided in one place (docs/configuration.md).

A CLI call costs three different things, and each has its own bound:

- **CPU while it starts** (node boot: a few hundred ms of CPU; a call that then waits for
  its model costs almost none): ``max_starting`` CLIs start at once, cold spawns and spare
  refills together, by default the CPU count. A start ends at the CLI's first output, when
  its tree goes quiet on the CPU (a spare waiting for its prompt), or after
  ``START_WINDOW_S``, whichever comes first.
- **Memory while resident**: at most ``max_processes`` CLI processes are alive at once,
  running calls and spares together. By default it is derived from the machine's memory
  and the measured resident size of each enabled backend's CLI (``Backend.resident_mib``,
  handed in from the registry: ``Settings.resident_mib``; bench/capacity.py --only sizes):
  ``clamp(budget / size, 1, PROCESS_CEILING)`` where the budget is half the memory (or the
  cgroup limit, if lower). ``max_concurrency`` overrides it.
- **The upstream account**: an optional cap per backend (``CLI_PROXY_<NAME>__MAX_CONCURRENCY``)
  for subscriptions or keys with their own concurrency limit.

And four time limits, each answering one question:

- ``queue_timeout_s``: how long a call may wait for a slot (then 429 + ``Retry-After``,
  503 while shutting down); the wait is not taken from the answer's time.
- ``idle_timeout_s``: how long a CLI may print nothing at all (stdout or stderr; thinking
  and progress events count) before it is taken for hung.
- ``write_timeout_s``: how long a streaming client may take no bytes.
- ``timeout_s``: the whole call from admission, a runaway guard only (see ``DEFAULT_TIMEOUT_S``),
  which also bounds the writing of the answer; a non-streamed call's cap is shortened to
  the client's own read timeout when it says it (``x-stainless-read-timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import psutil

from cli_proxy.run.proctree import tree

# Resident size of one CLI tree mid-call and at rest (a spare): each backend states its
# measured sizes (``Backend.resident_mib`` / ``at_rest_mib``) and the callers hand them in
# from the registry (``backends/registry.py``), which sits above this layer. RSS, not PSS:
# a deployment's other processes share few pages.
UNKNOWN_CLI_MIB = 400  # a backend not measured yet: assume the largest
MEMORY_SHARE = 0.5  # of the machine's memory, for CLIs; the rest: OS, page cache, gateway
PROCESS_CEILING = 64  # open pipes, pids and one event loop: more needs a measured reason
START_WINDOW_S = 3.0  # the longest a start holds a start slot
START_IDLE_CPU = 0.1  # a tree using less than this share of one core has finished starting

DEFAULT_QUEUE_TIMEOUT_S = 60.0
DEFAULT_IDLE_TIMEOUT_S = 120.0
DEFAULT_WRITE_TIMEOUT_S = 30.0
# A runaway guard, never the limit of a working call: the longest answer a model gives
# (64k output tokens) at a slow 40 tokens/s takes 27 minutes, and everything around the
# gateway waits at least that long for a stream that keeps sending (the OpenAI SDKs cap
# only the silence between bytes). Silence is idle_timeout_s's business.
DEFAULT_TIMEOUT_S = 1800.0
CLIENT_READ_TIMEOUT_HEADER = "x-stainless-read-timeout"
WRITE_GRACE_S = 1.0  # past the call's deadline, a write (the error event) may take this long


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup (v2, then v1), if any."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def machine_memory_bytes() -> int:
    """The memory this gateway may use: physical memory, or its cgroup's limit if lower."""
    total = int(psutil.virtual_memory().total)
    limit = _cgroup_memory_limit()
    return min(total, limit) if limit else total


def cli_size_mib(sizes: Mapping[str, int]) -> int:
    """The resident size assumed per CLI: the largest among the enabled backends' (``sizes``:
    backend -> measured MiB)."""
    return max(sizes.values(), default=1)


def process_bound(budget_mib: float, size_mib: int) -> int:
    """``clamp(floor(budget / size), 1, PROCESS_CEILING)``: CLIs that fit the budget."""
    return max(1, min(PROCESS_CEILING, math.floor(budget_mib / max(size_mib, 1))))


@dataclass(frozen=True, slots=True)
class Bounds:
    """The process bounds in force (``/health`` shows them)."""

    max_processes: int
    """CLI processes alive at once, running calls and spares together; also the call slots."""
    max_starting: int
    """CLIs starting at once (cold spawns and spare refills)."""
    per_backend: Mapping[str, int] = field(default_factory=dict)
    """Running calls per backend, where capped."""
    source: str = "setting"
    """``memory`` (derived) or ``max_concurrency`` (set)."""
    budget_mib: int = 0
    cli_mib: int = 0
    start_window_s: float = START_WINDOW_S

    @classmethod
    def derive(
        cls,
        sizes: Mapping[str, int],
        *,
        max_concurrency: int | None = None,
        max_starting: int | None = None,
        per_backend: Mapping[str, int | None] | None = None,
        budget_mib: int | None = None,
        memory_bytes: int | None = None,
        cpus: int | None = None,
        start_window_s: float = START_WINDOW_S,
    ) -> Bounds:
        """The bounds for these settings on this machine (memory and CPUs can be given);
        ``sizes``: each enabled backend's resident MiB (``registry.resident_mib``)."""
        size = cli_size_mib(sizes)
        if budget_mib is None:
            memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
            budget_mib = int(memory * MEMORY_SHARE / 2**20)
        if max_concurrency is not None:
            bound, source = max_concurrency, "max_concurrency"
        else:
            bound, source = process_bound(budget_mib, size), "memory"
        cpu = cpus if cpus is not None else (os.cpu_count() or 1)
        caps = {name: cap for name, cap in (per_backend or {}).items() if cap is not None}
        return cls(
            max_processes=bound,
            max_starting=max(1, max_starting if max_starting is not None else cpu),
            per_backend=caps,
            source=source,
            budget_mib=budget_mib,
            cli_mib=size,
            start_window_s=start_window_s,
        )

    def describe(self) -> dict[str, object]:
        return {
            "max_processes": self.max_processes,
            "source": self.source,
            "memory_budget_mib": self.budget_mib,
            "cli_resident_mib": self.cli_mib,
            "max_starting": self.max_starting,
            "per_backend": dict(self.per_backend),
        }


@dataclass(slots=True)
class Limits:
    """The time limits of every call (one value each; ``CallBudget`` is one call's share)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    kill_grace_s: float = 3.0
    max_answer_bytes: int = 8 * 1024 * 1024
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S
    keepalive_s: float = 15.0
    stream_head_hold_s: float = 10.0
    cap_reason: str = "timeout_s"
    """Why a call's cap is what it is (in the timeout error)."""

    @property
    def line_limit(self) -> int:
        """The longest stdout line read: a CLI may print the whole answer in one JSON line
        (escaping adds a little). The reader buffers up to twice this per call."""
        return 2 * self.max_answer_bytes + 1024 * 1024

    def budget(self, stream: bool, headers: Mapping[str, str] | None = None) -> CallBudget:
        """One call's limits, from the moment its request arrived.

        A client that says how long it waits for bytes (openai-python sends its read timeout
        in ``x-stainless-read-timeout``, 600 s by default): a non-streamed answer sends no
        byte before it is whole, so past that time nobody reads it; the call's cap, queue
        wait included, becomes that time. A stream gets keep-alives more often than it."""
        read_timeout = _client_read_timeout(headers)
        now = time.monotonic()
        keepalive = self.keepalive_s
        head_hold = self.stream_head_hold_s
        client_deadline: float | None = None
        if read_timeout is not None:
            if stream:
                keepalive = min(keepalive or read_timeout / 2, read_timeout / 2)
                head_hold = min(head_hold, read_timeout / 2)
            else:
                client_deadline = now + read_timeout
        return CallBudget(self, now, read_timeout, client_deadline, keepalive, head_hold)


def _client_read_timeout(headers: Mapping[str, str] | None) -> float | None:
    raw = (headers or {}).get(CLIENT_READ_TIMEOUT_HEADER)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


@dataclass(frozen=True, slots=True)
class CallBudget:
    """One call's time: when its request arrived, how long it may queue, its deadline."""

    limits: Limits
    arrived: float
    client_read_timeout_s: float | None = None
    client_deadline: float | None = None
    keepalive_s: float = 15.0
    head_hold_s: float = 10.0

    def queue_limit_s(self) -> float:
        """How long it may still wait for a slot."""
        limit = self.limits.queue_timeout_s
        if self.client_deadline is not None:
            limit = min(limit, self.client_deadline - time.monotonic())
        return max(limit, 0.0)

    def deadline(self, admitted: float) -> tuple[float, Limits]:
        """The call's deadline once admitted (its whole ``timeout_s`` from now, the queue
        wait not taken from it, unless the client stops waiting earlier), with the limits
        that name its cap in a timeout error."""
        cap = admitted + self.limits.timeout_s
        if self.client_deadline is not None and self.client_deadline < cap:
            shown = replace(
                self.limits,
                timeout_s=self.client_read_timeout_s or 0.0,
                cap_reason=f"the client's read timeout, {CLIENT_READ_TIMEOUT_HEADER}",
            )
            return self.client_deadline, shown
        return cap, self.limits


async def start_over(pid: int, output_seen: Callable[[], bool], window_s: float) -> None:
    """Returns when the CLI ``pid`` has finished starting: it printed something, or its
    tree used less than ``START_IDLE_CPU`` of a core over the last poll (a spare waiting for
    its prompt, a call waiting for its model), or ``window_s`` passed."""
    end = time.monotonic() + window_s
    last: float | None = None
    at = time.monotonic()
    while time.monotonic() < end and not output_seen():
        await asyncio.sleep(0.1)
        if output_seen():
            return
        sample = await asyncio.to_thread(_tree_cpu, pid)
        now = time.monotonic()
        if sample is None:
            return  # gone
        used, runnable = sample
        # runnable: starting but starved of CPU on a busy machine, not idle
        if last is not None and not runnable and (used - last) / (now - at) < START_IDLE_CPU:
            return
        last, at = used, now


def _tree_cpu(pid: int) -> tuple[float, bool] | None:
    """CPU seconds used so far by ``pid`` and its live descendants, and whether any of
    them is running or waiting for a CPU (state R)."""
    try:
        procs = tree(pid)
    except psutil.Error:
        return None
    total, runnable = 0.0, False
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
            runnable = runnable or p.status() == psutil.STATUS_RUNNING
    return total, runnable


def default_budget(limits: Limits) -> CallBudget:
    """A budget for a call made without an HTTP request (tests, prewarm)."""
    return limits.budget(stream=False)


class _SettingsLike(Protocol):
    backends: list[str]
    max_concurrency: int | None
    max_starting: int | None
    cli_memory_budget_mib: int | None
    start_window_s: float
    timeout_s: float
    idle_timeout_s: float
    kill_grace_s: float
    max_answer_bytes: int
    queue_timeout_s: float
    write_timeout_s: float
    keepalive_s: float
    stream_head_hold_s: float

    def options_for(self, backend: str) -> Any: ...

    def resident_mib(self) -> Mapping[str, int]: ...


def from_settings(s: _SettingsLike) -> tuple[Bounds, Limits]:
    """The bounds and time limits the settings ask for, on this machine."""
    bounds = Bounds.derive(
        s.resident_mib(),
        max_concurrency=s.max_concurrency,
        max_starting=s.max_starting,
        per_backend={b: s.options_for(b).max_concurrency for b in s.backends},
        budget_mib=s.cli_memory_budget_mib,
        start_window_s=s.start_window_s,
    )
    limits = Limits(
        timeout_s=s.timeout_s,
        idle_timeout_s=s.idle_timeout_s,
        kill_grace_s=s.kill_grace_s,
        max_answer_bytes=s.max_answer_bytes,
        queue_timeout_s=s.queue_timeout_s,
        write_timeout_s=s.write_timeout_s,
        keepalive_s=s.keepalive_s,
        stream_head_hold_s=s.stream_head_hold_s,
    )
    return bounds, limits
