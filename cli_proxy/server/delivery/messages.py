"""Anthropic's Messages API (the ``messages`` format): a Message, or its event stream
(``message_start`` ... ``message_stop``), read from the same ``Answer`` as the other
formats."""

from __future__ import annotations

import json
from typing import Any

from cli_proxy.jsonbytes import json_bytes
from cli_proxy.plan.spec import ResponseIds
from cli_proxy.protocol import Usage
from cli_proxy.read.answer_events import AnswerEvent, ContentDelta, ReasoningDelta, ToolCallArgs
from cli_proxy.server.delivery import Answer, Segment
from cli_proxy.server.errors import APIError
from cli_proxy.server.sse import KEEPALIVE, SSE_MEDIA_TYPE
from cli_proxy.server.wire.messages import MessagesRequest, messages_error_body, thinking_shown

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def message_event(kind: str, data: dict[str, Any]) -> bytes:
    """One Anthropic event: its ``event:`` line (the SDKs skip events without one), then
    its ``data:`` line, whose ``type`` is the same name."""
    return (
        f"event: {kind}\n".encode() + b"data: " + json_bytes(data, separators=(",", ":")) + b"\n\n"
    )


def tool_use_id(call_id: str) -> str:
    """A call's id as Anthropic spells one (``toolu_...``); the client sends it back as the
    ``tool_use_id`` of its result, which the next call reads as the chat id it is."""
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def usage(u: Usage) -> dict[str, int]:
    """The chat usage as Anthropic counts it: ``input_tokens`` without the tokens read from
    the prompt cache (which chat's ``prompt_tokens`` includes). Cache writes are not kept
    apart by the gateway: they are in ``input_tokens``, ``cache_creation_input_tokens`` is 0."""
    cached = u.prompt_tokens_details.cached_tokens
    return {
        "input_tokens": max(0, u.prompt_tokens - cached),
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def _input(arguments: str) -> Any:
    """A call's arguments as the object Anthropic's ``input`` is (calls reach delivery
    whole: their arguments are one complete JSON object)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesFormat:
    """A ``message`` object and its stream events, in the order the SDKs' stream
    accumulators take: ``message_start``; per content block ``content_block_start``
    (``ping`` after the first), its deltas, ``content_block_stop``; ``message_delta`` with
    the stop reason and usage; ``message_stop``. Reasoning is a ``thinking`` block when the
    request asks for thinking; its ``signature`` is empty (the gateway has none to give, and
    thinking sent back is not shown to the model)."""

    media_type = SSE_MEDIA_TYPE
    keepalive = KEEPALIVE

    def __init__(self, req: MessagesRequest, ids: ResponseIds) -> None:
        self.model = req.model
        self.reasoning = thinking_shown(req)
        self.id = "msg_" + ids.completion_id.removeprefix("chatcmpl-")
        self._index: dict[int, int] = {}  # id(segment) -> its content block index
        self._open: int | None = None
        self._pinged = False

    # the object -------------------------------------------------------------------

    def _message(self, content: list[dict[str, Any]], stop: str | None, u: Usage) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage(u),
        }

    def body(self, answer: Answer) -> dict[str, Any]:
        end = answer.end
        content = [self._block(s, s.text) for s in answer.segments]
        return self._message(content, STOP_REASONS.get(end.finish_reason, "end_turn"), end.usage)

    def _block(self, seg: Segment, text: str | None = None) -> dict[str, Any]:
        """A segment as a content block: whole, or (``text`` None) as it starts."""
        if seg.kind == "text":
            return {"type": "text", "text": text or ""}
        if seg.kind == "reasoning":
            return {"type": "thinking", "thinking": text or "", "signature": ""}
        whole = _input(text) if text is not None else {}
        return {
            "type": "tool_use",
            "id": tool_use_id(seg.call_id),
            "name": seg.name,
            "input": whole,
        }

    # the stream -------------------------------------------------------------------

    def head(self) -> list[bytes]:
        start = self._message([], None, Usage())
        return [message_event("message_start", {"type": "message_start", "message": start})]

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]:
        out = []
        if new:
            out += self._stop()
            index = self._index[id(seg)] = len(self._index)
            self._open = index
            block = self._block(seg)
            out.append(
                message_event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            )
            if not self._pinged:
                self._pinged = True
                out.append(PING)
        index = self._index[id(seg)]
        delta: dict[str, Any] | None = None
        if isinstance(ev, ContentDelta) and ev.text:
            delta = {"type": "text_delta", "text": ev.text}
        elif isinstance(ev, ReasoningDelta) and ev.text:
            delta = {"type": "thinking_delta", "thinking": ev.text}
        elif isinstance(ev, ToolCallArgs) and ev.fragment:
            delta = {"type": "input_json_delta", "partial_json": ev.fragment}
        if delta is not None:
            out.append(
                message_event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        return [b"".join(out)] if len(out) > 1 else out  # one write per answer event

    def _stop(self) -> list[bytes]:
        index, self._open = self._open, None
        if index is None:
            return []
        return [message_event("content_block_stop", {"type": "content_block_stop", "index": index})]

    def tail(self, answer: Answer) -> list[bytes]:
        end = answer.end
        delta = {
            "stop_reason": STOP_REASONS.get(end.finish_reason, "end_turn"),
            "stop_sequence": None,
        }
        final = {"type": "message_delta", "delta": delta, "usage": usage(end.usage)}
        stop = message_event("message_stop", {"type": "message_stop"})
        return [b"".join([*self._stop(), message_event("message_delta", final), stop])]

    def fail(self, answer: Answer, err: APIError) -> list[bytes]:
        """The answer broke off after the stream started: an ``error`` event with
        Anthropic's error body (the SDKs raise on it), then the connection closes."""
        return [message_event("error", messages_error_body(err))]
