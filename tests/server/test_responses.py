"""The Responses API beyond the basics in test_responses_api.py: every raw stream event
checked against the SDK's own event union, failures mid-stream, structured output, the
request items as they reach the CLI, tool_choice, and the stateless refusals."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from tests.conftest import Served, ServeFactory, fake
from tests.server.test_chat import PNG_URL
from tests.server.test_responses_api import TIME, WEATHER

EVENT = TypeAdapter(ResponseStreamEvent)
TEXT_AND_CALLS = json.dumps(
    {
        "response": "Checking.",
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Oslo"}},
            {"name": "get_time", "arguments": {}},
        ],
    }
)


async def raw_events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request; each SSE event as its data, checked against the SDK."""
    async with aiohttp.ClientSession() as s, s.post(url, json={**body, "stream": True}) as resp:
        assert resp.status == 200
        assert resp.content_type == "text/event-stream"
        raw = (await resp.read()).decode()
    events = []
    for block in raw.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line[:1] != ":")
        data = json.loads(fields["data"])
        assert fields["event"] == data["type"]  # the event: line names the type
        EVENT.validate_python(data)  # a real ResponseStreamEvent, every required field
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


async def test_stream_events_text_and_calls(served: Served) -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "input": "go " + fake(answer=TEXT_AND_CALLS, chunks=7),
        "tools": [WEATHER, TIME],
    }
    events = await raw_events(f"{served.base_url}/responses", body)
    kinds = [(e["type"], e.get("output_index")) for e in events]
    assert kinds == [
        ("response.created", None),
        ("response.in_progress", None),
        ("response.output_item.added", 0),
        ("response.content_part.added", 0),
        *[("response.output_text.delta", 0)]
        * sum(e["type"] == "response.output_text.delta" for e in events),
        ("response.output_text.done", 0),
        ("response.content_part.done", 0),
        ("response.output_item.done", 0),
        *[
            kind
            for i in (1, 2)
            for kind in [
                ("response.output_item.added", i),
                *[("response.function_call_arguments.delta", i)]
                * sum(
                    e["type"] == "response.function_call_arguments.delta" and e["output_index"] == i
                    for e in events
                ),
                ("response.function_call_arguments.done", i),
                ("response.output_item.done", i),
            ]
        ],
        ("response.completed", None),
    ]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Checking."
    # the items announced as done are exactly the final response's output
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    final = events[-1]["response"]
    assert final["output"] == done and final["status"] == "completed"
    assert [o["type"] for o in done] == ["message", "function_call", "function_call"]
    for e in events:
        if e["type"] == "response.function_call_arguments.done":
            assert e["arguments"] == done[e["output_index"]]["arguments"]
            assert e["item_id"] == done[e["output_index"]]["id"]
    assert json.loads(done[1]["arguments"]) == {"city": "Oslo"}
    assert events[0]["response"]["id"] == final["id"] and final["id"].startswith("resp_")
    assert final["usage"]["total_tokens"] > 0


async def test_stream_function_call_with_sdk_helper(strict: openai.AsyncOpenAI) -> None:
    args: Any = {
        "model": "claude-sonnet-4-6",
        "input": "weather " + fake(answer=TEXT_AND_CALLS),
        "tools": [WEATHER, TIME],
    }
    async with strict.responses.stream(**args) as stream:
        snapshots = [
            e.snapshot async for e in stream if e.type == "response.function_call_arguments.delta"
        ]
        final = await stream.get_final_response()
    assert snapshots and json.loads(snapshots[-1]) in ({"city": "Oslo"}, {})
    calls = [o for o in final.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {}),
    ]
    assert final.output_text == "Checking."


async def test_stream_failure_before_any_answer_is_a_real_429(served: Served) -> None:
    bad = fake(is_error=True, api_error_status=429, error_message="API Error: 429 slow down")
    with pytest.raises(openai.RateLimitError, match="slow down") as info:
        await served.client.responses.create(model="claude-sonnet-4-6", input=bad, stream=True)
    assert info.value.response.headers["Retry-After"]


async def test_stream_failure_sends_failed_then_error(serve: ServeFactory) -> None:
    served = await serve(stream_head_hold_s=0)  # the head goes out before the failure
    strict = openai.AsyncOpenAI(
        base_url=served.base_url, api_key="x", max_retries=0, _strict_response_validation=True
    )
    bad = fake(is_error=True, api_error_status=429, error_message="API Error: 429 slow down")
    body = {"model": "claude-sonnet-4-6", "input": bad}
    events = await raw_events(f"{served.base_url}/responses", body)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
        "error",
    ]
    failed, error = events[2], events[3]
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {
        "code": "rate_limit_exceeded",
        "message": "API Error: 429 slow down",
    }
    assert error["code"] == "rate_limit_exceeded" and error["message"] == "API Error: 429 slow down"
    assert error["error"]["type"] == "rate_limit_error"
    # openai-python raises at the error event, after it has seen response.failed
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="slow down"):
        stream = await strict.responses.create(stream=True, **body)
        async for event in stream:
            seen.append(event.type)
    assert seen == ["response.created", "response.in_progress", "response.failed"]
    await strict.close()


async def test_failure_after_text_marks_the_item_incomplete(served: Served) -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "input": fake(answer="partial answer", exit=3, print_before_exit=True, no_result=True),
    }
    events = await raw_events(f"{served.base_url}/responses", body)
    types = [e["type"] for e in events]
    assert types[-2:] == ["response.failed", "error"]
    assert "response.output_text.delta" in types
    assert "response.output_item.done" not in types  # the message never completed
    failed = events[-2]["response"]
    assert failed["error"] == {"code": "server_error", "message": "claude exited with code 3"}
    assert [(o["type"], o["status"]) for o in failed["output"]] == [("message", "incomplete")]
    assert failed["output"][0]["content"][0]["text"] == "partial answer"
    assert events[-1]["code"] == "cli_error"


async def test_non_stream_failure_is_an_http_error(strict: openai.AsyncOpenAI) -> None:
    bad = fake(is_error=True, api_error_status=429, error_message="API Error: 429 slow down")
    with pytest.raises(openai.RateLimitError) as info:
        await strict.responses.create(model="gemini-2.5-flash", input=bad)
    assert info.value.status_code == 429


class Weather(BaseModel):
    city: str
    celsius: int


async def test_structured_output(strict: openai.AsyncOpenAI) -> None:
    answer = json.dumps({"city": "Oslo", "celsius": -3})
    r = await strict.responses.parse(
        model="claude-sonnet-4-6", input="weather? " + fake(answer=answer), text_format=Weather
    )
    assert r.output_parsed == Weather(city="Oslo", celsius=-3)
    assert r.text is not None and r.text.format is not None
    assert r.text.format.type == "json_schema"
    # the schema reaches the CLI the same way chat's response_format does
    echo = await strict.responses.create(
        model="claude-sonnet-4-6",
        input=fake(echo_prompt=True),
        text={
            "format": {
                "type": "json_schema",
                "name": "Weather",
                "schema": Weather.model_json_schema(),
            }
        },
    )
    # the answer is the first JSON object of what the CLI got (the fake echoes its prompt):
    # the schema, exactly as the client sent it
    assert json.loads(echo.output_text) == Weather.model_json_schema()
    plain = await strict.responses.create(
        model="claude-sonnet-4-6", input=fake(echo_prompt=True), text={"format": {"type": "text"}}
    )
    assert "JSON" not in plain.output_text


async def test_input_items_reach_the_prompt(strict: openai.AsyncOpenAI) -> None:
    items: Any = [
        {"role": "developer", "content": "Be terse."},
        {"role": "system", "content": [{"type": "input_text", "text": "No emoji."}]},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this picture?"},
                {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A cat."}],
        },
        {"role": "user", "content": "And its colour? " + fake(echo_prompt=True)},
    ]
    r = await strict.responses.create(
        model="claude-sonnet-4-6", instructions="Answer in French.", input=items
    )
    prompt = r.output_text
    system = prompt.split("<system_context>", 1)[1].split("</system_context>", 1)[0]
    assert "Answer in French." in system and "Be terse." in system and "No emoji." in system
    assert "What is in this picture?" in prompt
    assert '<image n="1" media_type="image/png" sha256="' in prompt
    assert 'role="assistant">A cat.<' in prompt
    assert 'role="user">And its colour? ' in prompt and prompt.endswith("</conversation_history>\n")


@pytest.mark.parametrize(
    ("choice", "expect", "absent"),
    [
        ("required", "A function call is required", None),
        ({"type": "function", "name": "get_time"}, "must call the function 'get_time'", None),
        ("none", None, "available_functions"),
        ("auto", "available_functions", "is required"),
    ],
)
async def test_tool_choice(
    strict: openai.AsyncOpenAI, choice: Any, expect: str | None, absent: str | None
) -> None:
    r = await strict.responses.create(
        model="claude-sonnet-4-6",
        input="hi " + fake(echo_prompt=True),
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice=choice,
        parallel_tool_calls=False,
    )
    assert r.tool_choice == choice or r.tool_choice.model_dump() == choice  # type: ignore[union-attr]
    assert r.parallel_tool_calls is False
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]  # type: ignore[union-attr]
    if expect:
        assert expect in r.output_text
    if absent:
        assert absent not in r.output_text


async def test_echoed_fields_and_ignored_extras(strict: openai.AsyncOpenAI) -> None:
    r = await strict.responses.create(
        model="claude-sonnet-4-6",
        input=fake(answer="fine"),
        instructions="Be kind.",
        metadata={"ticket": "T-1"},
        store=True,  # accepted; nothing is stored
        max_output_tokens=123,
        temperature=0.2,
        user="u-1",
        extra_body={"prompt_cache_key": "k", "include": ["reasoning.encrypted_content"]},
    )
    Response.model_validate(r.model_dump())
    assert r.output_text == "fine"
    assert r.metadata == {"ticket": "T-1"}
    assert r.instructions == "Be kind."
    assert r.max_output_tokens == 123 and r.temperature == 0.2
    assert r.previous_response_id is None
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert msg.content[0].type == "output_text" and msg.content[0].annotations == []
    assert r.usage is not None
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


async def test_output_limit_is_incomplete(served: Served, strict: openai.AsyncOpenAI) -> None:
    body: Any = {"model": "claude-sonnet-4-6", "input": fake(answer="long story", max_tokens=True)}
    r = await strict.responses.create(**body)
    assert r.status == "incomplete"
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    events = await raw_events(f"{served.base_url}/responses", body)
    assert events[-1]["type"] == "response.incomplete"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "keeps no state"),
        ({"conversation": "conv_1"}, "conversation", "keeps no state"),
        ({"input": []}, "input", "at least one item"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice.type", "forces the server tool"),
        ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name", "pattern"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type", "grammar"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "role"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice.type", "cannot run"),
    ],
)
async def test_refused_requests(
    strict: openai.AsyncOpenAI, kwargs: dict[str, Any], param: str, words: str
) -> None:
    args: dict[str, Any] = {"model": "claude-sonnet-4-6", "input": "hi", **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        await strict.responses.create(**args)
    body: Any = info.value.body
    assert body["param"] == param
    assert words in body["message"] or words in str(body["code"])


async def test_unknown_model_streaming_is_a_404(strict: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await strict.responses.create(model="gpt-4o", input="hi", stream=True)
    assert info.value.body["code"] == "model_not_found"  # type: ignore[index]


async def test_unprefixed_route_and_auth(serve: ServeFactory) -> None:
    s = await serve(api_keys=["k1"])
    url = str(s.server.make_url("/responses"))
    body = {"model": "claude-sonnet-4-6", "input": fake(answer="yes")}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body) as resp:
            assert resp.status == 401
        headers = {"Authorization": "Bearer k1"}
        async with session.post(url, json=body, headers=headers) as resp:
            assert resp.status == 200
            data = await resp.json()
    Response.model_validate(data)
    assert data["output"][0]["content"][0]["text"] == "yes"
