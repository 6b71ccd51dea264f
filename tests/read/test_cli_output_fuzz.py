"""Hostile CLI output, end to end: a real child process (tests/fakes/hostile_cli.py) prints what
hypothesis makes (random bytes, invalid UTF-8, lone-surrogate escapes, 5000-deep JSON, a
multi-megabyte line with no newline, real claude/gemini events mixed with garbage), or
stalls, or lingers after a complete answer; the gateway is called over loopback HTTP.

Whatever the CLI does, the client gets a 200 OpenAI answer or an OpenAI error JSON with a
status a CLI failure maps to (never a 500, never text/plain), a stream that ends with
``data: [DONE]`` or an error event, within the configured timeouts, and no process is left.
"""

from __future__ import annotations

import base64
import json
import re
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FAKE_PY
from tests.fakes.hostile_cli import encode
from tests.server.test_openapi import LiveGateway

HERE = Path(__file__).resolve().parents[1]
HOSTILE = f"{FAKE_PY} {HERE / 'fakes' / 'hostile_cli.py'}"
REAL = HERE / "data" / "real-cli"
MODELS = {"claude": "claude-sonnet-4-6", "gemini": "gemini-2.5-flash"}

TIMEOUT_S, IDLE_S, GRACE_S = 3.0, 1.0, 0.5
# the whole call: the total timeout, the kill grace, then slack for a loaded 2-core machine
CALL_BOUND_S = TIMEOUT_S + GRACE_S + 3.0
# what a CLI failure may become (errors.api_error); a 500 or anything else is a bug
CLI_ERROR_STATUSES = {
    400,
    402,
    429,
    502,
    503,
    504,
}  # 400: a CLI-reported bad request (unknown model)

EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def capture_lines(flavour: str) -> list[bytes]:
    return [
        line
        for path in sorted(REAL.glob(f"{flavour}-*.stdout.jsonl"))
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]


CLAUDE_LINES, GEMINI_LINES = capture_lines("claude"), capture_lines("gemini")
CLEAN = {
    "claude": (REAL / "claude-text.stdout.jsonl").read_bytes(),
    "gemini": (REAL / "gemini-text.stdout.jsonl").read_bytes(),
}


@pytest.fixture(scope="module")
def live() -> Iterator[LiveGateway]:
    with LiveGateway(
        claude_bin=HOSTILE,
        gemini_bin=HOSTILE,
        timeout_s=TIMEOUT_S,
        idle_timeout_s=IDLE_S,
        kill_grace_s=GRACE_S,
        stream_head_hold_s=0.3,
        max_concurrency=2,
    ) as gw:
        yield gw


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def no_child_left() -> None:
    deadline = time.monotonic() + 3
    while (kids := children()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not kids, f"CLI processes left behind: {[(k.pid, k.cmdline()) for k in kids]}"


def sse_events(raw: bytes) -> list[str]:
    text = raw.decode("utf-8")  # valid UTF-8 throughout, whatever the CLI printed
    assert text.endswith("\n\n"), text[-300:]  # no event cut off
    return [e for e in text.split("\n\n") if e and not e.startswith(":")]  # no keep-alives


def check_stream(api: str, raw: bytes) -> str:
    """A well-formed event stream; returns how it ended: "done" or "error"."""
    events = sse_events(raw)
    assert events, raw[:300]
    datas: list[str] = []
    for event in events:
        lines = event.split("\n")
        data = [ln[6:] for ln in lines if ln.startswith("data: ")]
        assert len(data) == 1, event[:300]
        assert all(ln.startswith(("data: ", "event: ")) for ln in lines), event[:300]
        datas.append(data[0])
    for data in datas[:-1] if api == "chat" else datas:
        json.loads(data)  # every payload but chat's final [DONE] is JSON
    last = datas[-1]
    if api == "chat":
        if last == "[DONE]":
            chunks = [json.loads(d) for d in datas[:-1]]
            assert chunks and chunks[-1]["choices"][0]["finish_reason"] in (
                "stop",
                "length",
                "tool_calls",
            )
            return "done"
        err = json.loads(last)["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        return "error"
    last_event = json.loads(last)
    if last_event["type"] == "error":
        assert json.loads(datas[-2])["type"] == "response.failed"
        return "error"
    assert last_event["type"] in ("response.completed", "response.incomplete"), last_event
    return "done"


def call(
    live: LiveGateway,
    http: requests.Session,
    spec: dict[str, Any],
    *,
    flavour: str = "claude",
    api: str = "chat",
    stream: bool = False,
    tools: bool = False,
) -> tuple[requests.Response, float]:
    """One call whose CLI is scripted by ``spec``; checks every property but the answer.
    With ``tools``, the request offers ``TOOL``: the answer is read for tool calls."""
    prompt = encode(spec)
    if api == "chat":
        path = "/v1/chat/completions"
        body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}]}
        if tools:
            body["tools"] = [{"type": "function", "function": TOOL}]
    else:
        path, body = "/v1/responses", {"input": prompt}
        if tools:
            body["tools"] = [{"type": "function", **TOOL}]
    body.update(model=MODELS[flavour], stream=stream)
    started = time.monotonic()
    resp = http.post(f"{live.base_url}{path}", json=body, timeout=CALL_BOUND_S + 10)
    took = time.monotonic() - started
    assert took < CALL_BOUND_S, f"the call took {took:.1f} s"
    ctype = resp.headers.get("Content-Type", "")
    if resp.status_code == 200 and stream:
        assert ctype.startswith("text/event-stream"), ctype
        check_stream(api, resp.content)
    else:
        assert ctype.startswith("application/json"), (resp.status_code, ctype, resp.text[:300])
        payload = resp.json()
        if resp.status_code == 200:
            assert payload["object"] == ("chat.completion" if api == "chat" else "response")
        else:
            assert resp.status_code in CLI_ERROR_STATUSES, (resp.status_code, payload)
            assert set(payload) == {"error"}
            assert set(payload["error"]) == {"message", "type", "param", "code"}
            if resp.status_code == 429:
                assert int(resp.headers["Retry-After"]) >= 1
    no_child_left()
    return resp, took


def answer_text(api: str, stream: bool, resp: requests.Response) -> str | None:
    """The answer text of a 200, or None for an error (status or error event)."""
    if resp.status_code != 200:
        return None
    if not stream:
        body = resp.json()
        if api == "chat":
            return str(body["choices"][0]["message"]["content"] or "")
        return str(body["output_text"])
    datas = [e.split("data: ", 1)[1] for e in sse_events(resp.content)]
    if check_stream(api, resp.content) == "error":
        return None
    if api == "chat":
        return "".join(
            c["choices"][0]["delta"].get("content") or ""
            for c in map(json.loads, datas[:-1])
            if c["choices"]
        )
    return "".join(
        e.get("delta", "") for e in map(json.loads, datas) if e["type"].endswith(".delta")
    )


def answer_calls(api: str, stream: bool, resp: requests.Response) -> list[tuple[str, str]]:
    """(name, arguments) of every tool call a 200 answer holds, as a client assembles them."""
    if not stream:
        body = resp.json()
        if api == "chat":
            calls = body["choices"][0]["message"].get("tool_calls") or []
            return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
        return [(i["name"], i["arguments"]) for i in body["output"] if i["type"] == "function_call"]
    datas = [e.split("data: ", 1)[1] for e in sse_events(resp.content)]
    if api == "chat":
        acc: dict[int, list[str]] = {}
        for chunk in map(json.loads, datas[:-1]):
            for choice in chunk.get("choices", []):
                for tc in choice["delta"].get("tool_calls") or []:
                    call = acc.setdefault(tc["index"], ["", ""])
                    call[0] += tc["function"].get("name") or ""
                    call[1] += tc["function"].get("arguments") or ""
        return [(c[0], c[1]) for _, c in sorted(acc.items())]
    items: dict[str, list[str]] = {}
    for event in map(json.loads, datas):
        if (
            event["type"] == "response.output_item.added"
            and event["item"]["type"] == "function_call"
        ):
            items[event["item"]["id"]] = [event["item"]["name"], ""]
        elif event["type"] == "response.function_call_arguments.delta":
            items[event["item_id"]][1] += event["delta"]
    return [(c[0], c[1]) for c in items.values()]


def cli_answer(flavour: str, pieces: list[str]) -> bytes:
    """The stdout of a real CLI of this flavour answering the text ``pieces`` (as token
    deltas): the captured init and result lines around deltas in the CLI's own format."""
    text = "".join(pieces)
    lines = CLEAN[flavour].splitlines()
    if flavour == "claude":
        init, _, result = (json.loads(line) for line in lines)
        deltas = [
            {
                "type": "stream_event",
                "event": {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": p},
                },
            }
            for p in pieces
        ]
        whole = {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }
        out_lines = [init, *deltas, whole, {**result, "result": text}]
    else:  # gemini --acp: the captured set-up replies and result, our text as message chunks
        captured = [json.loads(line) for line in lines]
        chunk = next(o for o in captured if _acp_update(o) == "agent_message_chunk")
        head = [o for o in captured[:-1] if _acp_update(o) != "agent_message_chunk"]
        deltas = []
        for p in pieces:
            params = {**chunk["params"], "update": {**chunk["params"]["update"]}}
            params["update"]["content"] = {"type": "text", "text": p}
            deltas.append({**chunk, "params": params})
        out_lines = [*head, *deltas, captured[-1]]
    return b"".join(json.dumps(line).encode() + b"\n" for line in out_lines)


def _acp_update(obj: dict[str, Any]) -> object:
    params = obj.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    return update.get("sessionUpdate") if isinstance(update, dict) else None


def out(raw: bytes, **spec: Any) -> dict[str, Any]:
    """A hostile_cli script that prints ``raw``."""
    return {"out": base64.urlsafe_b64encode(raw).decode(), **spec}


def zout(raw: bytes) -> dict[str, Any]:
    """The same, compressed: for answers too large for a prompt as they are."""
    return {"zout": base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode()}


# ------------------------------------------------------------------- strategies

SURROGATE_LINES = [
    b'{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"a\\ud800b"}]}}',
    b'{"type":"stream_event","event":{"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"\\udfff"}}}',
    b'{"type":"result","subtype":"success","is_error":false,"result":"\\ud800","usage":{}}',
    b'{"type":"message","role":"assistant","content":"x\\udc00","delta":true}',
    b'{"type":"result","status":"success","stats":{"input_tokens":"\\ud800"}}',
    b'{"\\ud800":"\\udbff\\udfff\\ud800"}',
]
TOOL = {"name": "f", "parameters": {"type": "object", "properties": {}}}
DEEP = b"[" * 5000 + b"]" * 5000
DEEP_EVENT = b'{"type":"assistant","message":' + b"[" * 5000 + b"]" * 5000 + b"}"
EVENT_TYPES = ["system", "assistant", "user", "stream_event", "result", "message", "init"]

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
fuzzed_events = st.builds(
    lambda kind, extra: json.dumps({"type": kind, **extra}).encode(),
    st.sampled_from(EVENT_TYPES),
    st.dictionaries(
        st.sampled_from(["message", "event", "content", "result", "is_error", "status", "delta"]),
        json_values,
        max_size=3,
    ),
)
garbage = st.one_of(
    st.binary(max_size=300),  # random bytes, newlines included
    st.binary(min_size=1, max_size=40).map(lambda b: b"\xff\xc3" + b + b"\xed\xa0\x80"),
    st.text(max_size=80).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([*SURROGATE_LINES, DEEP, DEEP_EVENT, b"{", b"null", b"[]", b'"x"', b"1e999"]),
    fuzzed_events,
)
noise = st.text(
    st.characters(blacklist_characters='{}[]"\n\r', blacklist_categories=["Cs"]), max_size=60
).map(lambda t: t.encode())  # lines no parser can take for an event


def captures(flavour: str) -> list[list[bytes]]:
    return [
        [line for line in path.read_bytes().splitlines() if line.strip()]
        for path in sorted(REAL.glob(f"{flavour}-*.stdout.jsonl"))
    ]


def mixed(flavour: str) -> st.SearchStrategy[bytes]:
    """Real events of the flavour's format (any capture's lines, or one whole capture in
    order: an answer, a 429, a 401, a cut stream...) with garbage lines anywhere."""
    real = st.sampled_from(CLAUDE_LINES if flavour == "claude" else GEMINI_LINES)
    shuffled = st.lists(st.one_of(real, real, real, garbage), max_size=14)

    @st.composite
    def in_order(draw: st.DrawFn) -> list[bytes]:
        lines: list[bytes] = []
        for line in draw(st.sampled_from(captures(flavour))):
            lines += [*draw(st.lists(garbage, max_size=1)), line]
        return lines

    return st.builds(
        lambda ls, nl: b"\n".join(ls) + (b"\n" if nl else b""),
        shuffled | in_order(),
        st.booleans(),
    )


# ---------------------------------------------------------------------- the fuzz


@settings(EXAMPLES, max_examples=100)
@given(data=st.data(), api=st.sampled_from(["chat", "responses"]), stream=st.booleans())
@pytest.mark.parametrize("flavour", ["claude", "gemini"])
def test_any_output_gets_an_openai_answer_or_error(
    live: LiveGateway,
    http: requests.Session,
    flavour: str,
    data: st.DataObject,
    api: str,
    stream: bool,
) -> None:
    raw = data.draw(mixed(flavour), label="stdout")
    code = data.draw(st.sampled_from([0, 0, 1]), label="exit")
    call(live, http, out(raw, exit=code), flavour=flavour, api=api, stream=stream)


@EXAMPLES
@given(data=st.data(), api=st.sampled_from(["chat", "responses"]), stream=st.booleans())
@pytest.mark.parametrize("flavour", ["claude", "gemini"])
def test_noise_lines_do_not_change_the_answer(
    live: LiveGateway,
    http: requests.Session,
    flavour: str,
    data: st.DataObject,
    api: str,
    stream: bool,
) -> None:
    """Lines no parser can read (a CLI's banners, progress, ANSI noise) interleaved with a
    real capture: the same answer as the clean capture."""
    clean = CLEAN[flavour].splitlines()
    noisy: list[bytes] = []
    for line in clean:
        noisy += [*data.draw(st.lists(noise, max_size=2), label="noise"), line]
    expected = answer_text(
        api, stream, call(live, http, out(CLEAN[flavour]), **_kw(flavour, api, stream))[0]
    )
    assert expected, "the clean capture answers"
    resp, _ = call(live, http, out(b"\n".join(noisy) + b"\n"), **_kw(flavour, api, stream))
    assert answer_text(api, stream, resp) == expected


def _kw(flavour: str, api: str, stream: bool) -> dict[str, Any]:
    return {"flavour": flavour, "api": api, "stream": stream}


# the openers of one nesting level of a tool call's arguments, and their closers
LEVELS = [("[", "]"), ('{"k":', "}"), ("[1,", "]"), ('{"a":[', "]}"), ('[{"b":', "}]")]


@st.composite
def deep_tool_answers(draw: st.DrawFn) -> tuple[str, str | None]:
    """(the model's answer text, the arguments a client may receive or None): a tool call
    whose arguments nest from a few to 100,000 levels (past the interpreter's recursion
    limit), as an object or a JSON string, whole or cut off anywhere."""
    depth = draw(
        st.one_of(
            st.integers(0, 40),
            st.integers(180, 220),  # around the gateway's decoding depth (jsondepth)
            st.integers(950, 1100),  # around the recursion limit
            st.sampled_from([3_000, 20_000, 100_000]),
        ),
        label="depth",
    )
    opener, closer = draw(st.sampled_from(LEVELS), label="level")
    args = '{"x":' + opener * depth + "1" + closer * depth + "}"
    as_string = draw(st.booleans(), label="as_string")
    value = json.dumps(args) if as_string else args
    text = '{"tool_call":{"name":"f","arguments":' + value + "}}"
    expected: str | None = args
    levels = 1 + depth * (opener.count("[") + opener.count("{"))
    if as_string and levels > 200:  # too deep to check that the string holds an object
        expected = "{}"
    cut = draw(st.none() | st.integers(0, len(text) - 1), label="cut")
    if cut is not None:
        text = text[:cut]
        expected = None  # cut: the call may or may not have completed before the cut
    return text, expected


@pytest.mark.parametrize("flavour", ["claude", "gemini"])
@pytest.mark.parametrize("tools", [False, True])
def test_a_constructed_answer_is_read_as_the_cli_saying_it(
    live: LiveGateway, http: requests.Session, flavour: str, tools: bool
) -> None:
    """The fuzz below builds each CLI's stdout around its text (``cli_answer``): the gateway
    must read it as that CLI's answer, or the fuzz tests nothing but the error path."""
    text = '{"tool_call":null,"response":"Hello world"}' if tools else "Hello world"
    pieces = [text[:5], text[5:9], text[9:]]
    resp, _ = call(live, http, zout(cli_answer(flavour, pieces)), flavour=flavour, tools=tools)
    assert answer_text("chat", False, resp) == "Hello world"


@settings(EXAMPLES, max_examples=30)
@given(
    answer=deep_tool_answers(),
    pieces=st.integers(1, 6),
    api=st.sampled_from(["chat", "responses"]),
    stream=st.booleans(),
)
@pytest.mark.parametrize("flavour", ["claude", "gemini"])
def test_deep_tool_arguments_never_break_a_call(
    live: LiveGateway,
    http: requests.Session,
    flavour: str,
    answer: tuple[str, str | None],
    pieces: int,
    api: str,
    stream: bool,
) -> None:
    """Issue 24 (D1, D3): a tool call nested past the recursion limit, whole or cut off, in
    the CLI's real format: an OpenAI answer (never a 500, streams end properly), and a call
    reaches the client only with its complete arguments, exactly as the model wrote them."""
    text, expected = answer
    size = max(1, -(-len(text) // pieces))
    chunks = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    resp, _ = call(
        live,
        http,
        zout(cli_answer(flavour, chunks)),
        flavour=flavour,
        api=api,
        stream=stream,
        tools=True,
    )
    if resp.status_code != 200 or (stream and check_stream(api, resp.content) == "error"):
        return  # an OpenAI error (checked by call): e.g. an empty answer when cut at 0
    calls = answer_calls(api, stream, resp)
    if expected is not None:
        assert calls == [("f", expected)]
    else:  # cut: no call, or one whose arguments were complete before the cut
        whole = text.split('"arguments":', 1)[-1]
        assert all(name == "f" and whole.startswith(args) for name, args in calls) or all(
            args == "{}" for _, args in calls
        ), calls


# -------------------------------------------------------- the named hostile cases

CASES = [
    (f, a, s) for f in ("claude", "gemini") for a in ("chat", "responses") for s in (False, True)
]
IDS = [f"{f}-{a}-{'stream' if s else 'json'}" for f, a, s in CASES]


@pytest.mark.parametrize(("flavour", "api", "stream"), CASES, ids=IDS)
def test_a_huge_line_without_newline(
    live: LiveGateway, http: requests.Session, flavour: str, api: str, stream: bool
) -> None:
    head = CLEAN[flavour].splitlines()[0] + b"\n"
    resp, _ = call(live, http, out(head, huge=6 * 1024 * 1024), **_kw(flavour, api, stream))
    assert answer_text(api, stream, resp) is None  # no answer came: an error, not a 200 "ok"
    if resp.status_code != 200:
        assert resp.status_code == 502


@pytest.mark.parametrize(("flavour", "api", "stream"), CASES, ids=IDS)
def test_5000_deep_json_then_a_real_answer(
    live: LiveGateway, http: requests.Session, flavour: str, api: str, stream: bool
) -> None:
    expected = answer_text(
        api, stream, call(live, http, out(CLEAN[flavour]), **_kw(flavour, api, stream))[0]
    )
    lines = CLEAN[flavour].splitlines()
    raw = b"\n".join([lines[0], DEEP, DEEP_EVENT, *lines[1:]]) + b"\n"
    resp, _ = call(live, http, out(raw), **_kw(flavour, api, stream))
    assert answer_text(api, stream, resp) == expected


@pytest.mark.parametrize(("flavour", "api", "stream"), CASES, ids=IDS)
def test_lone_surrogates_in_the_answer(
    live: LiveGateway, http: requests.Session, flavour: str, api: str, stream: bool
) -> None:
    clean = CLEAN[flavour].replace(b"fake", b"f\\ud800ake")  # JSON escapes, in the deltas too
    assert clean != CLEAN[flavour]
    resp, _ = call(live, http, out(clean), **_kw(flavour, api, stream))
    assert resp.status_code == 200
    text = answer_text(api, stream, resp)
    # the surrogate's 3 UTF-8-style bytes (ED A0 80) become U+FFFD each, as Unicode advises
    assert text is not None and re.fullmatch(f"Hello from f\ufffd+ake {flavour}", text), text


@pytest.mark.parametrize(("flavour", "api", "stream"), CASES[::3], ids=IDS[::3])
def test_a_complete_answer_then_lingering(
    live: LiveGateway, http: requests.Session, flavour: str, api: str, stream: bool
) -> None:
    """A CLI that printed its whole result but never exits: answered, and killed."""
    resp, _ = call(live, http, out(CLEAN[flavour], linger=True), **_kw(flavour, api, stream))
    assert resp.status_code == 200, resp.text[:300]
    assert answer_text(api, stream, resp)


@pytest.mark.parametrize(("flavour", "api", "stream"), CASES[::3], ids=IDS[::3])
def test_a_cli_that_stalls_printing_nothing(
    live: LiveGateway, http: requests.Session, flavour: str, api: str, stream: bool
) -> None:
    resp, took = call(live, http, {"stall": True}, **_kw(flavour, api, stream))
    assert took >= IDLE_S * 0.9  # it was the idle timeout that ended it
    if resp.status_code == 200:  # the stream head went out: an error event ends it
        assert check_stream(api, resp.content) == "error"
    else:
        assert resp.status_code == 504
        assert resp.json()["error"]["code"] == "cli_timeout"
