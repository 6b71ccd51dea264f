"""Delivery: the one place where a call's answer events become what the client reads.

A call (``call.py``) yields answer events and ends with ``Finished``. ``Answer`` is the one
accumulator of them: ordered segments (reasoning, text, tool calls), so that every format
reads the same answer. A format turns it into bytes twice over: whole (``body``: chat
completion JSON or a Response object) or as it grows (``head`` / ``event`` / ``tail`` /
``fail``: chat completion chunks or typed Responses events). ``deliver`` runs the call into
one or the other; adding a kind of answer event touches ``Answer`` and the two formats only.

Streams: the response head waits for the first answer event (up to ``stream_head_hold_s``),
so a failure before any answer (a CLI-reported 429, 401, 5xx) gets its real HTTP status and
headers, as without streaming, and SDKs can retry it; after that it is an SSE error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aiohttp import web

from cli_proxy.config import Settings
from cli_proxy.failures import CallError
from cli_proxy.jsonbytes import json_bytes
from cli_proxy.logs import log
from cli_proxy.plan.spec import ResponseIds
from cli_proxy.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    ResponseFunction,
    ResponseMessage,
    ResponseToolCall,
    Usage,
)
from cli_proxy.read.reply import (
    AnswerEvent,
    ContentDelta,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallStart,
)
from cli_proxy.run.call import Call, Finished
from cli_proxy.server.errors import APIError, api_error
from cli_proxy.server.sse import DONE, SlowClient, SSEWriter, encode, error_event
from cli_proxy.server.wire.responses import ResponsesRequest

HEAD_SENT: web.RequestKey[bool] = web.RequestKey("head_sent", bool)  # a stream's 200 is out
DELIVERED: web.RequestKey[bool] = web.RequestKey("delivered", bool)  # the last byte was sent
SLOW: web.RequestKey[bool] = web.RequestKey("slow", bool)  # dropped: it stopped reading


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json_bytes(body), status=status, content_type="application/json", headers=headers
    )


# ------------------------------------------------------------------ the answer, once


SegmentKind = Literal["reasoning", "text", "call"]


@dataclass(eq=False)
class Segment:
    """One run of the answer: reasoning, text, or one tool call (its argument pieces)."""

    kind: SegmentKind
    parts: list[str] = field(default_factory=list)
    index: int = -1  # a call's index among the answer's calls
    call_id: str = ""
    name: str = ""
    item_id: str = ""  # its Responses output item, once it has one
    status: str = ""  # its Responses item's status once closed

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Answer:
    """Every answer event of one call, accumulated in order; ``finished`` once it ended."""

    def __init__(self, reasoning: bool) -> None:
        self.reasoning_shown = reasoning  # else reasoning events are not kept
        self.segments: list[Segment] = []
        self.calls: dict[int, Segment] = {}
        self.finished: Finished | None = None

    def add(self, ev: AnswerEvent | Finished) -> tuple[Segment, bool] | None:
        """Take one event; returns the segment it went to and whether that segment is new
        (None: nothing to deliver)."""
        if isinstance(ev, Finished):
            self.finished = ev
            return None
        if isinstance(ev, ToolCallStart):
            seg = Segment("call", index=ev.index, call_id=ev.id, name=ev.name)
            self.segments.append(seg)
            self.calls[ev.index] = seg
            return seg, True
        if isinstance(ev, ToolCallArgs):
            seg = self.calls[ev.index]
            seg.parts.append(ev.fragment)
            return seg, False
        if isinstance(ev, ReasoningDelta) and not self.reasoning_shown:
            return None
        kind: SegmentKind = "reasoning" if isinstance(ev, ReasoningDelta) else "text"
        last = self.segments[-1] if self.segments else None
        if last is not None and last.kind == kind:
            last.parts.append(ev.text)
            return last, False
        seg = Segment(kind, [ev.text])
        self.segments.append(seg)
        return seg, True

    def text(self, kind: SegmentKind) -> str:
        return "".join(s.text for s in self.segments if s.kind == kind)

    def complete_calls(self) -> list[Segment]:
        return [s for s in self.segments if s.kind == "call"]

    @property
    def end(self) -> Finished:
        assert self.finished is not None, "the call ended without its Finished event"
        return self.finished


class Format(Protocol):
    """One wire format of an answer, whole or as a stream."""

    reasoning: bool  # whether reasoning is part of this answer

    def body(self, answer: Answer) -> dict[str, Any]: ...

    def head(self) -> list[bytes]: ...

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]: ...

    def tail(self, answer: Answer) -> list[bytes]: ...

    def fail(self, answer: Answer, err: APIError) -> list[bytes]: ...


# ------------------------------------------------------------------ chat completions


class ChatFormat:
    """``chat.completion`` and its chunks; reasoning as ``reasoning_content`` (the vLLM,
    DeepSeek and LiteLLM convention) when the gateway's ``reasoning_output`` is on."""

    def __init__(self, req: ChatCompletionRequest, ids: ResponseIds, reasoning: bool) -> None:
        self.model = req.model
        self.reasoning = reasoning
        self.include_usage = bool(req.stream_options and req.stream_options.include_usage)
        self.base = {
            "id": ids.completion_id,
            "object": "chat.completion.chunk",
            "created": ids.created,
            "model": req.model,
            "system_fingerprint": None,
        }

    def body(self, answer: Answer) -> dict[str, Any]:
        end = answer.end
        calls = [
            ResponseToolCall(id=s.call_id, function=ResponseFunction(name=s.name, arguments=s.text))
            for s in answer.complete_calls()
        ]
        text = answer.text("text")
        message = ResponseMessage(content=text or None, tool_calls=calls or None)
        if not calls and not text:
            message.content = ""
        body = ChatCompletion(
            id=end.ids.completion_id,
            created=end.ids.created,
            model=self.model,
            choices=[Choice(message=message, finish_reason=end.finish_reason)],  # type: ignore[arg-type]
            usage=end.usage,
        ).model_dump()
        reasoning = answer.text("reasoning")
        if reasoning:
            body["choices"][0]["message"]["reasoning_content"] = reasoning
        return body

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        payload: dict[str, Any] = {**self.base, "choices": [choice]}
        if self.include_usage:
            payload["usage"] = None
        return encode(payload)

    def head(self) -> list[bytes]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]:
        if isinstance(ev, ContentDelta):
            return [self._chunk({"content": ev.text})]
        if isinstance(ev, ReasoningDelta):
            return [self._chunk({"reasoning_content": ev.text})]
        if isinstance(ev, ToolCallStart):
            call = {
                "index": ev.index,
                "id": ev.id,
                "type": "function",
                "function": {"name": ev.name, "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        args = {"index": ev.index, "function": {"arguments": ev.fragment}}
        return [self._chunk({"tool_calls": [args]})]

    def tail(self, answer: Answer) -> list[bytes]:
        end = answer.end
        out = [self._chunk({}, end.finish_reason)]
        if self.include_usage:
            out.append(encode({**self.base, "choices": [], "usage": end.usage.model_dump()}))
        return [*out, DONE]

    def fail(self, answer: Answer, err: APIError) -> list[bytes]:
        return [error_event(err)]


# ------------------------------------------------------------------ Responses API


Status = Literal["in_progress", "completed", "incomplete", "failed"]
SUMMARY_KINDS = ("auto", "concise", "detailed")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def encode_event(event: dict[str, Any]) -> bytes:
    """A typed Responses event: its ``event:`` line, then the usual ``data:`` line."""
    return f"event: {event['type']}\n".encode() + encode(event)


class ResponsesFormat:
    """A Response object and its typed stream events, in the order the official SDKs'
    stream accumulators accept. A reasoning item (its ``summary`` as one ``summary_text``
    part) is part of the answer only when the request asks for a summary
    (``reasoning.summary``), as with OpenAI's own reasoning models."""

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
        return encode_event(event)

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
            self._event("error", code=err.code, message=err.message, param=err.param, **err.body()),
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


# ------------------------------------------------------------------ running a call out


async def collect(call: Call, reasoning: bool = False) -> Answer:
    """The whole answer of a call without HTTP (tests, benches, tools)."""
    answer = Answer(reasoning)
    async with contextlib.aclosing(call.events()) as events:
        async for ev in events:
            answer.add(ev)
    return answer


async def deliver(
    request: web.Request, call: Call, fmt: Format, stream: bool, settings: Settings
) -> web.StreamResponse:
    """Run ``call`` and send its answer in ``fmt``: one JSON body, or an SSE stream."""
    answer = Answer(fmt.reasoning)
    async with contextlib.aclosing(call.events()) as events:
        if not stream:
            async for ev in events:
                answer.add(ev)
            return json_response(fmt.body(answer))
        return await _stream(request, events, answer, fmt, settings, call)


async def _stream(
    request: web.Request,
    events: AsyncIterator[AnswerEvent | Finished],
    answer: Answer,
    fmt: Format,
    settings: Settings,
    call: Call,
) -> web.StreamResponse:
    """The one SSE loop: head, the format's bytes per answer event, tail (or the error
    events), keep-alives in between, then close. Keep-alives (and the head's hold) come at
    least twice per the client's read timeout; no write outlives the call's deadline
    (``limits.CallBudget``)."""
    budget = call.budget
    first: asyncio.Task[AnswerEvent | Finished] = asyncio.ensure_future(anext(events))
    try:
        await asyncio.wait({first}, timeout=budget.head_hold_s)
        if first.done() and first.exception() is not None:
            exc = first.exception()
            if isinstance(exc, CallError):
                raise exc  # nothing sent yet: a real status (the middleware's)
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        resp.force_close()  # some SDK versions keep reading after the end unless we close
        await resp.prepare(request)
        request[HEAD_SENT] = True
        out = SSEWriter(resp, budget.keepalive_s, settings.write_timeout_s, lambda: call.deadline)
        for data in fmt.head():
            await out.write(data)
        out.start()
        try:
            try:
                async for ev in _after(first, events):
                    step = answer.add(ev)
                    if step is not None and not isinstance(ev, Finished):
                        seg, new = step
                        for data in fmt.event(answer, seg, new, ev):
                            await out.write(data)
            except CallError as exc:
                for data in fmt.fail(answer, api_error(exc)):
                    await out.write(data)
            else:
                for data in fmt.tail(answer):
                    await out.write(data)
        except SlowClient:
            log.info("slow_client_dropped", path=request.path, why=out.stalled)
            request[SLOW] = True
            if request.transport is not None:
                request.transport.abort()  # the buffered answer goes, the slot is freed
            return resp
        finally:
            out.stop()
    finally:
        if not first.done():
            first.cancel()
    await resp.write_eof()
    request[DELIVERED] = True
    return resp


async def _after(
    first: asyncio.Task[AnswerEvent | Finished], rest: AsyncIterator[AnswerEvent | Finished]
) -> AsyncIterator[AnswerEvent | Finished]:
    """The answer events again: the first (already being awaited), then the rest."""
    try:
        yield await first
    except StopAsyncIteration:
        return
    async for ev in rest:
        yield ev
