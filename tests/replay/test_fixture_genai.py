"""The pytest plugin serves google-genai clients too: ``cli_proxy_genai_client`` beside the
OpenAI and Anthropic ones, in a user's project (pytester, a real pytest subprocess). Its
calls are recorded with the stand-in CLIs as the live ones, then replayed with no CLI at all:
a function-call round trip and a stream, on claude, gemini and codex."""

from __future__ import annotations

import pytest

from tests.replay.test_fixture_modes import records_then_replays

TESTS = """
import json

from google.genai import types

WEATHER = types.FunctionDeclaration(name="get_weather", parameters_json_schema={
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
CONFIG = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER])])


def fake(**d):
    return " @@fake " + json.dumps(d)


def call(model):
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    if model == "gpt-5.5":
        return fake(tool_calls=[paris])
    return fake(answer=json.dumps({"tool_call": paris}))


def test_weather_agent(cli_proxy_genai_client):
    client = cli_proxy_genai_client
    for model in ("claude-sonnet-4-6", "gemini-2.5-flash", "gpt-5.5"):
        ask = types.Content(role="user", parts=[types.Part(text="Weather?" + call(model))])
        first = client.models.generate_content(model=model, contents=[ask], config=CONFIG)
        assert first.function_calls[0].args == {"city": "Paris"}
        final = "18 C" if model == "gpt-5.5" else json.dumps(
            {"tool_call": None, "response": "18 C"})
        back = types.Content(role="user", parts=[
            types.Part.from_function_response(name="get_weather", response={"t": "18 C"}),
            types.Part(text="so?" + fake(answer=final)),
        ])
        second = client.models.generate_content(
            model=model, contents=[ask, first.candidates[0].content, back], config=CONFIG)
        assert second.text == "18 C"


def test_stream(cli_proxy_genai_client):
    pieces = [c.text for c in cli_proxy_genai_client.models.generate_content_stream(
        model="claude-sonnet-4-6", contents="hi" + fake(answer="Hello!", chunks=3))]
    assert "".join(p or "" for p in pieces) == "Hello!"
"""


@pytest.mark.timeout(300)
def test_genai_client_records_and_replays(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    records_then_replays(pytester, monkeypatch, TESTS)
