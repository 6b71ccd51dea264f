"""Normalized events a backend parser extracts from a CLI's stream-json output."""

from __future__ import annotations

from dataclasses import dataclass

from .failures import FailureKind


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the model's answer text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Token counts as the CLI reports them (the last report wins). ``prompt_tokens`` includes
    the ``cached_tokens`` read from the provider's prompt cache."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


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


CliEvent = TextDelta | UsageReport | Failure | Truncated
