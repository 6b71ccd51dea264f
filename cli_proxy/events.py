"""Normalized events a backend parser extracts from its CLI's output (the CLI side).

The answer side (``answer.py``) turns them into what the client sees: ``CliText`` becomes
content (or, in tools mode, is read as the model's JSON answer), ``CliThinking`` becomes
reasoning, ``CliToolCall`` a tool call, ``UsageReport`` the usage, ``Failure`` an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from .failures import FailureKind


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


CliEvent = CliText | CliThinking | CliToolCall | UsageReport | Failure | Truncated
