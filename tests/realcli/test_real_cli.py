"""The REAL claude / gemini binaries behind the gateway, against the fake model API.

openai SDK -> gateway (in-process) -> real CLI process -> tests/fakes/fake_model_api.py on
127.0.0.1 (in-process). Nothing leaves the machine: the CLIs get a temporary HOME, dummy
keys and base URLs pointing at the fake API.

Skipped unless the binaries exist: ``$CLI_PROXY_REAL_CLI_DIR`` first, then
``.cli/*/node_modules/.bin`` (``make real-clis`` installs them; ``make test-real`` runs
only these tests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from tests.conftest import Served, ServeFactory, fake
from tests.fakes.fake_model_api import (
    FakeModelAPI,
    anthropic_texts,
    gemini_texts,
    start_fake_model_api,
)
from tests.run.test_reliability import wait_until
from tests.server.test_chat import CALL, WEATHER

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = "claude-sonnet-4-6"
GEMINI = "gemini-2.5-flash"
MODELS = [CLAUDE, GEMINI]


# Variables that would send a CLI elsewhere than the fake API, or to a different auth.
FOREIGN_ENV = (
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GEMINI_MODEL",
    "XDG_CONFIG_HOME",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
)


def real_cli_dir(names: tuple[str, ...] = ("claude", "gemini")) -> Path | None:
    """The first folder holding these binaries: $CLI_PROXY_REAL_CLI_DIR, then .cli/."""
    candidates = [
        os.environ.get("CLI_PROXY_REAL_CLI_DIR"),
        *sorted(str(p) for p in ROOT.glob(".cli/*/node_modules/.bin")),
    ]
    for c in candidates:
        if c and all(os.access(Path(c) / name, os.X_OK) for name in names):
            return Path(c).resolve()
    return None


CLI_DIR = real_cli_dir()

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(
        CLI_DIR is None,
        reason="real claude/gemini binaries not found ($CLI_PROXY_REAL_CLI_DIR or "
        ".cli/node_modules/.bin; `make real-clis` installs them)",
    ),
    pytest.mark.timeout(60),
]


class RealCLIs:
    def __init__(self, served: Served, api: FakeModelAPI) -> None:
        self.served = served
        self.api = api
        self.client = served.client

    def model_requests(self) -> list[dict[str, Any]]:
        """What the CLIs sent to the model endpoints (the claude probe ``HEAD /`` left out)."""
        return [
            r
            for r in self.api.requests
            if r["path"] == "/v1/messages" or r["path"].endswith(":streamGenerateContent")
        ]

    def only_body(self, capture: str) -> dict[str, Any]:
        """The body of the single model request of a test, kept as ``capture`` in
        ``$CLI_PROXY_CAPTURE_DIR`` when that is set (how tests/data/real-cli/ is refreshed)."""
        reqs = self.model_requests()
        assert len(reqs) == 1, [r["path"] for r in self.api.requests]
        body = reqs[0]["body"]
        assert isinstance(body, dict)
        target = os.environ.get("CLI_PROXY_CAPTURE_DIR")
        if target:
            Path(target, capture).write_text(json.dumps(body, indent=1) + "\n")
        return body

    def only_request(self) -> tuple[dict[str, Any], str]:
        """The single model request of a test, and the text of its messages."""
        reqs = self.model_requests()
        assert len(reqs) == 1, [r["path"] for r in self.api.requests]
        body = reqs[0]["body"]
        assert isinstance(body, dict)
        texts = anthropic_texts(body) if reqs[0]["path"] == "/v1/messages" else gemini_texts(body)
        return body, texts[1]


# The API keys the CLIs get, one per provider (apart, so a key sent to the wrong API fails too).
ANTHROPIC_KEY = "sk-ant-api03-test-key"
GEMINI_KEY = "AIza-test-key"


def point_clis_at(api: FakeModelAPI, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A temporary HOME and the environment that sends both real CLIs to the fake API (the
    gateway hands its own, allowlisted, environment to the CLIs), with an API key each: the
    fake API then takes no other credential, so a key the gateway drops fails the test."""
    api.anthropic_key = ANTHROPIC_KEY
    api.gemini_key = GEMINI_KEY
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "GEMINI_API_KEY": GEMINI_KEY,
        "GOOGLE_GEMINI_BASE_URL": api.url,
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
async def real(
    request: pytest.FixtureRequest,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """The gateway on the real claude and gemini. Without warm spares unless a test asks
    (``indirect`` ``{"warm_pool": True}``): a spare started after a test's last call is a
    whole CLI start (1-4 s of CPU) that nobody takes."""
    assert CLI_DIR is not None
    api = await start_fake_model_api()
    point_clis_at(api, tmp_path / "home", monkeypatch)
    settings = Settings(
        claude_bin=str(CLI_DIR / "claude"),
        gemini_bin=str(CLI_DIR / "gemini"),
        timeout_s=45,
        idle_timeout_s=30,
        kill_grace_s=1,
        max_concurrency=4,
        warm_pool=getattr(request, "param", {}).get("warm_pool", False),
    )
    served = await serve(Gateway(settings, live_backends(settings)))
    try:
        yield RealCLIs(served, api)
    finally:
        await api.close()


def assert_no_upstream_tools(body: dict[str, Any]) -> None:
    if "contents" in body:  # gemini: at most an empty function declaration list
        for tool in body.get("tools") or []:
            assert not tool.get("functionDeclarations"), tool
    else:  # claude
        assert body.get("tools") == [], body.get("tools")


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("model", MODELS)
async def test_text_answer(real: RealCLIs, model: str) -> None:
    r = await real.client.chat.completions.create(
        model=model, messages=user("say hi" + fake(answer="Hello from the real CLI!"))
    )
    assert r.model == model
    assert r.choices[0].message.content == "Hello from the real CLI!"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    body, text = real.only_request()
    assert_no_upstream_tools(body)
    assert "<conversation_history>" in text and "say hi" in text


@pytest.mark.parametrize("model", MODELS)
async def test_tool_call(real: RealCLIs, model: str) -> None:
    r = await real.client.chat.completions.create(
        model=model,
        messages=user("What's the weather in Paris?" + fake(answer=CALL)),
        tools=[WEATHER],  # type: ignore[list-item]
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    body, text = real.only_request()
    # our tools travel in the prompt, never as the CLI's own tool declarations
    assert_no_upstream_tools(body)
    assert "<instructions>" in text and "<conversation_history>" in text
    assert '<function name="get_weather">' in text


@pytest.mark.parametrize("model", MODELS)
async def test_tool_call_stream(real: RealCLIs, model: str) -> None:
    chunks = 0
    async with real.client.chat.completions.stream(
        model=model,
        messages=user("What's the weather in Paris?" + fake(answer=CALL, chunks=4)),
        tools=[WEATHER],  # type: ignore[list-item]
    ) as stream:
        async for event in stream:
            chunks += event.type == "chunk"
        final = await stream.get_final_completion()
    assert chunks >= 2
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    body, text = real.only_request()
    assert_no_upstream_tools(body)
    assert "<instructions>" in text and "<conversation_history>" in text


@pytest.mark.parametrize("model", MODELS)
async def test_rate_limit(real: RealCLIs, model: str) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        await real.client.chat.completions.create(
            model=model, messages=user("say hi" + fake(status=429))
        )
    assert info.value.status_code == 429
    # one upstream request: the CLI did not retry (CLAUDE_CODE_MAX_RETRIES=0 / maxAttempts 1)
    assert len(real.model_requests()) == 1


@pytest.mark.parametrize("model", MODELS)
async def test_reasoning_effort_reaches_the_model_api(real: RealCLIs, model: str) -> None:
    r = await real.client.chat.completions.create(
        model=model, messages=user("hi" + fake(answer="ok")), reasoning_effort="low"
    )
    assert r.choices[0].message.content == "ok"
    body, _ = real.only_request()
    if model.startswith("claude"):
        assert body["output_config"]["effort"] == "low"
    else:
        assert body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 1024


async def test_claude_cache_breakpoint_on_the_last_turn(real: RealCLIs) -> None:
    """Our cache_control on the last turn's block reaches the API (with the CLI's own: four
    breakpoints, the API's maximum; a CLI that adds more would make the API refuse)."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second" + fake(answer="ok")},
    ]
    await real.client.chat.completions.create(model=CLAUDE, messages=messages)
    body, _ = real.only_request()
    marked = [
        block
        for part in (body["system"], *(m["content"] for m in body["messages"]))
        for block in part
        if isinstance(block, dict) and "cache_control" in block
    ]
    assert len(marked) <= 4
    ours = body["messages"][-1]["content"]
    assert ours[-2]["cache_control"] == {"type": "ephemeral"}
    assert ours[-2]["text"].startswith('<turn n="3" role="user">second')
    assert ours[-1]["text"].startswith("</conversation_history>")


@pytest.mark.parametrize("real", [{"warm_pool": True}], indirect=True)
@pytest.mark.parametrize("model", MODELS)
async def test_warm_call_answers(real: RealCLIs, model: str) -> None:
    """A pre-started real CLI (claude waiting on stream-json input; gemini with its ACP session
    opened at spawn) answers its call like a cold one."""
    import asyncio

    pool = real.served.gateway.pool
    assert pool is not None
    cold = await real.client.chat.completions.create(
        model=model, messages=user("PROMPT_ONE_5b1" + fake(answer="cold answer"))
    )
    assert cold.choices[0].message.content == "cold answer"
    backend = model.split("-")[0]
    # the spare needs the CLI's start-up time
    await wait_until(lambda: pool.status()["ready"].get(backend), 60, "a spare")  # type: ignore[attr-defined]
    supervisor = real.served.gateway.supervisor
    await wait_until(lambda: not supervisor.starting, 30, "its start to be over")  # warm
    await asyncio.sleep(3 if backend == "gemini" else 0.5)  # idle a while: it must keep waiting
    warm = await real.client.chat.completions.create(
        model=model, messages=user("PROMPT_TWO_9c4" + fake(answer="warm answer"))
    )
    assert warm.choices[0].message.content == "warm answer"
    assert pool.status()["served_warm"] == 1
    bodies = [r["body"] for r in real.model_requests()]
    assert len(bodies) == 2
    last = json.dumps(bodies[-1])
    assert "PROMPT_TWO_9c4" in last and "PROMPT_ONE_5b1" not in last  # saw no other prompt


CUT_CALL = '{"tool_call":{"name":"get_weather","arguments":{"city":"Par'


@pytest.mark.parametrize("model", MODELS)
async def test_a_call_cut_by_the_output_limit_never_reaches_the_client(
    real: RealCLIs, model: str
) -> None:
    """Issue 24 (D3), with the real CLIs' own max-tokens reports: the model's call is cut
    inside its arguments, so no part of it reaches the client, streaming or not; the answer
    ends ``length``."""
    messages = user("Weather in Paris?" + fake(answer=CUT_CALL, stop_reason="max_tokens"))
    plain = await real.client.chat.completions.create(
        model=model,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert plain.choices[0].finish_reason == "length"
    assert not plain.choices[0].message.tool_calls
    finish, saw_call = None, False
    async for chunk in await real.client.chat.completions.create(
        model=model,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
        stream=True,
    ):
        for choice in chunk.choices:
            saw_call = saw_call or bool(choice.delta.tool_calls)
            finish = choice.finish_reason or finish
    assert finish == "length"
    assert not saw_call


@pytest.mark.parametrize(
    ("model", "upstream"),
    [
        ("claude-opus-x.1:beta@a+b", "claude-opus-x.1:beta@a+b"),
        ("claude/sonnet-x.2@b", "sonnet-x.2@b"),
        ("gemini-2.5-flash-x.1@a+b", "gemini-2.5-flash-x.1@a+b"),
        ("gemini/gemini-2.5-pro-x.2", "gemini-2.5-pro-x.2"),
    ],
)
async def test_the_model_reaches_the_cli_as_a_value(
    real: RealCLIs, model: str, upstream: str
) -> None:
    """Issue 24 (D5): the gateway passes ``--model=NAME`` (one word) and the real CLI takes
    all of NAME as the model, exactly: the model API is asked for it."""
    r = await real.client.chat.completions.create(
        model=model, messages=user("hi" + fake(answer="ok"))
    )
    assert r.choices[0].message.content == "ok"
    (req,) = real.model_requests()
    if req["path"] == "/v1/messages":
        assert isinstance(req["body"], dict) and req["body"]["model"] == upstream
    else:
        assert req["path"].endswith(f"/models/{upstream}:streamGenerateContent"), req["path"]
