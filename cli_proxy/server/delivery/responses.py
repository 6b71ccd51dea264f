"""The Responses API: a Response object, or its typed ``response.*`` stream events."""

from __future__ import annotations

import copy
import secrets
from typing import Any, Literal

from cli_proxy.plan.spec import ResponseIds
from cli_proxy.protocol import (
    ChatCompletionRequest,
    Usage,
)
from cli_proxy.read.answer_events import (
    AnswerEvent,
    ContentDelta,
    ReasoningDelta,
    ToolCallArgs,
)
from cli_proxy.server.delivery import Answer, Segment
from cli_proxy.server.errors import APIError
from cli_proxy.server.sse import KEEPALIVE, SSE_MEDIA_TYPE, encode
from cli_proxy.server.wire.chat import chat_error_body
from cli_proxy.server.wire.responses import ResponsesRequest

Status = Literal["in_progress", "completed", "incomplete", "failed"]
SUMMARY_KINDS = ("auto", "concise", "detailed")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def response_event(event: dict[str, Any]) -> bytes:
    """A typed Responses event: its ``event:`` line, then the usual ``data:`` line."""
    return f"event: {event['type']}\n".encode() + encode(event)


class ResponsesFormat:
    """A Response object and its typed stream events, in the order the official SDKs'
    stream accumulators accept. A reasoning item (its ``summary`` as one ``summary_text``
    part) is part of the answer only when the request asks for a summary
    (``reasoning.summary``), as with OpenAI's own reasoning models."""

    media_type = SSE_MEDIA_TYPE
    keepalive = KEEPALIVE

    def __init__(
        self, req: ResponsesRequest, chat: ChatCompletionRequest, ids: ResponseIds
    ) -> None:
        self.req = req
        self.chat = chat
        self.id = "resp_" + ids.completion_id.removeprefix("chatcmpl-")
        self.created = ids.created
        summary = (req.reasoning or {}).get("summary")
        self.reasoning = summary in SUMMARY_KINDS
        self.seq = 0
        self._open: Segment | None = None

    # the object -------------------------------------------------------------------

    def body(self, answer: Answer) -> dict[str, Any]:
        end = answer.end
        status: Status = "incomplete" if end.finish_reason == "length" else "completed"
        return self._response(answer, status, end.usage)

    def _item(self, seg: Segment, status: str) -> dict[str, Any]:
        if not seg.item_id:
            seg.item_id = _new_id({"text": "msg", "call": "fc", "reasoning": "rs"}[seg.kind])
        if seg.kind == "text":
            return {
                "id": seg.item_id,
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": [{"type": "output_text", "text": seg.text, "annotations": []}],
            }
        if seg.kind == "reasoning":
            return {
                "id": seg.item_id,
                "type": "reasoning",
                "status": status,
                "summary": [{"type": "summary_text", "text": seg.text}],
            }
        return {
            "id": seg.item_id,
            "type": "function_call",
            "call_id": seg.call_id,
            "name": seg.name,
            "arguments": seg.text,
            "status": status,
        }

    def _response(
        self, answer: Answer | None, status: Status, usage: Usage, err: APIError | None = None
    ) -> dict[str, Any]:
        done = answer is not None and status != "in_progress"
        segments = answer.segments if answer is not None and done else []
        output = [self._item(s, s.status or "completed") for s in segments]
        tools = [
            {"type": "function", "strict": t.function.strict, **_fn(t.function.model_dump())}
            for t in self.chat.tools or []
        ]
        reasoning = self.req.reasoning
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.req.model,
            "output": output,
            "output_text": "".join(s.text for s in segments if s.kind == "text"),
            "error": {"code": _failure_code(err), "message": err.message}
            if err is not None
            else None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": self.req.instructions,
            "metadata": self.req.metadata or {},
            "parallel_tool_calls": self.req.parallel_tool_calls is not False,
            "tool_choice": self.req.tool_choice or "auto",
            "tools": tools,
            "temperature": self.req.temperature,
            "top_p": self.req.top_p,
            "max_output_tokens": self.req.max_output_tokens,
            "previous_response_id": None,
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
            if reasoning
            else None,
            "store": False,
            "text": {"format": (self.req.text or {}).get("format") or {"type": "text"}},
            "truncation": "disabled",
            "user": self.req.user,
            "usage": {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {
                    "cached_tokens": usage.prompt_tokens_details.cached_tokens,
                    "cache_write_tokens": 0,
                },
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {
                    "reasoning_tokens": usage.completion_tokens_details.reasoning_tokens
                },
                "total_tokens": usage.total_tokens,
            }
            if done
            else None,
        }

    # the stream -------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return response_event(event)

    def head(self) -> list[bytes]:
        snapshot = self._response(None, "in_progress", Usage())
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]:
        out = []
        idx = answer.segments.index(seg)
        if new:
            out += self._close(answer)
            self._open = seg
            item = self._item(seg, "in_progress")
            if seg.kind == "text":
                item["content"] = []
            elif seg.kind == "reasoning":
                item["summary"] = []
            else:
                item["arguments"] = ""
            out.append(self._event("response.output_item.added", output_index=idx, item=item))
            if seg.kind == "text":
                part = {"type": "output_text", "text": "", "annotations": []}
                out.append(
                    self._event(
                        "response.content_part.added",
                        item_id=seg.item_id,
                        output_index=idx,
                        content_index=0,
                        part=part,
                    )
                )
            elif seg.kind == "reasoning":
                out.append(
                    self._event(
                        "response.reasoning_summary_part.added",
                        item_id=seg.item_id,
                        output_index=idx,
                        summary_index=0,
                        part={"type": "summary_text", "text": ""},
                    )
                )
        if isinstance(ev, ContentDelta):
            out.append(
                self._event(
                    "response.output_text.delta",
                    item_id=seg.item_id,
                    output_index=idx,
                    content_index=0,
                    delta=ev.text,
                    logprobs=[],
                )
            )
        elif isinstance(ev, ReasoningDelta):
            out.append(
                self._event(
                    "response.reasoning_summary_text.delta",
                    item_id=seg.item_id,
                    output_index=idx,
                    summary_index=0,
                    delta=ev.text,
                )
            )
        elif isinstance(ev, ToolCallArgs):
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=seg.item_id,
                    output_index=idx,
                    delta=ev.fragment,
                )
            )
        return out

    def _close(self, answer: Answer) -> list[bytes]:
        seg, self._open = self._open, None
        if seg is None:
            return []
        idx = answer.segments.index(seg)
        seg.status = "completed"
        item = self._item(seg, "completed")
        if seg.kind == "text":
            part = item["content"][0]
            out = [
                self._event(
                    "response.output_text.done",
                    item_id=seg.item_id,
                    output_index=idx,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=seg.item_id,
                    output_index=idx,
                    content_index=0,
                    part=copy.deepcopy(part),
                ),
            ]
        elif seg.kind == "reasoning":
            part = item["summary"][0]
            out = [
                self._event(
                    "response.reasoning_summary_text.done",
                    item_id=seg.item_id,
                    output_index=idx,
                    summary_index=0,
                    text=part["text"],
                ),
                self._event(
                    "response.reasoning_summary_part.done",
                    item_id=seg.item_id,
                    output_index=idx,
                    summary_index=0,
                    part=copy.deepcopy(part),
                ),
            ]
        else:
            out = [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=seg.item_id,
                    output_index=idx,
                    name=seg.name,
                    arguments=seg.text,
                )
            ]
        return [*out, self._event("response.output_item.done", output_index=idx, item=item)]

    def tail(self, answer: Answer) -> list[bytes]:
        """Close the open item, then the final Response (``response.incomplete`` when the
        answer was cut off by the output limit; a cut call was never emitted)."""
        out = self._close(answer)
        final = self.body(answer)
        return [*out, self._event(f"response.{final['status']}", response=final)]

    def fail(self, answer: Answer, err: APIError) -> list[bytes]:
        """The answer broke off after the stream started: ``response.failed`` (what Codex
        and other Responses clients act on), then an ``error`` event that also carries the
        chat-style ``error`` object, on which openai-python raises ``APIError``."""
        if self._open is not None:  # it never completed: no done event, status incomplete
            self._open.status = "incomplete"
            self._open = None
        final = self._response(answer, "failed", Usage(), err)
        return [
            self._event("response.failed", response=final),
            self._event(
                "error", code=err.code, message=err.message, param=err.param, **chat_error_body(err)
            ),
        ]


def _failure_code(err: APIError) -> str:
    """``Response.error.code`` is a closed set; the precise code stays on the error event."""
    if err.status == 429:
        return "rate_limit_exceeded"
    return "invalid_prompt" if err.status == 400 else "server_error"


def _fn(fn: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": fn["name"],
        "description": fn.get("description"),
        "parameters": fn.get("parameters") or {"type": "object", "properties": {}},
    }
