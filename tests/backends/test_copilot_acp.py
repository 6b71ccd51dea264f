"""The copilot backend's own behaviour (the conformance suite covers what every backend
shares): copilot's ``Info:`` and ``Error:`` answer text, its no-login answer, the seal in
argv, env and homes. Lines are 1.0.102's, from tests/data/real-cli/copilot-1.0.102-*."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_proxy.backends.acp.rpc import NEW_SESSION, PROMPT
from cli_proxy.backends.base import LaunchOptions
from cli_proxy.backends.copilot.backend import CopilotBackend
from cli_proxy.backends.copilot.parser import CopilotParser
from cli_proxy.failures import CliFailed, FailureKind
from cli_proxy.read.events import CliEvent, CliText, CliThinking, Failure, RateLimit, UsageReport
from cli_proxy.server.errors import api_error

REAL = Path(__file__).resolve().parents[1] / "data" / "real-cli"


def line(obj: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **obj}).encode() + b"\n"


def chunk(text: str, kind: str = "agent_message_chunk") -> bytes:
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    return line({"method": "session/update", "params": {"sessionId": "s", "update": update}})


USAGE_UPDATE = line(
    {
        "method": "session/update",
        "params": {"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1}},
    }
)
USAGE = {"inputTokens": 26, "outputTokens": 3, "totalTokens": 29, "cachedReadTokens": 4}


def opened() -> CopilotParser:
    parser = CopilotParser([{"type": "text", "text": "hi"}], "copilot/claude-sonnet-4.6")
    parser.feed(line({"id": NEW_SESSION, "result": {"sessionId": "s"}}))
    sent = json.loads(parser.replies())
    assert sent["method"] == "session/prompt" and sent["params"]["sessionId"] == "s"
    return parser


def run(parser: CopilotParser, *lines: bytes) -> list[CliEvent]:
    events: list[CliEvent] = []
    for raw in lines:
        events += parser.feed(raw)
    return events + parser.finish(0, "")


def text(events: list[CliEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, CliText))


def test_copilots_info_lines_never_reach_the_client() -> None:
    events = run(
        opened(),
        chunk("Info: Disabled tools: bash, view"),
        chunk('Info: Unknown tool name in the tool allowlist: "none-offered-by-cli-proxy"'),
        USAGE_UPDATE,
        chunk("Info: Request failed due to a transient API error. Retrying..."),
        chunk("Answer. "),
        chunk("Info: this one is the model's"),
        line({"id": PROMPT, "result": {"stopReason": "end_turn", "usage": USAGE}}),
    )
    assert text(events) == "Answer. Info: this one is the model's"
    first = run(
        opened(),
        USAGE_UPDATE,
        chunk("Info: the model's answer"),
        line({"id": PROMPT, "result": {"stopReason": "end_turn", "usage": USAGE}}),
    )
    # after the model request went out, only copilot's retry note is its own
    assert text(first) == "Info: the model's answer"
    assert [e for e in events if isinstance(e, UsageReport)] == [UsageReport(26, 3, 4)]
    assert RateLimit("copilot/claude-sonnet-4.6", "allowed") in events


@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [
        (
            "Error: Authentication failed with provider at http://127.0.0.1:1 (HTTP 401).\n"
            "  Check your COPILOT_PROVIDER_API_KEY.",
            FailureKind.AUTH,
            503,
        ),
        (
            "Error: Failed to get response from the AI model; retried 5 times (total retry "
            "wait time: 38.49 seconds) (Request-ID req_1) Last error: 429 Number of requests "
            "has exceeded your rate limit.",
            FailureKind.RATE_LIMITED,
            429,
        ),
        ("Error: 400 Invalid request", FailureKind.BAD_REQUEST, 400),
        (
            "Error: Failed to get response from the AI model; retried 5 times (Request-ID r) "
            "Last error: 529 Overloaded",
            FailureKind.OVERLOADED,
            503,
        ),
    ],
)
def test_copilots_error_text_is_a_failure_never_answer_text(
    error: str, kind: FailureKind, status: int
) -> None:
    events = run(
        opened(),
        USAGE_UPDATE,
        chunk(error),
        line({"id": PROMPT, "result": {"stopReason": "end_turn"}}),
    )
    failures = [e for e in events if isinstance(e, Failure)]
    assert [f.kind for f in failures] == [kind] and text(events) == ""
    err = api_error(CliFailed(kind, failures[0].message, failures[0].retry_after_s))
    assert err.status == status
    if status == 429:
        # the retry wait copilot already spent is not a Retry-After; the default applies
        assert failures[0].retry_after_s is None
        assert RateLimit("copilot/claude-sonnet-4.6", "rejected") in events


def test_a_models_answer_that_starts_with_error_is_answer_text() -> None:
    events = run(
        opened(),
        USAGE_UPDATE,
        chunk("Error: "),
        chunk("is a word"),
        line({"id": PROMPT, "result": {"stopReason": "end_turn", "usage": USAGE}}),
    )
    assert text(events) == "Error: is a word"
    assert not [e for e in events if isinstance(e, Failure)]
    one = run(
        opened(),
        USAGE_UPDATE,
        chunk("Error: all of it"),
        line({"id": PROMPT, "result": {"stopReason": "end_turn", "usage": USAGE}}),
    )
    assert text(one) == "Error: all of it" and not [e for e in one if isinstance(e, Failure)]


def test_no_login_is_cli_auth_failed_saying_what_serves() -> None:
    parser = CopilotParser([{"type": "text", "text": "hi"}])
    err = {"code": -32000, "message": "Authentication required"}
    events = parser.feed(line({"id": NEW_SESSION, "error": err}))
    assert parser.replies() == b""  # no prompt is sent
    (failure,) = events
    assert isinstance(failure, Failure) and failure.kind is FailureKind.AUTH
    assert "copilot login" in failure.message and "COPILOT_GITHUB_TOKEN" in failure.message
    assert api_error(CliFailed(failure.kind, failure.message)).status == 503


def test_thoughts_are_reasoning_and_own_tools_fail() -> None:
    events = run(
        opened(),
        USAGE_UPDATE,
        chunk("deep", "agent_thought_chunk"),
        chunk("42"),
        line({"id": PROMPT, "result": {"stopReason": "end_turn", "usage": USAGE}}),
    )
    assert [e for e in events if isinstance(e, CliThinking)] == [CliThinking("deep")]
    tool = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "bash", "status": "pending"}
    ran = run(opened(), line({"method": "session/update", "params": {"update": tool}}))
    assert [e.kind for e in ran if isinstance(e, Failure)] == [FailureKind.INVALID_ANSWER]


def test_permission_requests_are_refused() -> None:
    parser = opened()
    parser.feed(line({"id": 7, "method": "session/request_permission", "params": {}}))
    assert json.loads(parser.replies())["result"] == {"outcome": {"outcome": "cancelled"}}


def backend(**options: object) -> CopilotBackend:
    return CopilotBackend(CopilotBackend.options_from({"bin": "copilot", **options}))


def test_argv_model_effort_and_seal() -> None:
    argv = backend().argv(LaunchOptions(model="gpt-5.5", effort="high"))
    assert argv[:3] == ["copilot", "--acp", "--stdio"]
    assert "--model=gpt-5.5" in argv and "--reasoning-effort=high" in argv
    assert not [a for a in argv if a.startswith("--allow")]
    assert "--reasoning-effort" not in " ".join(backend().argv(LaunchOptions(model="m")))


def test_env_passes_logins_and_byok_not_copilots_own_settings(tmp_path: Path) -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/h",
        "GH_TOKEN": "t",
        "COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9",
        "COPILOT_PROVIDER_API_KEY": "k",
        "COPILOT_HOME": "/h/.copilot",  # the user's state: never
        "COPILOT_CUSTOM_INSTRUCTIONS_DIRS": "/h/notes",  # host files into the prompt: never
        "COPILOT_ALLOW_ALL": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector",
    }
    env = backend(cache_dir=str(tmp_path)).env(base)
    assert env["GH_TOKEN"] == "t" and env["COPILOT_PROVIDER_API_KEY"] == "k"
    assert env["COPILOT_PROVIDER_BASE_URL"] == "http://127.0.0.1:9"
    assert env["COPILOT_OFFLINE"] == "true" and env["COPILOT_AUTO_UPDATE"] == "false"
    assert env["COPILOT_CACHE_HOME"] == str(tmp_path)
    assert not {"COPILOT_HOME", "COPILOT_CUSTOM_INSTRUCTIONS_DIRS", "COPILOT_ALLOW_ALL"} & set(env)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env
    assert "COPILOT_OFFLINE" not in backend().env({"PATH": "/bin", "GH_TOKEN": "t"})


def test_private_home_links_a_stored_login_only_without_an_env_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / ".copilot").mkdir()
    (tmp_path / ".copilot" / "config.json").write_text("{}")
    home = backend().private_home(str(tmp_path))
    assert home.env == ("HOME", "COPILOT_HOME") and home.files == ()
    assert home.login == (("config.json", str(tmp_path / ".copilot" / "config.json")),)
    monkeypatch.setenv("GH_TOKEN", "t")
    assert backend().private_home(str(tmp_path)).login == ()


def test_the_package_cache_is_shared_and_shown_read_only(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert backend(cache_dir=str(cache)).read_paths() == ()
    cache.mkdir()
    assert backend(cache_dir=str(cache)).read_paths() == (str(cache),)


def test_routing_only_by_prefix() -> None:
    from cli_proxy.plan.routing import route

    enabled = {"copilot": CopilotBackend}
    assert route("copilot/gpt-5.5", enabled) is not None
    assert route("gpt-5.5", enabled) is None  # gpt- models are codex's


def test_retry_notes_and_no_response_text() -> None:
    retried = run(
        opened(),
        USAGE_UPDATE,
        chunk("Info: Request failed due to a transient API error. Retrying..."),
        chunk("Error: Failed to get response from the AI model; Last error: 529 Overloaded"),
        line({"id": PROMPT, "result": {"stopReason": "end_turn"}}),
    )
    assert text(retried) == ""
    assert [e.kind for e in retried if isinstance(e, Failure)] == [FailureKind.OVERLOADED]
    empty = run(
        opened(),
        USAGE_UPDATE,
        chunk("Error: No response was returned. Send your message again to retry."),
        line({"id": PROMPT, "result": {"stopReason": "end_turn", "usage": USAGE}}),
    )
    assert text(empty) == ""
    assert [e.kind for e in empty if isinstance(e, Failure)] == [FailureKind.EMPTY_ANSWER]


def test_the_models_copilot_reports_are_listed_else_the_known_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``session/new``'s ``models`` with a GitHub login (1.0.102 through the fake Copilot API,
    copilot-1.0.102-login.json) become ``copilot/<id>``, once per binary and login; under
    BYOK, or before any report, the known models stand in."""
    from cli_proxy.backends.copilot import models as reported

    capture = json.loads((REAL / "copilot-1.0.102-login.json").read_text())
    ids = reported.reported_ids({"models": capture["session_new_models"]})
    assert ids == ("auto", "claude-sonnet-4.6", "gpt-5.5", "gemini-3.1-pro-preview")
    disabled = {"modelId": "x", "_meta": {"copilotEnablement": "disabled"}}
    assert (
        reported.reported_ids({"models": {"availableModels": [disabled, {"modelId": "-o"}]}}) == ()
    )
    assert reported.reported_ids({"configOptions": []}) == ()  # BYOK: no models key

    for var in ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GH_TOKEN", "gho_one")
    backend = CopilotBackend(CopilotBackend.options_from({"bin": "/nonexistent/copilot"}))
    assert backend.models() == CopilotBackend.known_models  # nothing reported yet
    key = backend._models_key()
    assert key is not None and "gho_one" not in repr(key)  # a digest, never the token
    assert reported.claim(key) and not reported.claim(key)  # probed once per binary and login
    assert backend.models() == CopilotBackend.known_models  # while the probe runs
    reported.remember(key, ids)
    assert backend.models() == tuple(f"copilot/{i}" for i in ids)
    monkeypatch.setenv("GH_TOKEN", "gho_two")  # another login: not its list
    assert backend.models() == CopilotBackend.known_models
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", "http://127.0.0.1:9")
    assert backend._models_key() is None and backend.models() == CopilotBackend.known_models
    backend._probe_models()  # BYOK: no probe (copilot would list none)
