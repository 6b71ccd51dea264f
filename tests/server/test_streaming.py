"""Streaming wire format, incrementality, and fragmentation independence."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_proxy.backends.claude.parser import ClaudeParser
from cli_proxy.read.events import CliText
from cli_proxy.read.reply import AnswerParser, accumulate
from tests.conftest import Served, fake
from tests.server.test_chat import TIME, WEATHER


async def sse(served: Served, body: dict[str, Any]) -> tuple[aiohttp.ClientResponse, list[Any]]:
    """POST and read raw SSE events as (arrival time, payload) until the server closes."""
    events: list[Any] = []
    async with aiohttp.ClientSession() as session:
        resp = await session.post(f"{served.base_url}/chat/completions", json=body)
        assert resp.status == 200, await resp.text()
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                assert block.startswith(b"data: "), block
                data = block[6:].decode()
                events.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
        assert buf == b""
        resp.release()
        return resp, events


def check_wire_format(events: list[Any], *, include_usage: bool = False) -> list[dict[str, Any]]:
    """Every rule openai-python/node, LangChain and the Agents SDK rely on."""
    payloads = [p for _, p in events]
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert {c["created"] for c in chunks} == {chunks[0]["created"]}
    assert {c["model"] for c in chunks} == {chunks[0]["model"]}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] >= 0
        assert all(c["usage"] is None for c in chunks[:-1])
        chunks = chunks[:-1]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert sum("role" in d for d in deltas) == 1
    final = chunks[-1]["choices"][0]
    assert final["delta"] == {} and final["finish_reason"] in ("stop", "tool_calls")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    seen: dict[int, int] = {}
    for d in deltas:
        for call in d.get("tool_calls", []):
            i = call["index"]
            assert "function" in call
            if "id" in call:
                assert i not in seen and i == len(seen), "identity sent once, indices contiguous"
                assert call["type"] == "function" and call["function"]["arguments"] == ""
                seen[i] = 0
            else:
                assert set(call) == {"index", "function"} and set(call["function"]) == {"arguments"}
                seen[i] += 1
    if seen:
        assert final["finish_reason"] == "tool_calls"
    return deltas


async def test_raw_sse_text(served: Served) -> None:
    resp, events = await sse(
        served,
        {
            "model": "claude-sonnet-4-6",
            "messages": [{"role": "user", "content": fake(answer="one two three", chunks=3)}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers.get("Connection", "").lower() == "close"
    deltas = check_wire_format(events, include_usage=True)
    assert "".join(d.get("content") or "" for d in deltas) == "one two three"
    assert sum(bool(d.get("content")) for d in deltas) == 3  # one chunk per CLI delta


async def test_raw_sse_parallel_tool_calls(served: Served) -> None:
    answer = json.dumps(
        {
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
                {"name": "get_time", "arguments": {"tz": "UTC"}},
            ]
        }
    )
    _, events = await sse(
        served,
        {
            "model": "gemini-2.5-flash",
            "messages": [{"role": "user", "content": fake(answer=answer, chunks=9)}],
            "tools": [WEATHER, TIME],
            "stream": True,
        },
    )
    deltas = check_wire_format(events)
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        for c in d.get("tool_calls", []):
            entry = calls.setdefault(c["index"], {"name": "", "arguments": ""})
            entry["name"] += c["function"].get("name", "")
            entry["arguments"] += c["function"]["arguments"]
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Oslo"}
    assert json.loads(calls[1]["arguments"]) == {"tz": "UTC"}


async def test_first_content_arrives_before_cli_finishes(served: Served) -> None:
    """The fake CLI sleeps 0.3 s between lines: content must not wait for the end."""
    for tools in (None, [WEATHER]):
        answer = "alpha beta gamma delta epsilon"
        if tools:
            answer = json.dumps({"tool_call": None, "response": answer})
        body: dict[str, Any] = {
            "model": "claude-sonnet-4-6",
            "messages": [{"role": "user", "content": fake(answer=answer, chunks=5, delay=0.3)}],
            "stream": True,
        }
        if tools:
            body["tools"] = tools
        _, events = await sse(served, body)
        check_wire_format(events)
        content_times = [
            t for t, p in events if p != "[DONE]" and p["choices"][0]["delta"].get("content")
        ]
        end = events[-1][0]
        assert len(content_times) >= 3
        assert end - content_times[0] > 1.0, "first content only arrived at the end"


async def test_tool_call_identity_streams_before_arguments_finish(served: Served) -> None:
    answer = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "X" * 60}}})
    _, events = await sse(
        served,
        {
            "model": "claude-sonnet-4-6",
            "messages": [{"role": "user", "content": fake(answer=answer, chunks=6, delay=0.25)}],
            "tools": [WEATHER],
            "stream": True,
        },
    )
    check_wire_format(events)
    start = next(
        t
        for t, p in events
        if p != "[DONE]" and any("id" in c for c in p["choices"][0]["delta"].get("tool_calls", []))
    )
    assert events[-1][0] - start > 0.5


async def test_mid_stream_error_event_then_close(serve: Any) -> None:
    served = await serve(stream_head_hold_s=0)  # the head is out before the failure
    _, events = await sse(
        served,
        {
            "model": "gemini-2.5-flash",
            "messages": [{"role": "user", "content": fake(is_error=True, error_message="quota")}],
            "stream": True,
        },
    )
    payloads = [p for _, p in events]
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert set(payloads[-1]) == {"error"}
    assert set(payloads[-1]["error"]) == {"message", "type", "param", "code"}
    assert "[DONE]" not in payloads


# --------------------------------------------------------------- fragmentation


def claude_lines(pieces: list[str]) -> list[bytes]:
    lines = [{"type": "system", "subtype": "init", "tools": []}]
    for p in pieces:
        lines.append(
            {
                "type": "stream_event",
                "event": {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": p},
                },
            }
        )
    lines.append(
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "".join(pieces)}]}}
    )
    lines.append(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "".join(pieces),
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    return [json.dumps(obj).encode() + b"\n" for obj in lines]


def pipeline(pieces: list[str]) -> tuple[str, list[tuple[str, str, str]]]:
    """CLI lines -> ClaudeParser -> AnswerParser -> accumulated (content, calls)."""
    counter = iter(range(1000))
    parser, answer = ClaudeParser(), AnswerParser(lambda: f"call_{next(counter)}")
    events = []
    for line in claude_lines(pieces):
        for ev in parser.feed(line):
            if isinstance(ev, CliText):
                events += answer.feed(ev.text)
    assert not parser.finish(0, "")
    events += answer.finish()
    return accumulate(events)


answers = st.one_of(
    st.builds(lambda s: json.dumps({"tool_call": None, "response": s}), st.text()),
    st.builds(
        lambda n, a: json.dumps({"tool_call": {"name": n, "arguments": a}}),
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        st.dictionaries(st.text(max_size=8), st.one_of(st.text(), st.integers(), st.none())),
    ),
    st.text(min_size=1),
)


@settings(max_examples=150, deadline=None)
@given(answer=answers, cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_of_cli_output_accumulates_identically(answer: str, cuts: list[int]) -> None:
    points = sorted({c % (len(answer) + 1) for c in cuts})
    pieces = [answer[a:b] for a, b in zip([0, *points], [*points, len(answer)], strict=True)]
    pieces = [p for p in pieces if p]
    assert pipeline(pieces) == pipeline([answer])


async def test_keepalive_comments_during_silence(serve: Any) -> None:
    served = await serve(keepalive_s=0.2, stream_head_hold_s=0.1)
    body = {
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": fake(answer="late", hang=1.0)}],
        "stream": True,
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{served.base_url}/chat/completions", json=body) as resp,
    ):
        raw = await resp.read()
    blocks = raw.split(b"\n\n")
    assert b": keep-alive" in blocks
    assert blocks[0].startswith(b"data: ") and raw.endswith(b"data: [DONE]\n\n")
    # the SDK ignores the comments
    stream = await served.client.chat.completions.create(**body)  # type: ignore[call-overload]
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "late"


async def test_output_cut_at_byte_boundaries_gives_the_same_answer(served: Served) -> None:
    """The pipe delivers bytes, not lines: pieces of 1 or 5 bytes, cutting UTF-8 characters."""
    answer = json.dumps(
        {
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Zürich 東京 😀"}},
                {"name": "get_time", "arguments": {}},
            ]
        },
        ensure_ascii=False,
    )
    results = []
    for size in (0, 1, 5):
        for model in ("claude-sonnet-4-6", "gemini-2.5-flash"):
            msgs = [{"role": "user", "content": fake(answer=answer, chunks=6, split_bytes=size)}]
            r = await served.client.chat.completions.create(
                model=model,
                messages=msgs,
                tools=[WEATHER, TIME],  # type: ignore[arg-type,list-item]
            )
            calls = r.choices[0].message.tool_calls or []
            results.append([(c.function.name, c.function.arguments) for c in calls])  # type: ignore[union-attr]
    assert all(r == results[0] for r in results)
    assert json.loads(results[0][0][1]) == {"city": "Zürich 東京 😀"}


async def test_a_completed_stream_is_logged_as_200_when_the_client_leaves_at_once(
    served: Served,
) -> None:
    """The client has [DONE] and closes while the handler still reaps the CLI (here: a child
    it left behind). That call was complete: status 200, not 499 (issue seen with openai-node
    runTools)."""
    import structlog

    with structlog.testing.capture_logs() as logs:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                served.server.make_url("/v1/chat/completions"),
                json={
                    "model": "claude-sonnet-4-6",
                    "stream": True,
                    "messages": [{"role": "user", "content": fake(answer="hi", child=3)}],
                },
            ) as resp,
        ):
            async for line in resp.content:
                if line.startswith(b"data: [DONE]"):
                    break
        deadline = asyncio.get_running_loop().time() + 10
        while not any(e["event"] == "chat_completion" for e in logs):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
    [done] = [e for e in logs if e["event"] == "chat_completion"]
    assert done["status"] == 200 and done["finish_reason"] == "stop"
