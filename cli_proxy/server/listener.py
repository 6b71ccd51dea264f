"""The HTTP listener: aiohttp's runner with what an open port needs beyond the app.

- Requests the HTTP parser rejects before any handler runs (a bad chunk size, Content-Length
  with Transfer-Encoding, an oversized header line, too many headers, a NUL in a header, an
  invalid method) get a JSON error like every other error, and one log line instead of a
  traceback. The body is the request's API's (``formats.format_for``, by the path of its
  request line, noted as it arrives, since aiohttp's parser refuses a request before it has
  one).
- A request's line and headers must arrive within ``header_timeout_s`` of its first byte:
  a client trickling its headers (slowloris) is answered 408 and disconnected. Idle
  keep-alive connections are aiohttp's ``keepalive_timeout``'s business, not this one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from cli_proxy.jsonbytes import json_bytes
from cli_proxy.logs import log
from cli_proxy.server.errors import APIError
from cli_proxy.server.formats import format_for
from cli_proxy.server.wireformat import WireFormat


def _error_bytes(err: APIError, fmt: WireFormat) -> bytes:
    return json_bytes(fmt.error_body(err))


class GatewayRequestHandler(RequestHandler):
    """aiohttp's connection handler with JSON errors and a header deadline."""

    header_timeout_s: float = 15.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._line = b""  # the first bytes of the request coming in, until its line is whole
        self._path: str | None = None  # the path of its request line

    def data_received(self, data: bytes) -> None:
        if data and self._head_timer is None and self._between_requests():
            self._head_timer = self._loop.call_later(self.header_timeout_s, self._head_late)
            self._line, self._path = b"", None
        if data and self._path is None and self._between_requests():
            self._note_path(data)
        super().data_received(data)
        if self._head_timer is not None and not self._between_requests():
            self._head_timer.cancel()
            self._head_timer = None

    def _note_path(self, data: bytes) -> None:
        """The request line's path, for an answer given before aiohttp has a request (a
        parser refusal, the header deadline): it decides that answer's error body."""
        self._line += data[: 8192 - len(self._line)]
        line, sep, _ = self._line.partition(b"\n")
        if sep or len(self._line) >= 8192:
            parts = line.split(b" ")
            target = parts[1].decode("latin-1") if len(parts) > 1 else "/"
            self._path, self._line = target.partition("?")[0], b""

    def _between_requests(self) -> bool:
        # aiohttp's own state (3.9+); read defensively so that a rename in a later aiohttp
        # disables the deadline instead of breaking every request (tests/server/test_listener.py
        # would then fail loudly)
        busy = getattr(self, "_request_in_progress", True)
        return not busy and not getattr(self, "_messages", True)

    def _head_late(self) -> None:
        self._head_timer = None
        if not self._between_requests() or self.transport is None:
            return  # the head arrived meanwhile (the request is being handled)
        log.info("slow_request_head_dropped", after_s=self.header_timeout_s)
        err = APIError(
            408,
            f"the request line and headers did not arrive within {self.header_timeout_s:g} s",
            code="request_timeout",
        )
        body = _error_bytes(err, format_for(self._path or "/", {}))
        head = (
            "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        self.transport.write(head + body)
        self.force_close()  # closes the transport once the reply is flushed

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The parser's rejections (400) and anything that escaped the app's own error
        middleware, as the request's API's error JSON; the client's bytes go to the log at
        debug only."""
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already started; cannot send an error")
        if status == 400:
            err = APIError(
                400, f"malformed HTTP request: {message or 'bad request'}", code="bad_http_request"
            )
        elif status == 504:
            err = APIError(504, "the request handler timed out", code="timeout")
        else:
            err = APIError(status, "internal gateway error; see the gateway log")
        if status >= 500:  # not the client's doing: the whole story, once
            log.error("http_handler_error", status=status, exc_info=exc)
        else:
            log.info(
                "http_request_rejected", status=status, error=type(exc).__name__ if exc else None
            )
            log.debug("http_request_rejected_detail", detail=message or repr(exc))
        if request.method == "UNKNOWN":  # aiohttp's stand-in for a request it refused
            fmt = format_for(self._path or "/", {})
        else:
            fmt = format_for(request.path, request.headers)
        resp = web.Response(
            status=fmt.error_status(err),
            body=_error_bytes(err, fmt),
            content_type="application/json",
        )
        resp.force_close()
        return resp


class GatewayServer(web.Server):
    """``web.Server`` whose connections are ``GatewayRequestHandler``s."""

    def __init__(self, *args: Any, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s

    def __call__(self) -> RequestHandler:
        handler = GatewayRequestHandler(self, loop=self._loop, **self._kwargs)
        handler.header_timeout_s = self.header_timeout_s
        return handler


class GatewayRunner(web.AppRunner):
    """``web.AppRunner`` serving through ``GatewayServer``."""

    def __init__(self, app: web.Application, *, header_timeout_s: float, **kwargs: Any) -> None:
        # after an error answered before its body was read (408, 413, 401), the rest of the
        # body is read and dropped for 2 s (aiohttp: 10 s) so the client sees the answer
        kwargs.setdefault("lingering_time", 2.0)
        super().__init__(app, **kwargs)
        self.header_timeout_s = header_timeout_s

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # the app's own handler and request factory, in our server class
        return GatewayServer(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            header_timeout_s=self.header_timeout_s,
            **server._kwargs,
        )
