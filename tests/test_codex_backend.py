"""The codex backend through the gateway without the real binary: the shipped codex fixtures
(recorded from codex 0.169.0 by ``make fixtures``) replayed by the pytest plugin and
``start_gateway``, and the stand-in CLI (``tests/data/real-cli/codex-fake-cli.py``) for
the SDK paths, the Responses API and a model call to one of codex's own tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from cli_proxy.testing import start_gateway

from .conftest import CODEX_FAKE_CLI, ServeFactory, fake
from .test_chat import CALL, TIME, WEATHER

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "fixtures"


def codex_fixtures() -> list[dict[str, Any]]:
    return [
        d
        for d in (json.loads(p.read_text()) for p in sorted(SHIPPED.glob("codex-*.json")))
        if d["backend"] == "codex"
    ]


def test_codex_fixtures_are_shipped() -> None:
    fixtures = codex_fixtures()
    assert len(fixtures) >= 7
    for d in fixtures:
        assert d["argv"][:3] == ["codex", "exec", "--json"]


async def test_codex_fixtures_replay() -> None:
    def replay() -> list[Any]:
        out = []
        with start_gateway(SHIPPED) as running:
            client = running.client()
            try:
                for d in codex_fixtures():
                    try:
                        out.append(client.chat.completions.create(**d["request"]))
                    except openai.APIStatusError as exc:
                        out.append(exc.status_code)
            finally:
                client.close()
        return out

    results = await asyncio.to_thread(replay)
    statuses = sorted(r for r in results if isinstance(r, int))
    assert statuses == [429, 503]  # the recorded rate-limit and overload
    answers = [r for r in results if not isinstance(r, int)]
    assert {r.choices[0].finish_reason for r in answers} == {"stop", "tool_calls"}
    assert all(r.model == "gpt-5.5" for r in answers)


def test_pytest_plugin_replays_codex(pytester: pytest.Pytester) -> None:
    data = next(d for d in codex_fixtures() if d["exit_code"] == 0)
    pytester.makeini(f"[pytest]\ncli_proxy_fixtures = {SHIPPED}\n")
    pytester.makepyfile(
        test_user=f"""
import json
request = json.loads({json.dumps(json.dumps(data["request"]))})

def test_replayed(cli_proxy_client):
    r = cli_proxy_client.chat.completions.create(**request)
    assert r.model == "gpt-5.5"
    assert r.choices[0].finish_reason in ("stop", "tool_calls")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


async def served_codex(serve: ServeFactory, bin: str | None = None) -> Any:
    command = bin or f"{sys.executable} {CODEX_FAKE_CLI}"
    return await serve(codex={"bin": command}, idle_timeout_s=5)


async def test_sdk_paths_through_the_stand_in(serve: ServeFactory) -> None:
    served = await served_codex(serve)
    client = served.client
    r = await client.chat.completions.create(
        model="gpt-5.5", messages=[{"role": "user", "content": "hi" + fake(answer="hello")}]
    )
    assert r.choices[0].message.content == "hello" and r.usage is not None
    stream = await client.chat.completions.create(
        model="codex/anything",
        messages=[{"role": "user", "content": "hi" + fake(answer="streamed")}],
        stream=True,
    )
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == (
        "streamed"
    )
    calls = json.dumps(
        {
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_time", "arguments": {}},
            ]
        }
    )
    r = await client.chat.completions.create(
        model="o3",
        messages=[{"role": "user", "content": "x" + fake(answer=calls)}],
        tools=[WEATHER, TIME],  # type: ignore[list-item]
    )
    names = [c.function.name for c in r.choices[0].message.tool_calls or []]  # type: ignore[union-attr]
    assert names == ["get_weather", "get_time"]
    resp = await client.responses.create(
        model="gpt-6.1-sol",
        input="What's the weather in Paris?" + fake(answer=CALL),
        tools=[{"type": "function", **WEATHER["function"]}],  # type: ignore[list-item]
    )
    assert [o.type for o in resp.output] == ["function_call"]


async def test_failed_turn_maps_to_its_status(serve: ServeFactory) -> None:
    served = await served_codex(serve)
    message = "exceeded retry limit, last status: 429 Too Many Requests"
    with pytest.raises(openai.RateLimitError):
        await served.client.chat.completions.create(
            model="gpt-5.5",
            messages=[{"role": "user", "content": "hi" + fake(error_message=message)}],
        )


async def test_cli_tool_call_ends_the_call_at_once(serve: ServeFactory) -> None:
    """codex says so only on stderr; the backend merges it into stdout for the parser."""
    served = await served_codex(serve, f"{sys.executable} {CODEX_FAKE_CLI}")
    with pytest.raises(openai.InternalServerError) as info:
        await served.client.chat.completions.create(
            model="gpt-5.5",
            messages=[{"role": "user", "content": "hi" + fake(cli_tool_call="exec_command")}],
        )
    body: Any = info.value.body
    assert info.value.status_code == 502 and body["code"] == "invalid_tool_call"
    assert "exec_command" in body["message"]
