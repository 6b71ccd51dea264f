"""Fuzz the CLI output parsers: no stdout line, however malformed, may raise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_proxy.backends.base import StreamParser, classify_failure, exit_failure, load_json_line
from cli_proxy.backends.registry import names
from cli_proxy.failures import FailureKind
from cli_proxy.read.events import CliText, Failure, Truncated, UsageReport
from tests.conftest import new_parser

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# any JSON value, shallow enough to stay fast
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)

TYPES = ["system", "assistant", "user", "stream_event", "result", "message", "init", "error", "x"]
KEYS = [
    "type",
    "subtype",
    "message",
    "content",
    "event",
    "delta",
    "text",
    "result",
    "is_error",
    "api_error_status",
    "usage",
    "modelUsage",
    "role",
    "status",
    "stats",
    "error",
    "severity",
    "index",
    "content_block",
]

# objects shaped like the real events, with any value (wrong types included) in any field
shaped: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES) | json_values},
    optional={k: json_values for k in KEYS if k != "type"},
)

# nested shapes the parsers dig into, again with wrong types at every level
inner_block = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "text_delta", "tool_use", "content_block_delta"])
        | json_values,
        "text": json_values,
        "delta": st.fixed_dictionaries(
            {}, optional={"type": st.just("text_delta") | json_values, "text": json_values}
        )
        | json_values,
    },
)
deep: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.builds(
        lambda ev: {"type": "stream_event", "event": ev},
        inner_block | json_values,
    ),
    st.builds(
        lambda content, err: {"type": "assistant", "message": {"content": content}, "error": err},
        st.lists(inner_block | json_values, max_size=3) | json_values,
        st.none() | json_values,
    ),
    st.builds(
        lambda usage, model_usage, is_error, status, subtype, result: {
            "type": "result",
            "usage": usage,
            "modelUsage": model_usage,
            "is_error": is_error,
            "api_error_status": status,
            "subtype": subtype,
            "result": result,
        },
        st.dictionaries(
            st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens"]),
            json_values,
        )
        | json_values,
        st.dictionaries(st.text(max_size=5), st.dictionaries(st.text(max_size=12), json_values))
        | json_values,
        json_values,
        st.integers() | json_values,
        st.sampled_from(["success", "error_max_turns"]) | json_values,
        json_values,
    ),
    st.builds(
        lambda kind, role, content, status, stats, error: {
            "type": kind,
            "role": role,
            "content": content,
            "status": status,
            "stats": stats,
            "error": error,
        },
        st.sampled_from(["message", "result"]),
        st.sampled_from(["assistant", "user"]) | json_values,
        json_values,
        st.sampled_from(["success", "error"]) | json_values,
        st.dictionaries(st.sampled_from(["input_tokens", "output_tokens"]), json_values)
        | json_values,
        st.fixed_dictionaries({}, optional={"message": json_values}) | json_values,
    ),
    st.builds(
        lambda kind, sev, err, msg: {"type": kind, "severity": sev, "error": err, "message": msg},
        st.sampled_from(["result", "error"]),
        st.sampled_from(["error", "warning"]) | json_values,
        st.fixed_dictionaries({}, optional={"message": json_values}) | json_values,
        json_values,
    ),
)


def as_line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


lines: st.SearchStrategy[bytes] = st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=40).map(lambda b: b"{" + b),
    json_values.map(as_line),
    shaped.map(as_line),
    deep.map(as_line),
    st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass")),
)

SPECIALS = [
    b'{"type":"result","usage":"x","is_error":1}',
    b'{"type":"result","usage":{"input_tokens":"3","output_tokens":1e400}}',
    b'{"type":"result","is_error":true,"api_error_status":"429","result":["x"]}',
    b'{"type":"result","is_error":true,"api_error_status":99999999999999999999999}',
    b'{"type":"result","modelUsage":{"m":{"inputTokens":true}},"usage":null}',
    b'{"type":"assistant","message":{"content":"str"}}',
    b'{"type":"assistant","message":{"content":[{"type":"text","text":5}]}}',
    b'{"type":"assistant","message":[]}',
    b'{"type":"stream_event","event":[]}',
    b'{"type":"stream_event","event":{"type":"content_block_delta","delta":"x"}}',
    b'{"type":"message","role":"assistant","content":{"a":1}}',
    b'{"type":"result","status":"error","error":"just a string"}',
    b'{"type":"result","status":"error","error":{"message":[1]}}',
    b'{"type":"error","severity":null}',
    b'{"type":"result","stats":[1,2]}',
    b'{"type": NaN}',
    b'{"type":"result"' + b"1" * 5000 + b"}",
    b"\x00\xff\xfe{",
    b"",
    b"\n",
]


def check_events(events: Any) -> None:
    assert isinstance(events, list)
    for ev in events:
        assert isinstance(ev, CliText | UsageReport | Failure | Truncated)
        if isinstance(ev, CliText):
            assert isinstance(ev.text, str)
        elif isinstance(ev, UsageReport):
            assert isinstance(ev.prompt_tokens, int) and isinstance(ev.completion_tokens, int)
        elif isinstance(ev, Failure):
            assert isinstance(ev.kind, FailureKind) and isinstance(ev.message, str)
        else:
            assert isinstance(ev.message, str)


def run_parser(parser: StreamParser, feed: list[bytes], exit_code: int, stderr: str) -> None:
    for line in feed:
        check_events(parser.feed(line))
    check_events(parser.finish(exit_code, stderr))


@pytest.mark.parametrize("backend", names())
@FAST
@given(
    st.lists(lines, max_size=6),
    st.integers(min_value=-255, max_value=255),
    st.text(max_size=200),
)
def test_parser_never_raises(backend: str, feed: list[bytes], exit_code: int, stderr: str) -> None:
    run_parser(new_parser(backend), feed, exit_code, stderr)


@pytest.mark.parametrize("backend", names())
def test_known_nasty_lines(backend: str) -> None:
    for code in (0, 1, -9):
        run_parser(new_parser(backend), SPECIALS, code, "Error: \x00 boom")
        for line in SPECIALS:
            run_parser(new_parser(backend), [line], code, "")


@FAST
@given(st.binary(max_size=300))
def test_load_json_line_never_raises(line: bytes) -> None:
    obj = load_json_line(line)
    assert obj is None or isinstance(obj, dict)


@FAST
@given(st.text(max_size=300))
def test_classify_failure_never_raises(message: str) -> None:
    f = classify_failure(message)
    assert isinstance(f, Failure) and f.message.strip() and isinstance(f.kind, FailureKind)


@FAST
@given(st.integers(min_value=-255, max_value=255), st.text(max_size=2000))
def test_exit_failure_never_raises(code: int, stderr: str) -> None:
    f = exit_failure(code, stderr, "claude")
    assert str(code) in f.message and len(f.message) < 800
