"""Chat completion chunks in the exact shape OpenAI streaming clients accumulate."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from .answer import AnswerEvent, ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart
from .errors import APIError
from .protocol import Usage

DONE = b"data: [DONE]\n\n"


def utf8(text: str) -> bytes:
    """UTF-8 bytes of any str: a lone surrogate (from a client's ``\\ud800`` escape or a
    model's) becomes U+FFFD instead of failing the whole response."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8")


def dumps(payload: Any, **kw: Any) -> bytes:
    """JSON as UTF-8 bytes, whatever strings it holds."""
    return utf8(json.dumps(payload, ensure_ascii=False, **kw))


def encode(payload: dict[str, Any]) -> bytes:
    return b"data: " + dumps(payload, separators=(",", ":")) + b"\n\n"


class ChunkBuilder:
    """Same id/created/model on every chunk; role sent once, tool identity sent once."""

    def __init__(self, completion_id: str, created: int, model: str, include_usage: bool) -> None:
        self.base = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
        }
        self.include_usage = include_usage

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        payload = {
            **self.base,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            payload["usage"] = None
        return encode(payload)

    def role(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def event(self, ev: AnswerEvent) -> bytes:
        if isinstance(ev, ReasoningDelta):
            return b""  # reasoning output: not yet on the chat wire
        if isinstance(ev, ContentDelta):
            return self._chunk({"content": ev.text})
        if isinstance(ev, ToolCallStart):
            call = {
                "index": ev.index,
                "id": ev.id,
                "type": "function",
                "function": {"name": ev.name, "arguments": ""},
            }
            return self._chunk({"tool_calls": [call]})
        assert isinstance(ev, ToolCallArgs)
        return self._chunk(
            {"tool_calls": [{"index": ev.index, "function": {"arguments": ev.fragment}}]}
        )

    def finish(self, finish_reason: str) -> bytes:
        return self._chunk({}, finish_reason)

    def usage(self, usage: Usage) -> bytes:
        return encode({**self.base, "choices": [], "usage": usage.model_dump()})


def error_event(err: APIError) -> bytes:
    return encode(err.body())


KEEPALIVE = b": keep-alive\n\n"


class SlowClient(Exception):
    """The client stopped reading: a write did not complete within the write timeout."""


class SSEWriter:
    """Writes SSE events; during long silences (a CLI thinking, queued retries) it sends
    ``:`` comment lines, which every client ignores, so idle-timeout proxies keep the
    connection open. A write that does not complete within ``write_timeout_s`` (a client
    that stopped reading, its socket buffers full) raises ``SlowClient``: the call is then
    ended, its CLI killed and its slot freed, instead of held for as long as the client likes."""

    def __init__(
        self, resp: web.StreamResponse, keepalive_s: float, write_timeout_s: float = 30.0
    ) -> None:
        self.resp = resp
        self.keepalive_s = keepalive_s
        self.write_timeout_s = write_timeout_s
        self._last = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    async def write(self, data: bytes) -> None:
        self._last = time.monotonic()
        try:
            await asyncio.wait_for(self.resp.write(data), self.write_timeout_s)
        except TimeoutError:
            raise SlowClient(f"no write progress for {self.write_timeout_s:g} s") from None

    def start(self) -> None:
        if self.keepalive_s > 0:
            self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(max(self._last + self.keepalive_s - time.monotonic(), 0.01))
            if time.monotonic() - self._last >= self.keepalive_s:
                await self.write(KEEPALIVE)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
