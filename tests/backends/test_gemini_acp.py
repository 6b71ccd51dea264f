"""The gemini backend's ACP client (``gemini --acp``), end to end through the gateway with the
fake gemini (tests/fakes/fake_cli.py speaks the protocol) and on the parser alone: the session is
opened by the warm prefix, the prompt follows the session id, the CLI's requests are never
granted, thoughts are reasoning, a running CLI tool ends the call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import structlog

from cli_proxy.backends.acp.rpc import ACP_PREFIX
from cli_proxy.backends.gemini.backend import GeminiBackend
from cli_proxy.backends.gemini.parser import GeminiParser
from cli_proxy.failures import FailureKind
from cli_proxy.plan.prompt import render
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.events import CliText, CliThinking, Failure, Truncated, UsageReport
from tests.conftest import Served, ServeFactory, fake
from tests.plan.test_images import PNG, data_url, image_part, sha

GEMINI = "gemini-2.5-flash"


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **obj}).encode() + b"\n"


def update(kind: str, **fields: Any) -> bytes:
    upd = {"sessionUpdate": kind, **fields}
    return line({"method": "session/update", "params": {"sessionId": "s", "update": upd}})


def opened() -> GeminiParser:
    """A parser whose session is open and prompt sent."""
    parser = GeminiParser([{"type": "text", "text": "hi"}])
    assert parser.feed(line({"id": 0, "result": {"protocolVersion": 1}})) == []
    assert parser.replies() == b""
    parser.feed(line({"id": 1, "result": {"sessionId": "s"}}))
    sent = json.loads(parser.replies())
    assert sent["method"] == "session/prompt" and sent["id"] == 2
    assert sent["params"] == {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}
    return parser


def test_the_warm_prefix_opens_a_session_in_the_work_dir() -> None:
    first, second = (json.loads(x) for x in ACP_PREFIX.splitlines())
    assert first["method"] == "initialize" and first["params"]["protocolVersion"] == 1
    assert first["params"]["clientCapabilities"]["fs"] == {
        "readTextFile": False,
        "writeTextFile": False,
    }
    assert second["method"] == "session/new"
    assert second["params"] == {"cwd": ".", "mcpServers": []}
    req = ChatCompletionRequest.model_validate(
        {"model": GEMINI, "messages": [{"role": "user", "content": "x"}]}
    )
    backend = GeminiBackend.with_defaults()
    assert backend.encode_prompt(render(req), req) == ACP_PREFIX == backend.warm_prefix


def test_answer_thought_usage_and_the_end() -> None:
    parser = opened()
    events = parser.feed(update("available_commands_update", availableCommands=[]))
    events += parser.feed(
        update("agent_thought_chunk", content={"type": "text", "text": "****\nhm"})
    )
    events += parser.feed(update("agent_message_chunk", content={"type": "text", "text": "Hel"}))
    events += parser.feed(update("agent_message_chunk", content={"type": "text", "text": "lo"}))
    quota = {"token_count": {"input_tokens": 11, "output_tokens": 3}}
    events += parser.feed(
        line({"id": 2, "result": {"stopReason": "end_turn", "_meta": {"quota": quota}}})
    )
    assert events == [CliThinking("hm"), CliText("Hel"), CliText("lo"), UsageReport(11, 3)]
    assert parser.done and parser.finish(0, "") == []


def test_permission_requests_are_cancelled_and_other_requests_refused() -> None:
    parser = opened()
    ask = {"sessionId": "s", "toolCall": {"toolCallId": "t"}, "options": []}
    assert parser.feed(line({"id": 7, "method": "session/request_permission", "params": ask})) == []
    assert json.loads(parser.replies()) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"outcome": {"outcome": "cancelled"}},
    }
    parser.feed(line({"id": 8, "method": "fs/read_text_file", "params": {"path": "/etc/passwd"}}))
    reply = json.loads(parser.replies())
    assert reply["id"] == 8 and reply["error"]["code"] == -32601 and "result" not in reply


def test_a_running_cli_tool_ends_the_call() -> None:
    parser = opened()
    failed = update("tool_call_update", toolCallId="t0", status="failed", title="x")
    assert parser.feed(failed) == []  # refused by the CLI itself: the model is asked again
    events = parser.feed(update("tool_call", toolCallId="t1", status="in_progress", title="rm"))
    assert [type(e) for e in events] == [Failure] and parser.done
    assert events[0].kind is FailureKind.INVALID_ANSWER  # type: ignore[union-attr]


BAD_REQUEST = FailureKind.BAD_REQUEST


@pytest.mark.parametrize(
    ("error", "kind", "retry"),
    [
        (
            {"code": 401, "message": '{"error":{"code":401,"message":"bad key"}}'},
            FailureKind.AUTH,
            None,
        ),
        (  # Google refuses a key with a 400 (capture: gemini-0.61.0-quota-apikey-400-key-invalid)
            {"code": 400, "message": "API key not valid. Please pass a valid API key."},
            FailureKind.AUTH,
            None,
        ),
        ({"code": 400, "message": "Request contains an invalid argument."}, BAD_REQUEST, None),
        ({"code": 429, "message": "quota. Please retry in 7s."}, FailureKind.RATE_LIMITED, 7.0),
        ({"code": 503, "message": "The model is overloaded."}, FailureKind.OVERLOADED, None),
        ({"code": 500, "message": "models/gemini-9 is not found"}, FailureKind.BAD_REQUEST, None),
        ({"code": 500, "message": "boom"}, FailureKind.CLI_ERROR, None),
    ],
)
def test_prompt_errors(error: dict[str, Any], kind: FailureKind, retry: float | None) -> None:
    parser = opened()
    events = parser.feed(line({"id": 2, "error": error}))
    assert events == [Failure(kind, events[0].message, retry)]  # type: ignore[union-attr]
    assert parser.done and parser.finish(0, "") == []
    assert "{" not in events[0].message  # type: ignore[union-attr]


def test_max_tokens_after_text_is_a_truncation_and_without_text_a_too_long_prompt() -> None:
    parser = opened()
    parser.feed(update("agent_message_chunk", content={"type": "text", "text": "cut"}))
    events = parser.feed(line({"id": 2, "result": {"stopReason": "max_tokens"}}))
    assert [type(e) for e in events] == [Truncated] and parser.finish(0, "") == []
    parser = opened()
    events = parser.feed(line({"id": 2, "result": {"stopReason": "max_tokens"}}))
    assert [e.kind for e in events if isinstance(e, Failure)] == [FailureKind.CONTEXT_LENGTH]


def test_no_result_is_a_failure() -> None:
    parser = opened()
    parser.feed(update("agent_message_chunk", content={"type": "text", "text": "half"}))
    assert [f.kind for f in parser.finish(0, "") if isinstance(f, Failure)] == [
        FailureKind.CLI_ERROR
    ]
    assert [f.kind for f in opened().finish(1, "Invalid API key") if isinstance(f, Failure)] == [
        FailureKind.AUTH
    ]


# 0.61.0's interactive login on stdout, as captured (gemini-0.61.0-acp-refresh-invalid-grant)
LOGIN_URL_LINE = (
    b"\x1b[?1049h\x1b[2J\x1b[H\x1b[?1006l\x1b[?1002l\x1b[<u\x1b[?7hPlease visit the following "
    b"URL to authorize the application:\n"
)
LOGIN_QUESTION = b"\x1b[1G\x1b[0JEnter the authorization code: \x1b[31G"


@pytest.mark.parametrize("first", [LOGIN_URL_LINE, LOGIN_QUESTION])
def test_an_interactive_login_on_stdout_is_login_expired(first: bytes) -> None:
    """A refused refresh never reaches the protocol: the CLI asks for a new login on stdout
    before answering initialize, and would wait on stdin for a code."""
    parser = GeminiParser([{"type": "text", "text": "hi"}])
    events = parser.feed(first)
    assert [e.kind for e in events if isinstance(e, Failure)] == [FailureKind.LOGIN_EXPIRED]
    assert "Login with Google" in events[0].message  # type: ignore[union-attr]
    assert parser.done and parser.replies() == b""  # no prompt goes to a CLI waiting for a code
    assert parser.feed(b"https://accounts.google.com/o/oauth2/v2/auth?x=1\n") == []
    assert parser.finish(-9, "Failed to authenticate with user code.") == []


REAL_CLI = Path(__file__).resolve().parents[1] / "data" / "real-cli"


def test_a_google_login_code_assist_refuses_as_ineligible_is_an_auth_failure() -> None:
    """0.61.0's stdout facing Code Assist's answer to a personal Google account since
    2026-06-18 (capture gemini-0.61.0-code-assist-ineligible): the ``session/new`` error
    carries Google's reason; the call fails as an auth failure (503 cli_auth_failed, not
    retried) whose message says what still works."""
    captured = (REAL_CLI / "gemini-0.61.0-code-assist-ineligible.stdout.jsonl").read_bytes()
    parser = GeminiParser([{"type": "text", "text": "hi"}])
    events = [e for raw in captured.splitlines(keepends=True) for e in parser.feed(raw)]
    assert [type(e) for e in events] == [Failure] and parser.done
    failure = events[0]
    assert isinstance(failure, Failure) and failure.kind is FailureKind.AUTH
    assert failure.retry_after_s is None
    assert "no longer supported for Gemini Code Assist for individuals" in failure.message
    for works in ("GEMINI_API_KEY", "Vertex AI", "Standard or Enterprise", "GOOGLE_CLOUD_PROJECT"):
        assert works in failure.message
    assert "copilot/gemini-" in failure.message
    assert parser.replies() == b""  # no prompt is sent
    stderr = (REAL_CLI / "gemini-0.61.0-code-assist-ineligible.stderr.txt").read_text()
    assert parser.finish(0, stderr) == []


def test_other_noise_on_stdout_is_not_a_login() -> None:
    parser = opened()
    assert parser.feed(b"Loaded cached credentials.\n") == []
    assert not parser.done


# ------------------------------------------------------------- through the gateway


async def test_the_client_cancels_permission_requests(served: Served) -> None:
    r = await served.client.chat.completions.create(
        model=GEMINI, messages=[{"role": "user", "content": fake(ask_permission="rm -rf /")}]
    )
    cancelled, refused = (r.choices[0].message.content or "").split("|")
    assert json.loads(cancelled) == {"outcome": {"outcome": "cancelled"}}
    assert json.loads(refused)["code"] == -32601


async def test_a_running_cli_tool_is_a_502(served: Served) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        await served.client.chat.completions.create(
            model=GEMINI, messages=[{"role": "user", "content": fake(tool_call="touch x")}]
        )
    assert info.value.status_code == 502 and "touch x" in str(info.value)


@pytest.mark.parametrize("stream", [False, True])
async def test_max_tokens_after_text_is_length(served: Served, stream: bool) -> None:
    messages: Any = [{"role": "user", "content": fake(answer="cut off", max_tokens=True)}]
    if stream:
        text, finish = "", None
        async for chunk in await served.client.chat.completions.create(
            model=GEMINI, messages=messages, stream=True
        ):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
    else:
        r = await served.client.chat.completions.create(model=GEMINI, messages=messages)
        text, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
    assert (text, finish) == ("cut off", "length")


async def test_thoughts_never_reach_the_content(served: Served) -> None:
    r = await served.client.chat.completions.create(
        model=GEMINI,
        messages=[{"role": "user", "content": fake(answer="42", thought="**Sum**\nsix sevens")}],
    )
    assert r.choices[0].message.content == "42"


async def test_images_reach_gemini(served: Served) -> None:
    r = await served.client.chat.completions.create(
        model=GEMINI,
        messages=[
            {
                "role": "user",
                "content": [
                    image_part(data_url(PNG)),
                    {"type": "text", "text": fake(echo_blocks=True)},
                ],  # type: ignore[list-item]
            }
        ],
    )
    got = json.loads(r.choices[0].message.content or "[]")
    assert [b for b in got if "image" in b] == [{"image": "image/png", "sha256": sha(PNG)}]


async def test_a_refused_google_login_is_503_login_expired(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake gemini does what 0.61.0 does over ACP when the token endpoint refuses the
    refresh (URL on stdout, then waits, even after stdin ends): 503 login_expired, not the
    call's time-out, and the user's login file is left as it was."""
    gemini = tmp_path / "home" / ".gemini"
    gemini.mkdir(parents=True)
    (gemini / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "oauth-personal"}}})
    )
    creds = {"access_token": "ya29.x", "refresh_token": "refused-1", "expiry_date": 1000}
    (gemini / "oauth_creds.json").write_text(json.dumps(creds))
    before = (gemini / "oauth_creds.json").read_bytes()
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    served = await serve(work_root=tmp_path / "w")  # time-outs: 15 s idle, 30 s in all
    with (
        structlog.testing.capture_logs() as logs,
        pytest.raises(openai.APIStatusError) as info,
    ):
        await served.client.chat.completions.create(
            model=GEMINI, messages=[{"role": "user", "content": fake(answer="never")}]
        )
    err = info.value
    # killed by the gateway after its failure: an error exit, not "ok" (log and metrics)
    (done,) = [e for e in logs if e["event"] == "chat_completion"]
    assert (done["exit"], done["killed"]) == ("error", "lingered"), done
    assert (err.status_code, err.response.headers.get("x-should-retry")) == (503, "false")
    assert isinstance(err.body, dict) and err.body.get("code") == "login_expired", err.body
    assert "Login with Google" in str(err.body.get("message"))
    assert (gemini / "oauth_creds.json").read_bytes() == before
