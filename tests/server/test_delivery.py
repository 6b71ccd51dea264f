"""The one accumulator of a call's answer events (``server/delivery``'s ``Answer``), without
HTTP: every wire format reads the same ordered segments from it."""

from __future__ import annotations

from cli_proxy.plan.spec import ResponseIds
from cli_proxy.protocol import Usage
from cli_proxy.read.answer_events import ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart
from cli_proxy.run.call import Finished
from cli_proxy.run.process import RunStats
from cli_proxy.server.delivery import Answer

EVENTS = [
    ReasoningDelta("think "),
    ReasoningDelta("more"),
    ContentDelta("Hel"),
    ContentDelta("lo"),
    ToolCallStart(0, "call_a", "get_weather"),
    ToolCallArgs(0, '{"city":'),
    ToolCallArgs(0, '"Oslo"}'),
    ToolCallStart(1, "call_b", "get_time"),
    ToolCallArgs(1, "{}"),
    ContentDelta("!"),
]


def test_segments_keep_the_answer_in_order() -> None:
    answer = Answer(reasoning=True)
    steps = [answer.add(ev) for ev in EVENTS]
    kinds = [(seg.kind, new) for seg, new in (s for s in steps if s is not None)]
    assert kinds == [
        ("reasoning", True),
        ("reasoning", False),
        ("text", True),
        ("text", False),
        ("call", True),
        ("call", False),
        ("call", False),
        ("call", True),
        ("call", False),
        ("text", True),
    ]
    assert [s.kind for s in answer.segments] == ["reasoning", "text", "call", "call", "text"]
    assert answer.text("reasoning") == "think more" and answer.text("text") == "Hello!"
    calls = answer.complete_calls()
    assert [(c.call_id, c.name, c.text) for c in calls] == [
        ("call_a", "get_weather", '{"city":"Oslo"}'),
        ("call_b", "get_time", "{}"),
    ]


def test_reasoning_is_kept_only_when_the_format_shows_it() -> None:
    answer = Answer(reasoning=False)
    assert [answer.add(ev) is None for ev in EVENTS[:3]] == [True, True, False]
    assert [s.kind for s in answer.segments] == ["text"]


def test_finished_ends_the_answer_and_is_not_a_segment() -> None:
    answer = Answer(reasoning=False)
    answer.add(ContentDelta("hi"))
    end = Finished("stop", Usage(prompt_tokens=3), ResponseIds(), (), RunStats())
    assert answer.add(end) is None
    assert answer.end is end and len(answer.segments) == 1
