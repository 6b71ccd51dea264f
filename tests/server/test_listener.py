"""Below the app: what the HTTP parser rejects is answered with the OpenAI error JSON, and a
client trickling its request is cut off (issue #13, item 9). Raw sockets, since no HTTP
client library sends these bytes."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

from tests.conftest import Served, ServeFactory
from tests.run.test_reliability import gateway_process

GOOD_BODY = json.dumps({"model": "claude-sonnet-4-6", "messages": []}).encode()


async def exchange(port: int | None, data: bytes, *, pause_s: float = 0.0) -> bytes:
    """Send raw bytes (in one piece, or byte by byte ``pause_s`` apart) and read the reply."""
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reply = asyncio.ensure_future(reader.read())  # read while writing: the server may cut in
    try:
        for i in range(0, len(data), 1 if pause_s else len(data)):
            if reply.done():
                break
            writer.write(data[i : i + (1 if pause_s else len(data))])
            await writer.drain()
            await asyncio.sleep(pause_s)
        return await asyncio.wait_for(reply, timeout=20)
    except ConnectionResetError:
        return await asyncio.wait_for(reply, timeout=20)
    finally:
        writer.close()


def parse(reply: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return status, headers, json.loads(body)


def request(head_lines: list[str], body: bytes = b"") -> bytes:
    return (
        "\r\n".join(["POST /v1/chat/completions HTTP/1.1", "Host: 127.0.0.1", *head_lines])
        + "\r\n\r\n"
    ).encode("latin-1") + body


MALFORMED = {
    "bad chunk size": request(
        ["Content-Type: application/json", "Transfer-Encoding: chunked"], b"zz\r\n{}\r\n0\r\n\r\n"
    ),
    "content-length with transfer-encoding": request(
        ["Content-Type: application/json", "Content-Length: 2", "Transfer-Encoding: chunked"],
        b"{}",
    ),
    "huge header line": request(["X-Big: " + "a" * 20000, "Content-Length: 0"]),
    "too many headers": request([f"X-H{i}: v" for i in range(300)] + ["Content-Length: 0"]),
    "NUL in a header": request(["X-Nul: a\x00b", "Content-Length: 0"]),
    "invalid method": b"G(T / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "not HTTP at all": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_parser_rejections_are_openai_errors(
    served: Served, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="aiohttp"):
        reply = await exchange(served.server.port, MALFORMED[case])
    status, headers, body = parse(reply)
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == "bad_http_request"
    assert body["error"]["message"].startswith("malformed HTTP request")
    tracebacks = [r for r in caplog.records if r.exc_info and r.name.startswith("aiohttp")]
    assert not tracebacks  # one log line of ours, not aiohttp's traceback


async def test_headers_trickled_in_are_cut_off(serve: ServeFactory) -> None:
    s = await serve(header_timeout_s=1.0)
    started = time.monotonic()
    reply = await exchange(
        s.server.port, request(["Content-Length: 0"] + ["X-Slow: y"] * 20), pause_s=0.1
    )
    took = time.monotonic() - started
    status, headers, body = parse(reply)
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert headers["content-type"] == "application/json"
    assert took < 5  # cut at the deadline, not after the client's ~30 s of trickling


async def test_a_body_trickled_in_is_cut_off(serve: ServeFactory) -> None:
    s = await serve(body_timeout_s=1.0)
    data = request(["Content-Type: application/json", f"Content-Length: {len(GOOD_BODY)}"])
    assert s.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", s.server.port)
    try:
        writer.write(data + GOOD_BODY[:5])  # the head at once, then the body stalls
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    status, _, body = parse(reply)
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert "body" in body["error"]["message"]


async def test_a_declared_body_above_the_limit_is_413_at_once(serve: ServeFactory) -> None:
    """Issue 24 (D4): a Content-Length above ``max_body_bytes`` is refused on its headers,
    not after the body deadline (it was 408 after 60 s): the body is never sent here, and
    the answer comes long before ``body_timeout_s``."""
    s = await serve(max_body_bytes=4096, body_timeout_s=600)
    data = request(["Content-Type: application/json", "Content-Length: 10000000"])
    assert s.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", s.server.port)
    try:
        writer.write(data)  # the head only: the 10 MB never come
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=20)
        status, headers, _ = parse(head + b"{}")
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 20)
    finally:
        writer.close()
    assert status == 413 and headers["content-type"] == "application/json"
    err = json.loads(body)["error"]
    assert err["code"] == "request_too_large" and "10000000" in err["message"]


async def test_an_idle_keep_alive_connection_is_not_the_header_deadlines_business(
    serve: ServeFactory,
) -> None:
    """The deadline counts from a request's first byte: a client that keeps its connection
    open between requests (as every SDK's pool does) is served again afterwards."""
    s = await serve(header_timeout_s=0.5)
    get = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    assert s.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", s.server.port)
    try:
        for _ in range(2):
            writer.write(get)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(
                next(
                    ln.split(b":")[1]
                    for ln in head.split(b"\r\n")
                    if ln.lower().startswith(b"content-length")
                )
            )
            await reader.readexactly(length)
            await asyncio.sleep(1.0)  # idle longer than the header deadline
    finally:
        writer.close()


async def test_the_served_gateway_uses_this_listener() -> None:
    """``cli-proxy serve`` (not only the test harness) answers parser rejections as JSON."""
    async with gateway_process() as (_, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        status, headers, body = parse(await exchange(port, MALFORMED["bad chunk size"]))
    assert status == 400 and headers["content-type"].startswith("application/json")
    assert body["error"]["code"] == "bad_http_request"
