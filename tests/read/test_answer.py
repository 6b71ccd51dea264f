"""The tool-mode answer reader: golden cases, and split-independence as a property."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cli_proxy.read.reply import (
    AnswerEvent,
    AnswerParser,
    ContentDelta,
    ToolCallArgs,
    ToolCallStart,
    accumulate,
    parse_answer,
)

FAST = settings(max_examples=200, deadline=None)


def ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def stream(pieces: Sequence[str]) -> tuple[list[AnswerEvent], str]:
    parser = AnswerParser(ids())
    events: list[AnswerEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return events, parser.finish_reason


def coalesce(events: Sequence[AnswerEvent]) -> list[AnswerEvent]:
    out: list[AnswerEvent] = []
    for ev in events:
        last = out[-1] if out else None
        if isinstance(ev, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + ev.text)
        elif isinstance(ev, ToolCallArgs) and isinstance(last, ToolCallArgs):
            assert last.index == ev.index
            out[-1] = ToolCallArgs(ev.index, last.fragment + ev.fragment)
        else:
            out.append(ev)
    return out


def split(text: str, cuts: Sequence[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)])]


def parse(text: str) -> tuple[str | None, list[tuple[str, Any]], str]:
    """(content, [(name, arguments as parsed JSON)], finish_reason), checked in 1-char pieces."""
    result = parse_answer(text, ids())
    events, reason = stream(list(text))
    content, calls = accumulate(events)
    assert (content or None, calls, reason) == (
        result.content,
        result.tool_calls,
        result.finish_reason,
    )
    assert [c[0] for c in result.tool_calls] == [f"call_{i}" for i in range(len(calls))]
    return (
        result.content,
        [(name, json.loads(args)) for _, name, args in result.tool_calls],
        result.finish_reason,
    )


# -- golden cases ---------------------------------------------------------------------------


def test_reply() -> None:
    assert parse('{"tool_call":null,"response":"Hello!"}') == ("Hello!", [], "stop")


def test_single_call() -> None:
    text = '{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}'
    assert parse(text) == (None, [("get_weather", {"city": "Paris"})], "tool_calls")


def test_parallel_calls_are_indexed_contiguously() -> None:
    text = json.dumps(
        {
            "tool_calls": [
                {"name": "a", "arguments": {"x": 1}},
                {"arguments": {"dropped": True}},  # no name: dropped, takes no index
                {"name": "b", "arguments": {"y": [1, 2]}},
                None,
                {"name": "c"},
            ]
        }
    )
    events, reason = stream([text])
    assert [e.index for e in events if isinstance(e, ToolCallStart)] == [0, 1, 2]
    assert reason == "tool_calls"
    assert parse(text) == (None, [("a", {"x": 1}), ("b", {"y": [1, 2]}), ("c", {})], "tool_calls")


def test_start_precedes_its_args_and_calls_do_not_interleave() -> None:
    text = '{"tool_calls":[{"name":"a","arguments":{"q":"1"}},{"name":"b","arguments":{}}]}'
    events = coalesce(stream(list(text))[0])
    assert events == [
        ToolCallStart(0, "call_0", "a"),
        ToolCallArgs(0, '{"q":"1"}'),
        ToolCallStart(1, "call_1", "b"),
        ToolCallArgs(1, "{}"),
    ]


def test_args_before_name_are_held_then_emitted_after_start() -> None:
    text = '{"tool_call":{"arguments":{"a":"b"},"name":"f"}}'
    assert coalesce(stream(list(text))[0]) == [
        ToolCallStart(0, "call_0", "f"),
        ToolCallArgs(0, '{"a":"b"}'),
    ]


def test_arguments_as_json_string() -> None:
    text = json.dumps({"tool_call": {"name": "f", "arguments": json.dumps({"k": "v\u00e9"})}})
    assert parse(text) == (None, [("f", {"k": "v\u00e9"})], "tool_calls")
    bad = json.dumps({"tool_call": {"name": "f", "arguments": "not json"}})
    assert parse(bad) == (None, [("f", {})], "tool_calls")


def test_missing_or_null_or_odd_arguments_become_empty_object() -> None:
    for args in ("", ',"arguments":null', ',"arguments":[1]', ',"arguments":3'):
        text = '{"tool_call":{"name":"f"' + args + "}}"
        assert parse(text) == (None, [("f", {})], "tool_calls"), text


def test_code_fences_and_whitespace_are_skipped() -> None:
    body = '{"tool_call":null,"response":"hi"}'
    for text in (f"```json\n{body}\n```", f"  \n```\n{body}```", f"```JSON {body}"):
        assert parse(text) == ("hi", [], "stop")


def test_fence_without_object_is_prose() -> None:
    assert parse("```python\nprint(1)\n```") == ("```python\nprint(1)\n```", [], "stop")


def test_prose_before_object_is_content() -> None:
    text = 'Let me check.\n\n```json\n{"tool_call": {"name": "f", "arguments": {}}}\n```\nDone.'
    assert parse(text) == ("Let me check.", [("f", {})], "tool_calls")


def test_prose_before_a_reply_keeps_its_line_break() -> None:
    text = 'Sure, here is my answer:\n{"tool_call":null,"response":"final answer"}'
    assert parse(text) == ("Sure, here is my answer:\nfinal answer", [], "stop")
    fenced = 'Sure:\n```json\n{"tool_call":null,"response":"x"}\n```'
    assert parse(fenced) == ("Sure:\nx", [], "stop")


def test_prose_with_innocent_braces_passes_through() -> None:
    text = 'Use {"a": 1} or { "tool": 2 } or {"responses": 3}; done {'
    assert parse(text) == (text, [], "stop")


def test_duplicated_object_and_trailing_chatter_are_ignored() -> None:
    body = '{"tool_call":{"name":"f","arguments":{"a":1}}}'
    assert parse(body + "\n" + body + "\nHope that helps!") == (
        None,
        [("f", {"a": 1})],
        "tool_calls",
    )


def test_escapes_are_decoded() -> None:
    text = r'{"response":"caf\u00e9 \ud83d\ude00 \"q\" back\\slash\nline\t\/"}'
    assert parse(text)[0] == 'café 😀 "q" back\\slash\nline\t/'


def test_escapes_never_emit_half_a_character() -> None:
    text = r'{"response":"\ud83d\ude00\u00e9"}'
    events, _ = stream(list(text))
    assert [e for e in events if isinstance(e, ContentDelta)] == [
        ContentDelta("😀"),
        ContentDelta("é"),
    ]


def test_lone_surrogates_become_replacement_char() -> None:
    assert parse(r'{"response":"a\ud83db\ude00c\ud83d"}')[0] == "a\ufffdb\ufffdc\ufffd"


def test_raw_control_chars_in_strings_are_tolerated() -> None:
    text = '{"response":"a\nb","tool_call":{"name":"f","arguments":{"s":"x\ty"}}}'
    assert parse(text) == ("a\nb", [("f", {"s": "x\ty"})], "tool_calls")


def test_unicode_and_tricky_args() -> None:
    args = {
        "text": 'braces } { ] [ and "quotes" and \\ and \u00e9\U0001f600',
        "nested": {"list": [1, -2.5e3, True, False, None, {"deep": ["}"]}], "empty": {}},
        "k\u00e9y": "",
    }
    for ensure_ascii in (True, False):
        text = json.dumps(
            {"tool_call": {"name": "f\u00e9", "arguments": args}}, ensure_ascii=ensure_ascii
        )
        assert parse(text) == (None, [("f\u00e9", args)], "tool_calls")


def test_reply_and_call_together() -> None:
    text = '{"response":"Calling.","tool_call":{"name":"f","arguments":{}}}'
    assert parse(text) == ("Calling.", [("f", {})], "tool_calls")


def test_unknown_keys_skipped_in_any_order() -> None:
    text = json.dumps(
        {
            "thought": {"response": "not me", "tool_call": {"name": "no"}},
            "tool_call": {"id": "x", "meta": [{"name": "no"}], "name": "f", "arguments": {"a": 1}},
            "extra": [1, "two", None],
        }
    )
    assert parse(text) == (None, [("f", {"a": 1})], "tool_calls")


def test_malformed_json_falls_back_to_text() -> None:
    text = '{"tool_call": {"name" "f"}} and more'
    assert parse(text) == (text, [], "stop")
    assert parse("{not json at all}") == ("{not json at all}", [], "stop")


def test_malformed_after_emission_stops() -> None:
    assert parse('{"response":"partial" garbage "more"}') == ("partial", [], "stop")


def test_empty_text() -> None:
    assert parse("") == (None, [], "stop")
    assert parse("  \n ") == (None, [], "stop")


def test_json_object_without_answer_keys_is_content() -> None:
    assert parse('{"city": "Paris"}') == ('{"city": "Paris"}', [], "stop")


def test_recognized_but_empty_answer() -> None:
    assert parse('{"tool_call": null}') == (None, [], "stop")
    assert parse('{"tool_call": null, "response": ""}') == (None, [], "stop")


def test_cut_off_reply_keeps_streamed_content() -> None:
    assert parse('{"tool_call":null,"response":"Hel') == ("Hel", [], "stop")


def test_a_cut_off_call_is_dropped_never_closed_off_or_shown() -> None:
    """Issue 24 (D3): a call whose arguments did not complete never reaches the client, not
    even its start, streaming or not; the parser says it was cut off."""
    head = '{"tool_call":{"name":"f","arguments":'
    for tail in ('{"a":"xy', '{"a":1,', '{"a":', '{"a":[1,{"b', '{"a":"x\\u00', "", '"{\\"a'):
        assert parse(head + tail) == (None, [], "stop"), tail
        parser = AnswerParser(ids())
        events = [ev for ch in head + tail for ev in parser.feed(ch)] + parser.finish()
        assert events == [] and parser.cut_off and parser.cut_call == 0, tail
    # after a complete call and a reply, the cut one alone is dropped
    text = '{"response":"Hi","tool_calls":[{"name":"a","arguments":{}},{"name":"b","arguments":{'
    parser = AnswerParser(ids())
    assert accumulate(parser.feed(text) + parser.finish()) == ("Hi", [("call_0", "a", "{}")])
    assert parser.cut_off and parser.cut_call == 1 and parser.finish_reason == "tool_calls"
    # arguments complete, the call object cut: the call is whole, so it counts
    assert parse(head + '{"a":1}') == (None, [("f", {"a": 1})], "tool_calls")


def test_a_call_is_emitted_only_once_its_arguments_are_complete() -> None:
    text = '{"tool_call":{"name":"f","arguments":{"a":[1,2],"b":"x"}}}'
    parser = AnswerParser(ids())
    for i, ch in enumerate(text):
        events = parser.feed(ch)
        if i < text.index("}"):
            assert events == [], (i, events)
        elif events:
            assert events == [
                ToolCallStart(0, "call_0", "f"),
                ToolCallArgs(0, '{"a":[1,2],"b":"x"}'),
            ]
            break
    else:
        raise AssertionError("the call was never emitted")


def test_invalid_json_inside_a_held_call_is_text() -> None:
    """Nothing was emitted (the call was held back): the object is shown as text, like any
    malformed object; after something was emitted, the held call is dropped."""
    text = '{"tool_call":{"name":"f","arguments":{"a":1 oops}}}'
    assert parse(text) == (text, [], "stop")
    text = '{"response":"Hi","tool_call":{"name":"f","arguments":{"a":1 oops}}}'
    assert parse(text) == ("Hi", [], "stop")


def test_cut_off_before_anything_emitted_is_text() -> None:
    assert parse('{"tool_call":{"name":"f') == ('{"tool_call":{"name":"f', [], "stop")


def test_finish_reason_before_finish_and_after() -> None:
    parser = AnswerParser(ids())
    parser.feed('{"tool_call":{"name":"f"')
    assert parser.finish_reason == "stop"  # not emitted yet
    parser.feed(',"arguments":{}')
    assert parser.finish_reason == "tool_calls"
    assert AnswerParser(ids()).finish_reason == "stop"


# -- properties -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
args_dicts = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, Any]]:
    name = draw(st.text(min_size=1, max_size=8))
    args = draw(args_dicts)
    obj: dict[str, Any] = {"name": name}
    form = draw(st.sampled_from(["object", "string", "missing"]))
    if form == "object":
        obj["arguments"] = args
    elif form == "string":
        obj["arguments"] = json.dumps(args)
    else:
        args = {}
    if draw(st.booleans()):
        obj["extra"] = draw(json_values)
    items = draw(st.permutations(list(obj.items())))
    return name, args, dict(items)


@st.composite
def answers(draw: st.DrawFn) -> tuple[str, str | None, list[tuple[str, dict[str, Any]]]]:
    """(text, expected content, expected calls)."""
    kind = draw(st.sampled_from(["reply", "call", "calls"]))
    obj: dict[str, Any]
    expected_calls: list[tuple[str, dict[str, Any]]] = []
    content = ""
    if kind == "reply":
        content = draw(st.text(max_size=30))
        obj = {"tool_call": None, "response": content}
    elif kind == "call":
        name, args, call = draw(calls())
        obj = {"tool_call": call}
        expected_calls = [(name, args)]
    else:
        drawn = draw(st.lists(calls(), min_size=1, max_size=3))
        obj = {"tool_calls": [c for _, _, c in drawn]}
        expected_calls = [(n, a) for n, a, _ in drawn]
    text = json.dumps(
        obj,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 1])),
        separators=draw(st.sampled_from([None, (",", ":"), (" , ", " : ")])),
    )
    if draw(st.booleans()):
        text = "```json\n" + text + "\n```"
    prose = draw(st.sampled_from(["", "Sure.\n", "Here {you} go: "]))
    # the break between prose and a reply that continues it is kept (issue: it was lost)
    sep = ("\n" if "\n" in prose else " ") if prose and content else ""
    content = prose.rstrip() + sep + content
    tail = draw(st.sampled_from(["", "\n", "\nThanks!", "\n" + text]))
    return prose + text + tail, content or None, expected_calls


cuts = st.lists(st.integers(min_value=0, max_value=2000), max_size=12)
json_ish = st.text(alphabet='{}[]":,\\ `ntrulfaesponcid_0123456789-.\n\u00e9\ud83d', max_size=80)
keyish = st.lists(
    st.sampled_from(
        [
            '{"tool_call":',
            '{"response":',
            '"tool_calls":[',
            '{"name":"f"',
            '"arguments":{',
            "```json\n",
        ]
    )
    | json_ish,
    max_size=6,
).map("".join)


@FAST
@given(answers(), cuts)
def test_structured_answers_parse_exactly_for_any_split(
    answer: tuple[str, str | None, list[tuple[str, dict[str, Any]]]], cut: list[int]
) -> None:
    text, content, expected_calls = answer
    result = parse_answer(text, ids())
    assert result.content == content
    assert [(name, json.loads(args)) for _, name, args in result.tool_calls] == expected_calls
    assert result.finish_reason == ("tool_calls" if expected_calls else "stop")
    events, _ = stream(split(text, cut))
    assert coalesce(events) == coalesce(stream([text])[0])


@FAST
@given(st.one_of(st.text(max_size=80), json_ish, keyish), cuts, cuts)
def test_arbitrary_text_never_raises_and_is_split_independent(
    text: str, cut1: list[int], cut2: list[int]
) -> None:
    whole = parse_answer(text, ids())
    events1, reason1 = stream(split(text, cut1))
    events2, reason2 = stream(split(text, cut2))
    content, calls_ = accumulate(events1)
    assert (content or None, calls_, reason1) == (
        whole.content,
        whole.tool_calls,
        whole.finish_reason,
    )
    assert coalesce(events1) == coalesce(events2)
    assert reason1 == reason2
    starts = [e.index for e in events1 if isinstance(e, ToolCallStart)]
    assert starts == list(range(len(starts)))


@FAST
@given(st.lists(calls(), min_size=1, max_size=3), cuts, st.integers(min_value=0, max_value=400))
def test_completed_and_cut_calls_have_object_arguments(
    drawn: list[tuple[str, dict[str, Any], dict[str, Any]]], cut: list[int], keep: int
) -> None:
    text = json.dumps({"tool_calls": [c for _, _, c in drawn]})
    events, _ = stream(split(text, cut))
    _, done = accumulate(events)
    assert [json.loads(args) for _, _, args in done] == [a for _, a, _ in drawn]
    # cut anywhere: every call that reaches the client has its arguments complete, as written
    events, _ = stream(split(text[:keep], cut))
    got = [json.loads(args) for _, _, args in accumulate(events)[1]]
    assert got == [a for _, a, _ in drawn][: len(got)]


# -- large answers: the fast paths (whole strings and containers at once) keep the behaviour --

CODE = 'if x == "a\\b":\n\treturn f(\'y\')  # caf\u00e9 \u2014 \U0001f600 {"k": [1, 2]}\x01\n'


def pieces(text: str, seed: int, most: int = 200) -> list[str]:
    """``text`` in random pieces of 1..``most`` chars (seeded)."""
    rnd = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        k = rnd.randint(1, most)
        out.append(text[i : i + k])
        i += k
    return out


def big_call(size: int, ensure_ascii: bool = True) -> tuple[str, dict[str, Any]]:
    args = {"path": "a.py", "content": (CODE * (size // len(CODE) + 1))[:size], "n": [1, 2.5]}
    text = json.dumps(
        {"tool_call": {"name": "write", "arguments": args}}, ensure_ascii=ensure_ascii
    )
    return text, args


def test_large_call_is_the_same_whole_char_by_char_and_in_random_pieces() -> None:
    for ensure_ascii in (True, False):
        text, args = big_call(3_000, ensure_ascii)
        whole = coalesce(stream([text])[0])
        assert whole == [
            ToolCallStart(0, "call_0", "write"),
            ToolCallArgs(0, json.dumps(args, ensure_ascii=ensure_ascii)),
        ]
        assert coalesce(stream(list(text))[0]) == whole
        for seed in range(5):
            assert coalesce(stream(pieces(text, seed))[0]) == whole
        assert parse(text) == (None, [("write", args)], "tool_calls")


def test_raw_control_chars_in_a_large_argument_are_escaped_for_any_split() -> None:
    content = "line\tone\nline two\x00\x1f end " * 200
    text = '{"tool_call":{"name":"f","arguments":{"s":"' + content + '"}}}'
    expected = [
        ToolCallStart(0, "call_0", "f"),
        ToolCallArgs(0, '{"s":' + json.dumps(content) + "}"),
    ]
    assert coalesce(stream([text])[0]) == expected
    for seed in range(3):
        assert coalesce(stream(pieces(text, seed, 50))[0]) == expected


def test_a_large_call_is_emitted_whole_at_the_feed_that_completes_it() -> None:
    text, args = big_call(100_000)
    parser = AnswerParser(ids())
    fed = 0
    end = text.index(', "n": [1, 2.5]}') + len(', "n": [1, 2.5]}')  # its arguments close
    for piece in pieces(text, 7):
        events = parser.feed(piece)
        fed += len(piece)
        if fed < end:
            assert events == []
        elif events:
            assert fed - len(piece) < end  # this very feed completed them
            assert events[0] == ToolCallStart(0, "call_0", "write")
            assert [type(e) for e in events] == [ToolCallStart, ToolCallArgs]
            assert isinstance(events[1], ToolCallArgs)
            assert json.loads(events[1].fragment) == args
            break
    else:
        raise AssertionError("the call was never emitted")


def test_a_long_reply_streams_decoded_as_it_arrives() -> None:
    reply = 'word "q" \u00e9\n\\ \u2014 ' * 3_000
    text = json.dumps({"tool_call": None, "response": reply})  # \" \u00e9 \n \\ \u2014
    parser = AnswerParser(ids())
    content = ""
    start = text.index('"response": "') + len('"response": "')
    fed = 0
    for piece in pieces(text, 3):
        content += "".join(e.text for e in parser.feed(piece) if isinstance(e, ContentDelta))
        fed += len(piece)
        if start < fed < len(text) - 2:
            body = text[start:fed]
            for cut in range(6):  # less an escape cut by the piece's end
                try:
                    decoded = json.loads('"' + body[: len(body) - cut] + '"')
                    break
                except ValueError:
                    continue
            assert content == decoded
    content += "".join(e.text for e in parser.finish() if isinstance(e, ContentDelta))
    assert content == reply


def test_surrogate_escapes_split_anywhere_in_a_long_string() -> None:
    body = r"a\ud83d\ude00b\ud83dc\ude00\u00e9\"\\" * 40 + r"\ud83d"
    text = '{"response":"' + body + '"}'
    expected = ('a\U0001f600b\ufffdc\ufffd\u00e9"\\' * 40 + "\ufffd", [], "stop")
    assert parse(text) == expected
    whole = coalesce(stream([text])[0])
    for k in range(len(text) + 1):
        assert coalesce(stream([text[:k], text[k:]])[0]) == whole, k


def test_containers_read_at_once_agree_with_the_char_reader() -> None:
    head = '{"tool_call":{"name":"f","arguments":'
    deep = "[" * 3_000 + "]" * 3_000
    nested: Any = {"b": None}
    for _ in range(20):
        nested = [nested]
    nested = {"a": nested, "c": "}]"}
    cases = [
        # NaN is no JSON: the call never completes (held back, so the object is text)
        (head + '{"a":[1,2,NaN]}}}', []),
        (head + "[1, {}]}}", [("f", {})]),  # an array is no arguments object
        (head + json.dumps(nested) + "}}", [("f", nested)]),
        # skipped containers: unknown keys, deep ones too
        ('{"x":' + deep + ',"thought":{"a":[1,{"b":"}"}]},' + head[1:] + "{}}}", [("f", {})]),
    ]
    for text, expected in cases:
        assert parse(text)[1:] == (expected, "tool_calls" if expected else "stop"), text[:60]
        whole = coalesce(stream([text])[0])
        for seed in range(3):
            assert coalesce(stream(pieces(text, seed, 40))[0]) == whole
    # 3,000 levels: deeper than the C reader goes; read char by char, same result
    text = head + '{"a":' + deep + "}}}"
    assert accumulate(stream([text])[0])[1] == [("call_0", "f", '{"a":' + deep + "}")]
    assert coalesce(stream(pieces(text, 0, 500))[0]) == coalesce(stream([text])[0])
    # before the name, NaN makes the object invalid before anything was emitted: text
    bad = '{"tool_call":{"arguments":{"a":NaN},"name":"f"}}'
    assert parse(bad) == (bad, [], "stop")


def test_large_arguments_before_the_name_are_held_then_emitted() -> None:
    args = {"s": CODE * 300, "list": list(range(500))}
    text = json.dumps({"tool_call": {"arguments": args, "name": "f"}})
    expected = [ToolCallStart(0, "call_0", "f"), ToolCallArgs(0, json.dumps(args))]
    assert coalesce(stream([text])[0]) == expected
    assert coalesce(stream(pieces(text, 1))[0]) == expected
