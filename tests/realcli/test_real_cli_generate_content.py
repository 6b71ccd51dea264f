"""The Gemini API on the REAL claude / gemini / codex binaries, and the real Gemini CLI as
the client.

google-genai -> gateway (in-process, real HTTP) -> real CLI -> tests/fakes/fake_model_api.py
on 127.0.0.1; and ``gemini -p`` (the real binary, ``GOOGLE_GEMINI_BASE_URL`` = the gateway)
-> gateway -> the real claude or codex binary -> the fake model API. The stack (keys, HOMEs,
the fake) is tests/realcli/test_real_cli_messages.py's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from typing import Any

import pytest
from google import genai
from google.genai import types

from cli_proxy.server.wire import generate_content as gc_wire
from tests.conftest import fake
from tests.realcli import test_real_cli_messages
from tests.realcli.test_real_cli_messages import (
    CLAUDE,
    CLI_DIR,
    CODEX,
    GATEWAY_KEY,
    MODELS,
    Stack,
    answer_json,
    prompt_text,
    run_client,
)
from tests.server.test_messages import PNG

stack = test_real_cli_messages.stack  # the fixture: the gateway, the real CLIs, the fake API

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(CLI_DIR is None, reason="real claude/gemini/codex binaries not found"),
    pytest.mark.timeout(240),
]

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Current weather for a city",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def client(stack: Stack, version: str = "v1beta") -> genai.Client:
    return genai.Client(
        api_key=GATEWAY_KEY,
        http_options=types.HttpOptions(base_url=stack.root_url, api_version=version),
    )


def reply(model: str, text: str) -> str:
    """The model's answer as the fake model API must give it for ``model``'s CLI."""
    return text if model == CODEX else answer_json(text)


@pytest.mark.parametrize("model", MODELS)
async def test_genai_text_and_stream(stack: Stack, model: str) -> None:
    c = client(stack, "v1")
    r = await c.aio.models.generate_content(
        model=model, contents="say hi" + fake(answer="Hello from the CLI!")
    )
    assert r.text == "Hello from the CLI!"
    assert r.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert r.usage_metadata and r.usage_metadata.prompt_token_count
    pieces = [
        ch.text or ""
        async for ch in await c.aio.models.generate_content_stream(
            model=model, contents="hi" + fake(answer="one two three", chunks=3)
        )
    ]
    assert "".join(pieces) == "one two three"
    assert len(stack.model_requests(model)) == 2
    stack.assert_keys()


@pytest.mark.parametrize("model", MODELS)
async def test_genai_function_call_round_trip(stack: Stack, model: str) -> None:
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    if model == CODEX:
        steps: list[Any] = [{"tool_calls": [paris]}, {"answer": "It is sunny in Paris."}]
    else:
        steps = [
            {"answer": json.dumps({"tool_call": paris})},
            {"answer": answer_json("It is sunny in Paris.")},
        ]
    c = client(stack)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER])])
    ask = types.Content(role="user", parts=[types.Part(text="Weather?" + fake(steps=steps))])
    first = await c.aio.models.generate_content(model=model, contents=[ask], config=config)
    call = first.function_calls[0]  # type: ignore[index]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    back = types.Content(
        role="user",
        parts=[
            types.Part.from_function_response(name="get_weather", response={"sky": "sunny-24C"})
        ],
    )
    history = [ask, first.candidates[0].content, back]  # type: ignore[index]
    second = await c.aio.models.generate_content(model=model, contents=history, config=config)
    assert second.text == "It is sunny in Paris."
    last = stack.model_requests(model)[-1]["body"]
    if model == CODEX:
        outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
        assert len(outputs) == 1 and "sunny-24C" in json.dumps(outputs[0])
    else:
        result = prompt_text(model, last).split('role="tool_result"', 1)[1].split("</turn>")[0]
        assert "sunny-24C" in result
    stack.assert_keys()


@pytest.mark.parametrize("model", MODELS)
async def test_genai_image_reaches_the_model_api(stack: Stack, model: str) -> None:
    """google-genai sends the bytes as URL-safe base64; the CLI's own model request carries
    the very same image."""
    c = client(stack)
    r = await c.aio.models.generate_content(
        model=model,
        contents=[
            types.Part.from_bytes(data=PNG, mime_type="image/png"),
            "what colour?" + fake(answer="red"),
        ],
    )
    assert r.text == "red"
    body = json.dumps(stack.model_requests(model)[-1]["body"])
    assert base64.b64encode(PNG).decode() in body
    stack.assert_keys()


# ------------------------------------------------------------------ the Gemini CLI as the client


async def gemini_cli(stack: Stack, model: str, prompt: str, *args: str) -> tuple[str, str]:
    """The real ``gemini -p`` against the gateway (docs/gemini-api.md, "The Gemini CLI as a
    client"): its own HOME with ``security.auth.selectedType: gemini-api-key``, a trusted
    folder, ``GOOGLE_GEMINI_BASE_URL`` + ``GEMINI_API_KEY``."""
    assert CLI_DIR is not None
    home = stack.tmp / "gemini-cli-home"
    scratch = stack.tmp / "gemini-scratch"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    scratch.mkdir(exist_ok=True)
    (scratch / "notes.txt").write_text("alpha\nbravo-from-the-file-7731\ncharlie\n")
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": stack.root_url,
        "GEMINI_API_KEY": GATEWAY_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    argv = [str(CLI_DIR / "gemini"), "-p", prompt.replace("SCRATCH", str(scratch))]
    return await run_client(
        [*argv, "-m", model, *args], scratch, env, 200, stdin=asyncio.subprocess.DEVNULL
    )


@pytest.mark.parametrize("model", [CLAUDE, CODEX])
async def test_gemini_cli_says_hi(stack: Stack, model: str) -> None:
    text = "Hi from the gateway!"
    out, _ = await gemini_cli(stack, model, "say hi" + fake(answer=reply(model, text)))
    assert out == text
    requests = stack.model_requests(model)
    assert requests and any("say hi" in json.dumps(r["body"]) for r in requests)
    stack.assert_keys()


@pytest.mark.parametrize("model", [CLAUDE, CODEX])
async def test_gemini_cli_runs_its_read_tool(
    stack: Stack, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Gemini CLI's own read_file tool: the model (the fake, through the gateway's
    backend) asks for it, the Gemini CLI runs it, its result goes back through the gateway to
    the backend's model API as a tool result, which then answers."""
    seen: list[list[str]] = []
    translate = gc_wire.generate_content_to_chat

    def spy(req: Any, model_id: str, stream: bool) -> Any:
        out = translate(req, model_id, stream)
        seen.append([t.function.name for t in out.request.tools or []])
        return out

    monkeypatch.setattr(gc_wire, "generate_content_to_chat", spy)
    read = {"name": "read_file", "arguments": {"file_path": "SCRATCH/notes.txt"}}
    done = "The second line is the bravo line."
    if model == CODEX:
        steps: list[Any] = [{"tool_calls": [read]}, {"answer": done}]
    else:
        steps = [{"answer": json.dumps({"tool_call": read})}, {"answer": answer_json(done)}]
    out, err = await gemini_cli(
        stack, model, "read notes.txt and report its second line" + fake(steps=steps)
    )
    assert seen and "read_file" in seen[0], seen
    assert out == done, err[-2000:]
    last = stack.model_requests(model)[-1]["body"]
    if model == CODEX:
        outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
        result = json.dumps(outputs)
    else:
        result = prompt_text(model, last).split('role="tool_result"', 1)[1].split("</turn>")[0]
    assert "bravo-from-the-file-7731" in result
    stack.assert_keys()
