"""Backend argv/env and the stream-json parsers, on real CLI output captured offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_proxy.backends import ClaudeBackend, GeminiBackend
from cli_proxy.backends.base import CallOptions, StreamParser, classify_failure
from cli_proxy.backends.claude import ClaudeParser
from cli_proxy.backends.gemini import GeminiParser
from cli_proxy.events import CliEvent, Failure, TextDelta, Truncated, UsageReport

REAL = Path(__file__).parent / "data" / "real-cli"


def run(parser: StreamParser, name: str) -> tuple[str, list[UsageReport], list[Failure]]:
    events: list[CliEvent] = []
    for line in (REAL / f"{name}.stdout.jsonl").read_bytes().splitlines(keepends=True):
        events += parser.feed(line)
    code = int((REAL / f"{name}.rc").read_text())
    events += parser.finish(code, (REAL / f"{name}.stderr.txt").read_text())
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    return (
        text,
        [e for e in events if isinstance(e, UsageReport)],
        [e for e in events if isinstance(e, Failure)],
    )


def test_claude_argv_is_toolless_and_streams_on_request() -> None:
    b = ClaudeBackend("/opt/claude --flag")
    argv = b.argv(CallOptions(model="sonnet"))
    assert argv[:2] == ["/opt/claude", "--flag"]
    assert argv[argv.index("--tools") + 1] == ""
    assert "--strict-mcp-config" in argv and "-p" in argv
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert argv[argv.index("--model") + 1] == "sonnet"
    assert "--include-partial-messages" not in argv
    assert "--resume" not in argv
    assert "--include-partial-messages" in b.argv(CallOptions(model="x", stream_partial=True))


def test_env_scrubs_nesting_and_gateway_secrets() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/h",
        "CLAUDECODE": "1",
        "CLAUDE_CODE_ENTRYPOINT": "cli",
        "CLI_PROXY_API_KEYS": "secret",
        "DROP_ME": "x",
    }
    env = ClaudeBackend("claude", frozenset({"DROP_ME"})).env(base)
    assert env["PATH"] == "/bin" and env["HOME"] == "/h"
    for gone in ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLI_PROXY_API_KEYS", "DROP_ME"):
        assert gone not in env
    genv = GeminiBackend().env(base)
    assert "CLAUDECODE" not in genv and genv["GEMINI_CLI_TRUST_WORKSPACE"] == "true"


def test_gemini_argv_and_workspace_settings_disable_tools(tmp_path: Path) -> None:
    b = GeminiBackend("gemini")
    argv = b.argv(CallOptions(model="gemini-2.5-pro"))
    assert argv[argv.index("--extensions") + 1] == "none"
    assert argv[argv.index("--allowed-mcp-server-names") + 1] == "none"
    b.prepare_workdir(tmp_path)
    import json

    settings = json.loads((tmp_path / ".gemini" / "settings.json").read_text())
    assert settings["tools"]["core"] == []
    assert settings["general"]["maxAttempts"] == 1


def test_claude_text() -> None:
    text, usage, failures = run(ClaudeParser(), "claude-text")
    assert text == "Hello from fake claude"
    assert usage[-1] == UsageReport(92, 6)
    assert failures == []


def test_claude_partial_messages_not_duplicated() -> None:
    text, _, failures = run(ClaudeParser(), "claude-partial")
    assert text == "Hello from fake claude"
    assert failures == []


def test_claude_mid_stream_retry_adds_only_new_text() -> None:
    text, _, failures = run(ClaudeParser(), "claude-stream-error-partial")
    assert text == "partial text"
    assert failures == []


def test_claude_tool_call_json_passes_through() -> None:
    text, _, _ = run(ClaudeParser(), "claude-json-toolcall")
    assert text.startswith('{"tool_call": {"name": "get_weather"')


@pytest.mark.parametrize(
    ("name", "status", "fragment"),
    [
        ("claude-429-noretry", 429, "rate limit"),
        ("claude-401-noretry", 401, "Invalid API key"),
        ("claude-529-noretry", 503, "Overloaded"),
        ("claude-empty-answer", 502, "without an answer"),
        ("gemini-429-maxattempts1", 429, "Resource has been exhausted"),
        ("gemini-401-maxattempts1", 401, "UNAUTHENTICATED"),
        ("gemini-503-maxattempts1", 503, "overloaded"),
        ("gemini-stream-cut", 502, "without a finish reason"),
        ("gemini-empty-answer", 502, "empty response"),
    ],
)
def test_real_failures(name: str, status: int, fragment: str) -> None:
    parser: StreamParser = ClaudeParser() if name.startswith("claude") else GeminiParser()
    text, _, failures = run(parser, name)
    assert len(failures) == 1, failures
    assert failures[0].status == status
    assert fragment in failures[0].message
    if not name.endswith("stream-cut"):
        assert text == ""  # error text never leaks into the answer


def test_gemini_text_skips_prompt_echo() -> None:
    text, usage, failures = run(GeminiParser(), "gemini-text")
    assert "@@fake" not in text and text
    assert usage and usage[-1].prompt_tokens > 0
    assert failures == []


def test_gemini_tool_call_json() -> None:
    text, _, failures = run(GeminiParser(), "gemini-json-toolcall")
    assert '"tool_call"' in text and failures == []


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("Prompt is too long · the request is ~300000 tokens", 400),
        ("API Error: Request rejected (429)", 429),
        ("Please run /login", 401),
        ("API Error: 529 Overloaded", 503),
        ("Request timed out", 504),
        ("weird", 502),
        ("", 502),
    ],
)
def test_classify_failure(message: str, status: int) -> None:
    assert classify_failure(message).status == status


def test_claude_output_token_limit_is_truncation_not_failure() -> None:
    parser = ClaudeParser()
    events: list[CliEvent] = []
    for line in (REAL / "claude-max-tokens.stdout.jsonl").read_bytes().splitlines():
        events += parser.feed(line)
    events += parser.finish(1, "")
    # the CLI asked the model to continue three times: all four parts are the answer
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "truncated answ" * 4
    assert [type(e) for e in events if isinstance(e, Truncated | Failure)] == [Truncated]
