"""The Messages API on the REAL claude / gemini / codex binaries, and the real Claude Code as
the client.

anthropic SDK -> gateway (in-process, real HTTP) -> real CLI -> tests/fakes/fake_model_api.py
on 127.0.0.1; and ``claude -p`` (the real binary, ``ANTHROPIC_BASE_URL`` = the gateway) ->
gateway -> the real gemini or codex binary -> the fake model API. The fake checks the API key
each CLI must send upstream (its own, never the gateway's), nothing leaves the machine, every
process has a temporary HOME.

Skipped unless the binaries exist: ``$CLI_PROXY_REAL_CLI_DIR`` first, then
``.cli/*/node_modules/.bin`` (``make real-clis`` installs them).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest
from anthropic.types import Message
from lxml import etree

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.server.wire import messages as messages_wire
from cli_proxy.server.wire.messages import MessagesRequest, ThinkingBlock, thinking_shown
from tests.conftest import Served, ServeFactory, fake
from tests.fakes.fake_model_api import (
    FakeModelAPI,
    anthropic_texts,
    gemini_texts,
    start_fake_model_api,
)
from tests.realcli.test_real_cli import FOREIGN_ENV, assert_no_upstream_tools, real_cli_dir
from tests.realcli.test_real_cli_codex import FOREIGN_ENV as CODEX_FOREIGN_ENV
from tests.server.test_server_tools import CLINE, HEADER, cline_headers, cline_request

CLI_DIR = real_cli_dir(("claude", "gemini", "codex"))
CLAUDE, GEMINI, CODEX = "claude-sonnet-4-6", "gemini-2.5-flash", "gpt-5.5"
MODELS = [CLAUDE, GEMINI, CODEX]
# what each CLI must send to its model API, and what Anthropic clients send the gateway
UPSTREAM = {"anthropic": "claude-upstream-key", "gemini": "gemini-upstream-key"}
UPSTREAM["openai"] = "codex-upstream-key"
GATEWAY_KEY = "gateway-key-for-clients"
PATHS = {CLAUDE: "/v1/messages", GEMINI: ":streamGenerateContent", CODEX: "/v1/responses"}

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(
        CLI_DIR is None,
        reason="real claude/gemini/codex binaries not found ($CLI_PROXY_REAL_CLI_DIR or "
        ".cli/*/node_modules/.bin; `make real-clis` installs them)",
    ),
    pytest.mark.timeout(180),
]

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@dataclass
class Stack:
    served: Served
    api: FakeModelAPI
    tmp: Path

    @property
    def root_url(self) -> str:
        return str(self.served.server.make_url("/")).rstrip("/")

    def client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            base_url=self.root_url,
            api_key=GATEWAY_KEY,
            max_retries=0,
            timeout=120,
            _strict_response_validation=True,
        )

    def model_requests(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.api.requests if r["path"].endswith(PATHS[model])]

    def assert_keys(self) -> None:
        """Every model call carried its CLI's own key (the fake refuses others), none the
        gateway's."""
        calls = [r for r in self.api.requests if r["method"] == "POST"]
        assert calls
        for r in calls:
            assert GATEWAY_KEY not in json.dumps(r["headers"]), r["path"]


@pytest.fixture
async def stack(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    assert CLI_DIR is not None
    api = await start_fake_model_api(
        anthropic_key=UPSTREAM["anthropic"],
        gemini_key=UPSTREAM["gemini"],
        openai_key=UPSTREAM["openai"],
    )
    home = tmp_path / "gateway-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    for name in (*FOREIGN_ENV, *CODEX_FOREIGN_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": UPSTREAM["anthropic"],
        "GEMINI_API_KEY": UPSTREAM["gemini"],
        "CODEX_API_KEY": UPSTREAM["openai"],
        "GOOGLE_GEMINI_BASE_URL": api.url,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings(
        claude_bin=str(CLI_DIR / "claude"),
        gemini_bin=str(CLI_DIR / "gemini"),
        codex={"bin": str(CLI_DIR / "codex"), "base_url": api.url + "/v1"},
        api_keys=[GATEWAY_KEY],
        timeout_s=90,
        idle_timeout_s=60,
        kill_grace_s=1,
        max_concurrency=4,
        warm_pool=False,
        work_root=tmp_path / "work",
    )
    served = await serve(Gateway(settings, live_backends(settings)))
    try:
        yield Stack(served, api, tmp_path)
    finally:
        await api.close()


def prompt_text(model: str, body: dict[str, Any]) -> str:
    """The message text of a model request (the gateway's prompt, as the CLI sent it)."""
    return (anthropic_texts(body) if model == CLAUDE else gemini_texts(body))[1]


def answer_json(text: str) -> str:
    """The model's answer in the prompt-JSON tools mode (claude, gemini)."""
    return json.dumps({"tool_call": None, "response": text})


# ------------------------------------------------------------------ the anthropic SDK


@pytest.mark.parametrize("model", MODELS)
async def test_sdk_text_and_stream(stack: Stack, model: str) -> None:
    client = stack.client()
    try:
        m = await client.messages.create(
            model=model,
            max_tokens=1024,
            system="Be brief.",
            messages=[{"role": "user", "content": "say hi" + fake(answer="Hello from the CLI!")}],
        )
        assert [(b.type, getattr(b, "text", "")) for b in m.content] == [
            ("text", "Hello from the CLI!")
        ]
        assert m.stop_reason == "end_turn" and m.model == model
        assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
        pieces: list[str] = []
        async with client.messages.stream(
            model=model,
            max_tokens=1024,
            messages=[{"role": "user", "content": "hi" + fake(answer="one two three", chunks=3)}],
        ) as stream:
            async for text in stream.text_stream:
                pieces.append(text)
            final = await stream.get_final_message()
        assert "".join(pieces) == "one two three"
        assert final.content[0].text == "one two three"  # type: ignore[union-attr]
        assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    finally:
        await client.close()
    assert len(stack.model_requests(model)) == 2
    stack.assert_keys()


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("model", MODELS)
async def test_sdk_tool_round_trip(stack: Stack, model: str, stream: bool) -> None:
    """tool_use -> the client's result -> the final text; the model API gets the result as
    the answer to its call (a prompt turn, or a Responses function_call_output)."""
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    if model == CODEX:
        steps = [{"tool_calls": [paris]}, {"answer": "It is sunny in Paris."}]
    else:
        steps = [
            {"answer": json.dumps({"tool_call": paris})},
            {"answer": answer_json("It is sunny in Paris.")},
        ]
    client = stack.client()

    async def ask(messages: list[Any]) -> Message:
        kwargs: Any = {"model": model, "max_tokens": 1024, "tools": [WEATHER], "messages": messages}
        if not stream:
            return await client.messages.create(**kwargs)
        async with client.messages.stream(**kwargs) as s:
            return await s.get_final_message()

    try:
        messages: list[Any] = [{"role": "user", "content": "Weather in Paris?" + fake(steps=steps)}]
        first = await ask(messages)
        assert first.stop_reason == "tool_use"
        use = next(b for b in first.content if b.type == "tool_use")
        assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
        messages += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 24 C"}
                ],
            },
        ]
        second = await ask(messages)
    finally:
        await client.close()
    assert second.stop_reason == "end_turn"
    assert second.content[-1].text == "It is sunny in Paris."  # type: ignore[union-attr]
    last = stack.model_requests(model)[-1]["body"]
    if model == CODEX:
        outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
        assert len(outputs) == 1 and "sunny, 24 C" in json.dumps(outputs[0])
    else:
        result = prompt_text(model, last).split('role="tool_result"', 1)[1].split("</turn>")[0]
        assert "sunny, 24 C" in result
    stack.assert_keys()


# ------------------------------------------------------------------ Claude Code as the client


async def claude_code(stack: Stack, model: str, prompt: str, *args: str) -> tuple[str, Path]:
    """Run the real ``claude -p`` against the gateway, in a scratch directory of its own."""
    assert CLI_DIR is not None
    home = stack.tmp / "claude-code-home"
    scratch = stack.tmp / "scratch"
    home.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    (scratch / "notes.txt").write_text("alpha\nbravo-from-the-file-7731\ncharlie\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": stack.root_url,
        "ANTHROPIC_API_KEY": GATEWAY_KEY,
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1",
    }
    argv = [str(CLI_DIR / "claude"), "-p", prompt.replace("SCRATCH", str(scratch))]
    out, _ = await run_client([*argv, "--model", model, *args], scratch, env, 150)
    return out, scratch


async def run_client(
    argv: list[str], cwd: Path, env: dict[str, str], limit: float, stdin: int | None = None
) -> tuple[str, str]:
    """A real CLI as the gateway's client, to its end: its stdout (stripped) and stderr; a
    non-zero exit fails the test with the ends of both, and a run past ``limit`` is killed."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, (out.decode()[-2000:], err.decode()[-3000:])
    return out.decode().strip(), err.decode()


async def served_messages(stack: Stack) -> list[str]:
    """The gateway's own count of Messages calls, by status (its /metrics)."""
    async with (
        aiohttp.ClientSession() as s,
        s.get(stack.root_url + "/metrics", headers={"x-api-key": GATEWAY_KEY}) as resp,
    ):
        text = await resp.text()
    return [
        ln
        for ln in text.splitlines()
        if ln.startswith("cli_proxy_requests_total{") and 'endpoint="messages"' in ln
    ]


@pytest.mark.parametrize("model", [GEMINI, CODEX])
async def test_claude_code_says_hi(stack: Stack, model: str) -> None:
    reply = "Hi from the gateway!"
    answer = reply if model == CODEX else answer_json(reply)
    out, _ = await claude_code(stack, model, "say hi" + fake(answer=answer))
    assert out == reply
    requests = stack.model_requests(model)
    assert requests and all(r["method"] == "POST" for r in requests)
    assert not stack.model_requests(CLAUDE)  # only the named model's backend ran
    assert any("say hi" in json.dumps(r["body"]) for r in requests)
    stack.assert_keys()
    assert any('status="200"' in ln for ln in await served_messages(stack))


@pytest.mark.parametrize("model", [GEMINI, CODEX])
async def test_claude_code_runs_its_read_tool(
    stack: Stack, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's own Read tool: the model (the fake, through the gateway's backend)
    asks for it, Claude Code runs it in its scratch directory, its result goes back through
    the gateway to the backend's model API, which then answers."""
    seen: list[MessagesRequest] = []  # what Claude Code sent the gateway
    translate = messages_wire.messages_to_chat

    def spy(req: MessagesRequest) -> Any:
        seen.append(req)
        return translate(req)

    monkeypatch.setattr(messages_wire, "messages_to_chat", spy)
    read = {"name": "Read", "arguments": {"file_path": "SCRATCH/notes.txt"}}
    done = "The second line is the bravo line."
    if model == CODEX:
        steps: list[Any] = [{"tool_calls": [read]}, {"answer": done}]
    else:  # with a thought: Claude Code gets a thinking block (signature "") and sends it back
        first = {"answer": json.dumps({"tool_call": read}), "thought": "THOUGHT-1-read-it"}
        steps = [first, {"answer": answer_json(done)}]
    out, _ = await claude_code(
        stack,
        model,
        "read notes.txt and report its second line" + fake(steps=steps),
        "--allowedTools",
        "Read",
    )
    assert out == done
    last = stack.model_requests(model)[-1]["body"]
    if model == CODEX:  # codex got the call and Claude Code's result as its own items
        items = last["input"]
        calls = [i for i in items if i.get("type") == "function_call"]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        assert [c["name"] for c in calls] == ["Read"]
        assert outputs[0]["call_id"] == calls[0]["call_id"]
        result = json.dumps(outputs[0])
    else:  # gemini: the call and its result as turns of the gateway's prompt
        text = prompt_text(model, last)
        assert 'role="assistant_tool_call" name="Read"' in text
        result = text.split('role="tool_result"', 1)[1].split("</turn>", 1)[0]
        assert text.count("THOUGHT-1") == 1  # in the directive only: not shown to the model
        sent_back = [
            block
            for req in seen
            for msg in req.messages
            if msg.role == "assistant" and isinstance(msg.content, list)
            for block in msg.content
            if isinstance(block, ThinkingBlock)
        ]
        # Claude Code >= 2.1.330 asks for thinking with display "omitted" (2.1.197: shown):
        # then the answer carries no thinking block, and none comes back
        shown = any(thinking_shown(r) for r in seen)
        want = [("THOUGHT-1-read-it", "")] if shown else []
        assert [(b.thinking, b.signature) for b in sent_back] == want
    assert "bravo-from-the-file-7731" in result  # the file's line, read by Claude Code
    stack.assert_keys()


# ------------------------------------------------------------------ Cline's captured request


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
async def test_cline_request_on_the_real_cli(stack: Stack, model: str) -> None:
    """Cline 3.0.65's captured request (a server tool beside its 25 client tools; the .md
    beside the data file) served by the real CLI: 200, the dropped tool named; what the
    model API got declares no tool at all (neither web_search nor the CLI's own), and
    Cline's tools reach the model in the gateway's prompt, web_search not among them."""
    body = cline_request(model, answer=answer_json("Hi from the real CLI"))
    headers = {**cline_headers(), "x-api-key": GATEWAY_KEY}
    async with (
        aiohttp.ClientSession() as s,
        s.post(stack.root_url + "/v1/messages", json=body, headers=headers) as r,
    ):
        status, dropped, text = r.status, r.headers.get(HEADER), await r.text()
    assert status == 200, text
    assert dropped == "web_search_20250305"
    said = "".join(
        json.loads(line[len("data: ") :])["delta"].get("text", "")
        for line in text.splitlines()
        if line.startswith("data: ") and '"content_block_delta"' in line
    )
    assert said == "Hi from the real CLI"
    (request,) = stack.model_requests(model)
    upstream = request["body"]
    assert_no_upstream_tools(upstream)
    assert "web_search" not in json.dumps(upstream)
    prompt = prompt_text(model, upstream)
    listed = etree.fromstring(
        "<available_functions>"
        + prompt.split("<available_functions>", 1)[1].split("</available_functions>", 1)[0]
        + "</available_functions>"
    )
    named = [f.get("name") for f in listed.iter("function")]
    in_system = listed.findtext("described_in_system_context") or ""
    named += [n.strip() for n in in_system.split(",") if n.strip()]
    client_tools = [t["name"] for t in CLINE["body"]["tools"] if "type" not in t]
    assert sorted(named) == sorted(client_tools) and len(client_tools) == 25
    for f in listed.iter("function"):  # 25 > the list threshold: a signature each
        assert (f.findtext("signature") or "").startswith(f.get("name") + "(")
    stack.assert_keys()


async def test_cline_forcing_the_server_tool_is_refused_before_any_cli(stack: Stack) -> None:
    body = cline_request(CLAUDE)
    body["tool_choice"] = {"type": "tool", "name": "web_search"}
    headers = {**cline_headers(), "x-api-key": GATEWAY_KEY}
    async with (
        aiohttp.ClientSession() as s,
        s.post(stack.root_url + "/v1/messages", json=body, headers=headers) as r,
    ):
        status, text = r.status, await r.text()
    assert status == 400
    err = json.loads(text)
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "web_search_20250305" in err["error"]["message"]
    assert stack.api.requests == []  # no CLI ran: none reached the model API
