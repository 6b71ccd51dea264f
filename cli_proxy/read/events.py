"""Normalized events a backend parser extracts from its CLI's output (the CLI side).

The call (``run/call.py``'s ``AnswerReader``, with ``read/reply.py`` in tools mode) turns them
into answer events (``read/answer_events.py``), which each wire format delivers: ``CliText`` becomes
content (or, in tools mode, is read as the model's JSON answer), ``CliThinking`` becomes
reasoning, ``CliToolCall`` a tool call, ``UsageReport`` the usage, ``Failure`` an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from cli_proxy.failures import FailureKind


@dataclass(frozen=True, slots=True)
class CliText:
    """A piece of the model's answer text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class CliThinking:
    """A piece of what the model thought before or between its answer's parts. Never content,
    never read as a tool call; shown to the client only as reasoning, on request."""

    text: str


@dataclass(frozen=True, slots=True)
class CliToolCall:
    """A call of one of the client's functions made through the CLI's own channel (a backend
    with ``native_tools``), whole: ``arguments`` is the JSON text of the arguments object."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Token counts as the CLI reports them (the last report wins). ``prompt_tokens`` includes
    the ``cached_tokens`` read from the provider's prompt cache."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # of ``completion_tokens``, where the CLI reports them


@dataclass(frozen=True, slots=True)
class Failure:
    """The CLI said the call failed; ``kind`` says why (mapped to HTTP only at the edge)."""

    kind: FailureKind
    message: str
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Truncated:
    """The answer hit the output token limit: what arrived stands, finish_reason "length"."""

    message: str


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The subscription's rate-limit state as the CLI reports it (claude's
    ``rate_limit_event``, codex's ``account/rateLimits/updated``, gemini's quota errors): one
    window (``five_hour``, ``seven_day``, ...), its status (``allowed``, ``allowed_warning``,
    ``rejected``), how much of it is used (0-1, when said), when it resets (epoch seconds,
    when said) and its length in minutes (when said or known by its name). Not part of the
    answer."""

    window: str
    status: str
    utilization: float | None = None
    resets_at: float | None = None
    window_minutes: int | None = None


WINDOW_NAMES = {300: "five_hour", 10080: "seven_day"}
"""Window names by length in minutes, as claude names its windows (``rateLimitType``); a
length without a name here is called ``<N>_min``."""


def window_name(minutes: int) -> str:
    """A window's name from its length: ``five_hour``, ``seven_day``, else ``<N>_min``."""
    return WINDOW_NAMES.get(minutes, f"{minutes}_min")


CliEvent = CliText | CliThinking | CliToolCall | UsageReport | Failure | Truncated | RateLimit


class StreamParser:
    """Stateful reader of one CLI run's stdout, line by line: the CLI side of one call.

    ``done`` turns true once the CLI said its last word (its result): the answer is complete,
    whatever the process does. A backend whose CLI speaks a duplex protocol (JSON-RPC over
    stdio: requests it must answer, a session to open before the prompt) also writes: after
    each ``feed`` the call sends what ``replies()`` returns to the CLI's stdin, which stays
    open until the parser is done (``Backend.duplex``)."""

    done: bool = False
    wake_s: float | None = None
    """When set, the call feeds ``b""`` if no line arrives within that many seconds: a duplex
    parser's timer (codex: collect a response's parallel tool calls, then interrupt)."""

    def feed(self, line: bytes) -> list[CliEvent]:
        raise NotImplementedError

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        raise NotImplementedError

    def replies(self) -> bytes:
        """Bytes to write to the CLI's stdin now (duplex backends); empty for the others."""
        return b""
