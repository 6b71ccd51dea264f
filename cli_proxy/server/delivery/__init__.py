"""Delivery: the one place where a call's answer events become what the client reads.

A call (``call.py``) yields answer events and ends with ``Finished``. ``Answer`` is the one
accumulator of them: ordered segments (reasoning, text, tool calls), so that every format
reads the same answer. A format turns it into bytes twice over: whole (``body``: chat
completion JSON or a Response object) or as it grows (``head`` / ``event`` / ``tail`` /
``fail``: chat completion chunks or typed Responses events), one module a wire format
(``chat.py``, ``responses.py``, ``messages.py``; each API's entry in ``formats.py`` names
its own). ``deliver`` runs the call into one or the other; adding a kind of answer event
touches ``Answer`` and the formats only.

Streams: the response head waits for the first answer event (up to ``stream_head_hold_s``),
so a failure before any answer (a CLI-reported 429, 401, 5xx) gets its real HTTP status and
headers, as without streaming, and SDKs can retry it; after that it is an SSE error event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aiohttp import web

from cli_proxy.config import Settings
from cli_proxy.failures import CallError
from cli_proxy.jsonbytes import json_bytes
from cli_proxy.logs import log
from cli_proxy.read.answer_events import (
    AnswerEvent,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallStart,
)
from cli_proxy.run.call import Call, Finished
from cli_proxy.server.errors import APIError, api_error
from cli_proxy.server.sse import SlowClient, SSEWriter

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
    media_type: str  # a stream's Content-Type (``sse.SSE_MEDIA_TYPE`` but for a JSON-array stream)
    keepalive: bytes  # written in a stream's silences (``sse.KEEPALIVE``: a comment line)

    def body(self, answer: Answer) -> dict[str, Any]: ...

    def head(self) -> list[bytes]: ...

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]: ...

    def tail(self, answer: Answer) -> list[bytes]: ...

    def fail(self, answer: Answer, err: APIError) -> list[bytes]: ...


# ------------------------------------------------------------------ running a call out


async def collect_answer(call: Call, reasoning: bool = False) -> Answer:
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
                "Content-Type": fmt.media_type,
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        resp.force_close()  # some SDK versions keep reading after the end unless we close
        await resp.prepare(request)
        request[HEAD_SENT] = True
        out = SSEWriter(
            resp,
            budget.keepalive_s,
            settings.write_timeout_s,
            lambda: call.deadline,
            fmt.keepalive,
        )
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
