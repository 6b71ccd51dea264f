"""Google's ``generateContent``: a ``GenerateContentResponse``, or its stream, read from the
same ``Answer`` as the other formats.

Streams come two ways, as the REST API sends them: with ``?alt=sse`` (google-genai, the
Gemini CLI) one ``data: <GenerateContentResponse>`` event per piece; without it one JSON
array whose elements are those responses. Keep-alives are empty-text chunks, never SSE
comment lines (google-genai raises ``UnknownApiResponseError`` on a ``:`` line, the Gemini
CLI fails with "Incomplete JSON segment"). Every stream ends with a chunk carrying a
``finishReason`` (the Gemini CLI retries a stream without one four times), and a failure
after the head is an ``{"error": {...}}`` element the SDKs raise.
"""

from __future__ import annotations

import json
from typing import Any

from cli_proxy.jsonbytes import json_bytes
from cli_proxy.plan.spec import ResponseIds
from cli_proxy.protocol import Usage
from cli_proxy.read.reply import AnswerEvent, ContentDelta, ReasoningDelta, ToolCallArgs
from cli_proxy.server.delivery import Answer, Segment
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire.generate_content import generate_content_error_body

FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}
SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"
ARRAY_MEDIA_TYPE = "application/json; charset=utf-8"


def usage_metadata(u: Usage) -> dict[str, int]:
    """The chat usage as Gemini counts it: ``promptTokenCount`` includes the cached tokens
    (``cachedContentTokenCount``, a part of it); thoughts are counted apart from the
    candidates (``thoughtsTokenCount``), and the total is all three."""
    thoughts = u.completion_tokens_details.reasoning_tokens
    candidates = max(0, u.completion_tokens - thoughts)
    return {
        "promptTokenCount": u.prompt_tokens,
        "candidatesTokenCount": candidates,
        "totalTokenCount": u.prompt_tokens + candidates + thoughts,
        "cachedContentTokenCount": u.prompt_tokens_details.cached_tokens,
        "thoughtsTokenCount": thoughts,
    }


def _args(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object ``functionCall.args`` is (the SDK refuses a string)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _complete(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


class GenerateContentFormat:
    """One candidate (index 0), role ``model``; parts text, ``thought: true`` text when the
    request's ``thinkingConfig.includeThoughts`` asks, ``functionCall {name, args, id}``. A
    function call is sent whole, once its arguments are a complete object."""

    def __init__(self, model: str, ids: ResponseIds, thoughts: bool, sse: bool = True) -> None:
        self.model = model
        self.reasoning = thoughts
        self.sse = sse
        self.response_id = ids.completion_id.removeprefix("chatcmpl-")
        self.media_type = SSE_MEDIA_TYPE if sse else ARRAY_MEDIA_TYPE
        self._sent: set[int] = set()  # id() of the call segments already sent
        self.keepalive = self._element(self._chunk([{"text": ""}]), first=False)

    # the object -------------------------------------------------------------------

    def _response(
        self, parts: list[dict[str, Any]], finish: str | None, u: Usage | None
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        out: dict[str, Any] = {"candidates": [candidate]}
        if u is not None:
            out["usageMetadata"] = usage_metadata(u)
        out["modelVersion"] = self.model
        out["responseId"] = self.response_id
        return out

    def _part(self, seg: Segment) -> dict[str, Any]:
        if seg.kind == "text":
            return {"text": seg.text}
        if seg.kind == "reasoning":
            return {"text": seg.text, "thought": True}
        return {"functionCall": {"name": seg.name, "args": _args(seg.text), "id": seg.call_id}}

    def body(self, answer: Answer) -> dict[str, Any]:
        end = answer.end
        parts = [self._part(s) for s in answer.segments]
        if not parts:
            parts = [{"text": ""}]
        return self._response(parts, FINISH_REASONS.get(end.finish_reason, "STOP"), end.usage)

    # the stream -------------------------------------------------------------------

    def _chunk(
        self, parts: list[dict[str, Any]], finish: str | None = None, u: Usage | None = None
    ) -> dict[str, Any]:
        return self._response(parts, finish, u)

    def _element(self, payload: dict[str, Any], first: bool = False) -> bytes:
        data = json_bytes(payload, separators=(",", ":"))
        if self.sse:
            return b"data: " + data + b"\r\n\r\n"
        return (b"" if first else b",\r\n") + data

    def head(self) -> list[bytes]:
        """SSE: nothing yet. The JSON array: its ``[`` and a first, empty-text element, so
        that every later element (and keep-alive) is one ``,``-led piece."""
        if self.sse:
            return []
        return [b"[" + self._element(self._chunk([{"text": ""}]), first=True)]

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]:
        parts: list[dict[str, Any]] = []
        if isinstance(ev, ContentDelta) and ev.text:
            parts.append({"text": ev.text})
        elif isinstance(ev, ReasoningDelta) and ev.text:
            parts.append({"text": ev.text, "thought": True})
        elif isinstance(ev, ToolCallArgs) and id(seg) not in self._sent and _complete(seg.text):
            self._sent.add(id(seg))
            parts.append(self._part(seg))
        if not parts:
            return []
        return [self._element(self._chunk(parts))]

    def tail(self, answer: Answer) -> list[bytes]:
        """The last chunk: calls not sent yet, the finish reason and the usage."""
        end = answer.end
        parts = [self._part(s) for s in answer.complete_calls() if id(s) not in self._sent] or [
            {"text": ""}
        ]
        finish = FINISH_REASONS.get(end.finish_reason, "STOP")
        last = self._element(self._chunk(parts, finish, end.usage))
        return [last if self.sse else last + b"]"]

    def fail(self, answer: Answer, err: APIError) -> list[bytes]:
        """The answer broke off after the stream started: an element with Google's error
        body (google-genai raises it as an ``APIError``), then the connection closes."""
        data = self._element(generate_content_error_body(err))
        return [data if self.sse else data + b"]"]
