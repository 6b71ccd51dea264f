"""The answer events: what a call's answer is made of, as it arrives (text, reasoning, a tool
call and its arguments).

The reader of the model's answer (``read/reply.py``) makes them; the call (``run/call.py``)
passes them on, and every wire format's delivery (``server/delivery/``) turns them into its
own JSON or SSE. Usage, finish and rate limits travel beside them on the call.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """A piece of the reply text, decoded."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call; comes once per call, right before its ``ToolCallArgs``."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgs:
    """A call's arguments JSON text (one piece from this parser: the whole, complete object;
    consumers still concatenate pieces of a call, as OpenAI's stream format does)."""

    index: int
    fragment: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of what the model thought (the CLI's thinking); never content, never parsed."""

    text: str


AnswerEvent = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgs
