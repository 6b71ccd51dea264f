"""Server-sent events on the wire: framing, the error event, keep-alives, a write deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from cli_proxy.jsonbytes import json_bytes
from cli_proxy.run.limits import WRITE_GRACE_S

DONE = b"data: [DONE]\n\n"


def encode(payload: dict[str, Any]) -> bytes:
    return b"data: " + json_bytes(payload, separators=(",", ":")) + b"\n\n"


KEEPALIVE = b": keep-alive\n\n"  # a comment line: every SSE client ignores it
SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"


class SlowClient(Exception):
    """The client stopped reading: a write did not complete within the write timeout."""


class SSEWriter:
    """Writes SSE events; during long silences (a CLI thinking, queued retries) it sends
    ``keepalive`` (by default ``:`` comment lines, which every SSE client ignores; a format
    whose clients choke on them gives its own), so idle-timeout proxies keep the
    connection open. A write that does not complete within ``write_timeout_s`` (a client
    that stopped reading, its socket buffers full) raises ``SlowClient``: the call is then
    ended, its CLI killed and its slot freed, instead of held for as long as the client likes.
    Nor past the call's ``deadline`` (its whole-call cap), give or take ``WRITE_GRACE_S`` to
    deliver an error event."""

    def __init__(
        self,
        resp: web.StreamResponse,
        keepalive_s: float,
        write_timeout_s: float = 30.0,
        deadline: Callable[[], float | None] = lambda: None,
        keepalive: bytes = KEEPALIVE,
    ) -> None:
        self.keepalive = keepalive
        self.resp = resp
        self.keepalive_s = keepalive_s
        self.write_timeout_s = write_timeout_s
        self.deadline = deadline
        self.stalled = ""
        self._last = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    async def write(self, data: bytes) -> None:
        self._last = time.monotonic()
        limit, why = self.write_timeout_s, f"no write progress for {self.write_timeout_s:g} s"
        deadline = self.deadline()  # the call's, once it is admitted
        if deadline is not None and deadline - self._last < limit:
            limit = max(deadline - self._last, WRITE_GRACE_S)
            why = "the call's time limit passed while the client was not reading"
        try:
            await asyncio.wait_for(self.resp.write(data), limit)
        except TimeoutError:
            self.stalled = why
            raise SlowClient(why) from None

    def start(self) -> None:
        if self.keepalive_s > 0:
            self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(max(self._last + self.keepalive_s - time.monotonic(), 0.01))
            if time.monotonic() - self._last >= self.keepalive_s:
                await self.write(self.keepalive)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
