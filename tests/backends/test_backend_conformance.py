"""One conformance suite for every registered backend, on real CLI captures.

Each backend has a ``Conformance`` entry: which capture (``tests/data/real-cli``) shows each
case, how to see that its CLI's own tools are off, and its known limits (a case it cannot
meet, with the reason). A registered backend without an entry fails here, so a new CLI
cannot land without its captures. Backend-specific parser behaviour follows at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cli_proxy.backends.base import Backend, LaunchOptions, StreamParser, classify_failure
from cli_proxy.backends.claude.parser import ClaudeParser
from cli_proxy.backends.codex.backend import (
    DISABLED_FEATURES,
    SEALED_CONFIG,
    CodexBackend,
    CodexOptions,
)
from cli_proxy.backends.codex.catalog import FALLBACK_CATALOG, seal_catalog
from cli_proxy.backends.codex.parser import CodexParser
from cli_proxy.backends.registry import backend_class, names
from cli_proxy.failures import CliFailed, FailureKind
from cli_proxy.plan.routing import route
from cli_proxy.read.events import (
    CliEvent,
    CliText,
    CliThinking,
    CliToolCall,
    Failure,
    Truncated,
    UsageReport,
)
from cli_proxy.server.errors import api_error
from tests.conftest import CODEX_FAKE_CLI, FAKE_PY, Served, ServeFactory, fake, new_parser

REAL = Path(__file__).resolve().parents[1] / "data" / "real-cli"

CASES = ("text", "tool_call", "auth", "rate_limit", "overloaded", "empty", "token_limit")


@dataclass(frozen=True)
class Conformance:
    captures: dict[str, str]  # case -> capture stem in tests/data/real-cli
    model: str  # a model name that routes to the backend
    tools_off: Callable[[list[str], dict[str, bytes]], bool]  # argv, work-dir files
    model_of: Callable[[list[str]], str]  # the model the argv asks for
    auth_env: str  # a variable the CLI needs, which its env allowlist must pass
    known_limits: dict[str, str] = field(default_factory=dict)  # case -> why it is not met


def _claude_tools_off(argv: list[str], files: dict[str, bytes]) -> bool:
    return argv[argv.index("--tools") + 1] == "" and "--strict-mcp-config" in argv


def _gemini_tools_off(argv: list[str], files: dict[str, bytes]) -> bool:
    settings = json.loads(files[".gemini/settings.json"])
    return (
        settings["tools"]["core"] == []
        and argv[argv.index("--extensions") + 1] == "none"
        and argv[argv.index("--allowed-mcp-server-names") + 1] == "none"
    )


def _codex_tools_off(argv: list[str], files: dict[str, bytes]) -> bool:
    disabled = {argv[i + 1] for i, a in enumerate(argv) if a == "--disable"}
    config = {argv[i + 1] for i, a in enumerate(argv) if a == "--config"}
    # the sealed catalog and base instructions live in the private home (tested below); the
    # thread is ephemeral (CodexParser sends thread/start with ephemeral: true)
    return (
        argv[argv.index("app-server") + 1] == "--strict-config"
        and set(DISABLED_FEATURES) <= disabled
        and set(SEALED_CONFIG) <= config
        and 'sandbox_mode="read-only"' in config
    )


def _copilot_tools_off(argv: list[str], files: dict[str, bytes]) -> bool:
    # an allowlist of one name that is no tool: no tool at all (capture copilot-1.0.102-text
    # .upstream.json: "tools": []); the .git file keeps ancestors' instructions out
    return (
        "--available-tools=none-offered-by-cli-proxy" in argv
        and {"--disable-builtin-mcps", "--no-ask-user", "--no-auto-update"} <= set(argv)
        and files.get(".git", b"").startswith(b"gitdir:")
    )


def _flag_model(argv: list[str]) -> str:
    (model,) = [a.removeprefix("--model=") for a in argv if a.startswith("--model=")]
    return model


def _codex_model(argv: list[str]) -> str:
    (model,) = [a[len("model=") :] for a in argv if a.startswith("model=")]
    return str(json.loads(model))


CONFORMANCE: dict[str, Conformance] = {
    "claude": Conformance(
        captures={
            "text": "claude-text",
            "tool_call": "claude-json-toolcall",
            "auth": "claude-401-noretry",
            "rate_limit": "claude-429-noretry",
            "overloaded": "claude-529-noretry",
            "empty": "claude-empty-answer",
            "token_limit": "claude-max-tokens",
        },
        model="claude-sonnet-4-6",
        tools_off=_claude_tools_off,
        model_of=_flag_model,
        auth_env="ANTHROPIC_API_KEY",
    ),
    "gemini": Conformance(
        captures={  # gemini --acp 0.61.0 (sealing/gemini-acp-capture.py)
            "text": "gemini-text",
            "tool_call": "gemini-json-toolcall",
            "auth": "gemini-401",
            "rate_limit": "gemini-429",
            "overloaded": "gemini-503",
            "empty": "gemini-empty-answer",
        },
        model="gemini-2.5-flash",
        tools_off=_gemini_tools_off,
        model_of=_flag_model,
        auth_env="GEMINI_API_KEY",
        known_limits={
            # ACP 0.61.0 drops the model's finishReason: an output cut by MAX_TOKENS ends
            # "end_turn", after text or not (its stopReason max_tokens means a prompt that
            # overflows the context window); captures gemini-max-tokens{,-empty}
            "token_limit": "gemini --acp 0.61.0 reports a MAX_TOKENS finish as end_turn",
        },
    ),
    "codex": Conformance(
        # codex 0.169.0 app-server against tests/fakes/fake_model_api.py, driven by the backend's
        # own parser (codex-appserver-probe.py)
        captures={
            "text": "codex-as-text",
            "tool_call": "codex-as-toolcall",
            "auth": "codex-as-401",
            "rate_limit": "codex-as-429",
            "overloaded": "codex-as-503",
            "empty": "codex-as-empty",
            "token_limit": "codex-as-max-tokens",
        },
        model="gpt-5.5",
        tools_off=_codex_tools_off,
        model_of=_codex_model,
        auth_env="CODEX_API_KEY",
    ),
    "copilot": Conformance(
        # copilot --acp 1.0.102 through BYOK to tests/fakes/fake_model_api.py, driven by the
        # backend's own parser (copilot-capture.py)
        captures={
            "text": "copilot-1.0.102-text",
            "tool_call": "copilot-1.0.102-json-toolcall",
            "auth": "copilot-1.0.102-401",
            "rate_limit": "copilot-1.0.102-429",
            "overloaded": "copilot-1.0.102-503",
            "empty": "copilot-1.0.102-empty",
        },
        model="copilot/claude-sonnet-4.6",
        tools_off=_copilot_tools_off,
        model_of=_flag_model,
        auth_env="COPILOT_GITHUB_TOKEN",
        known_limits={
            # an answer cut at max_tokens is continued by copilot itself (three more model
            # requests, the text repeated as the model sent it), then ends end_turn: the
            # gateway gets no sign of the cut (capture copilot-1.0.102-max-tokens)
            "token_limit": "copilot 1.0.102 continues a cut answer and reports end_turn",
        },
    ),
}


BUILTIN = [n for n in names() if n in CONFORMANCE]


def replay(parser: StreamParser, stem: str) -> list[CliEvent]:
    events: list[CliEvent] = []
    for line in (REAL / f"{stem}.stdout.jsonl").read_bytes().splitlines(keepends=True):
        events += parser.feed(line)
    code = int((REAL / f"{stem}.rc").read_text())
    return events + parser.finish(code, (REAL / f"{stem}.stderr.txt").read_text())


def capture(backend: str, case: str) -> list[CliEvent]:
    conf = CONFORMANCE[backend]
    if case in conf.known_limits:
        pytest.xfail(f"known limit of {backend}: {conf.known_limits[case]}")
    return replay(new_parser(backend), conf.captures[case])


def text_of(events: list[CliEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, CliText))


def failures_of(events: list[CliEvent]) -> list[Failure]:
    return [e for e in events if isinstance(e, Failure)]


def make(backend: str, bin: str = "/opt/cli --flag") -> Backend:
    cls = backend_class(backend)
    return cls(cls.options_from({"bin": bin}), frozenset({"DROP_ME"}), frozenset({"PASS_ME"}))


def test_every_registered_backend_has_a_conformance_entry() -> None:
    assert set(names()) <= set(CONFORMANCE), "add a Conformance entry (and captures)"
    for conf in CONFORMANCE.values():
        assert set(conf.captures) | set(conf.known_limits) == set(CASES)


@pytest.mark.parametrize("backend", BUILTIN)
def test_text(backend: str) -> None:
    events = capture(backend, "text")
    assert text_of(events) and not failures_of(events)
    usage = [e for e in events if isinstance(e, UsageReport)]
    assert usage and usage[-1].prompt_tokens > 0 and usage[-1].completion_tokens > 0
    assert "@@fake" not in text_of(events)  # never the prompt echo


@pytest.mark.parametrize("backend", BUILTIN)
def test_tool_call(backend: str) -> None:
    """Prompt-JSON backends pass the model's JSON through as text (the answer parser reads
    it); a native-tools backend reports the call itself, with no text."""
    events = capture(backend, "tool_call")
    assert not failures_of(events)
    if backend_class(backend).native_tools:
        calls = [e for e in events if isinstance(e, CliToolCall)]
        assert [c.name for c in calls] == ["get_weather"] and text_of(events) == ""
        assert json.loads(calls[0].arguments) == {"city": "Paris"}
    else:
        assert '"tool_call"' in text_of(events)


@pytest.mark.parametrize(
    ("case", "kind", "status"),
    [
        ("auth", FailureKind.AUTH, 503),
        ("rate_limit", FailureKind.RATE_LIMITED, 429),
        ("overloaded", FailureKind.OVERLOADED, 503),
        ("empty", FailureKind.EMPTY_ANSWER, 502),
    ],
)
@pytest.mark.parametrize("backend", BUILTIN)
def test_failures(backend: str, case: str, kind: FailureKind, status: int) -> None:
    events = capture(backend, case)
    failures = failures_of(events)
    assert [f.kind for f in failures] == [kind]
    assert api_error(CliFailed(kind, failures[0].message)).status == status
    assert failures[0].message.strip()
    assert text_of(events) == ""  # error text never leaks into the answer


@pytest.mark.parametrize("backend", BUILTIN)
def test_token_limit_is_a_truncation_not_a_failure(backend: str) -> None:
    events = capture(backend, "token_limit")
    assert [type(e) for e in events if isinstance(e, Truncated | Failure)] == [Truncated]


@pytest.mark.parametrize("backend", BUILTIN)
def test_argv_has_the_clis_tools_off(backend: str) -> None:
    b = make(backend)
    argv = b.argv(LaunchOptions(model=CONFORMANCE[backend].model))
    assert argv[:2] == ["/opt/cli", "--flag"]
    assert CONFORMANCE[backend].model_of(argv) == CONFORMANCE[backend].model
    # issue 24 (D5): the model is never an argv word of its own (--model=NAME, or a
    # --config value for codex), so no model name can be read as an option
    assert CONFORMANCE[backend].model not in argv and "--model" not in argv
    assert not {"--resume", "--continue", "-r", "-c"} & set(argv)
    files = dict(b.workdir_files(LaunchOptions(model=CONFORMANCE[backend].model)))
    assert CONFORMANCE[backend].tools_off(argv, files)


SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "s",
    "GITHUB_TOKEN": "s",
    "OPENAI_API_KEY": "s",
    "DATABASE_URL": "s",
    "CLI_PROXY_API_KEYS": "s",
}


@pytest.mark.parametrize("backend", BUILTIN)
def test_env_is_an_allowlist(backend: str) -> None:
    nesting = {v: "1" for n in names() for v in backend_class(n).nesting_vars}
    auth = CONFORMANCE[backend].auth_env
    base = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "HTTPS_PROXY": "http://p", auth: "k"}
    extra = {"DROP_ME": "x", "PASS_ME": "y"}
    env = make(backend).env({**base, **nesting, **SECRETS, **extra})
    assert {k: env[k] for k in base} == base
    assert env["PASS_ME"] == "y"  # pass_env opens the door on purpose
    secrets = set(SECRETS) - set(backend_class(backend).login_vars)  # copilot's GITHUB_TOKEN
    assert not (set(nesting) | secrets | {"DROP_ME"}) & set(env)


@pytest.mark.parametrize("backend", BUILTIN)
def test_routing_entry(backend: str) -> None:
    cls = backend_class(backend)
    assert CONFORMANCE[backend].model in cls.known_models
    assert cls.known_models and all(isinstance(m, str) and m for m in cls.known_models)


@pytest.mark.parametrize("backend", BUILTIN)
async def test_end_to_end_through_a_fake_cli(serve: ServeFactory, backend: str) -> None:
    served: Served = await serve()
    r = await served.client.chat.completions.create(
        model=CONFORMANCE[backend].model,
        messages=[{"role": "user", "content": fake(answer=f"hello from {backend}")}],
    )
    assert r.choices[0].message.content == f"hello from {backend}"
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Prompt is too long · the request is ~300000 tokens", FailureKind.CONTEXT_LENGTH),
        ("API Error: Request rejected (429)", FailureKind.RATE_LIMITED),
        ("Please run /login", FailureKind.AUTH),
        ("API Error: 529 Overloaded", FailureKind.OVERLOADED),
        ("Request timed out", FailureKind.TIMEOUT),
        ("weird", FailureKind.CLI_ERROR),
        ("", FailureKind.CLI_ERROR),
    ],
)
def test_classify_failure(message: str, kind: FailureKind) -> None:
    assert classify_failure(message).kind is kind


# ------------------------------------------------------- backend-specific parser behaviour


def test_claude_partial_messages_not_duplicated() -> None:
    events = replay(ClaudeParser(), "claude-partial")
    assert text_of(events) == "Hello from fake claude" and not failures_of(events)


def test_claude_mid_stream_retry_adds_only_new_text() -> None:
    events = replay(ClaudeParser(), "claude-stream-error-partial")
    assert text_of(events) == "partial text" and not failures_of(events)


def test_claude_output_token_limit_keeps_every_part() -> None:
    # the CLI asked the model to continue three times: all four parts are the answer
    assert text_of(replay(ClaudeParser(), "claude-max-tokens")) == "truncated answ" * 4


def gemini_replay(stem: str) -> list[CliEvent]:
    return replay(new_parser("gemini"), stem)


def test_gemini_thoughts_are_reasoning_not_answer_text() -> None:
    events = gemini_replay("gemini-thought")
    assert text_of(events) == "After thinking: 42." and not failures_of(events)
    thought = "".join(e.text for e in events if isinstance(e, CliThinking))
    assert thought == "**Adding up**\nSix times seven."  # the CLI's "****" (no subject) gone


@pytest.mark.parametrize(
    ("stem", "kind", "retry"),
    [
        ("gemini-429-quota", FailureKind.RATE_LIMITED, 7.0),
        ("gemini-429", FailureKind.RATE_LIMITED, 7.0),  # "Suggested retry after 7s."
        ("gemini-500", FailureKind.CLI_ERROR, None),
        ("gemini-bad-model", FailureKind.BAD_REQUEST, None),
        ("gemini-stream-cut", FailureKind.CLI_ERROR, None),
        ("gemini-own-tool-call", FailureKind.INVALID_ANSWER, None),
    ],
)
def test_gemini_failures(stem: str, kind: FailureKind, retry: float | None) -> None:
    failures = failures_of(gemini_replay(stem))
    assert [(f.kind, f.retry_after_s) for f in failures] == [(kind, retry)]
    assert "{" not in failures[0].message  # the API's message, not its JSON body


def test_gemini_usage_and_token_limit_as_0_61_reports_them() -> None:
    assert [e for e in gemini_replay("gemini-text") if isinstance(e, UsageReport)] == [
        UsageReport(111, 6)
    ]
    # MAX_TOKENS after text: a plain end_turn (the known limit above); before any text: an
    # empty answer
    events = gemini_replay("gemini-max-tokens")
    assert text_of(events) == "truncated answ" and not failures_of(events)
    kinds = [f.kind for f in failures_of(gemini_replay("gemini-max-tokens-empty"))]
    assert kinds == [FailureKind.EMPTY_ANSWER]


def codex_replay(stem: str, parallel: bool = True) -> list[CliEvent]:
    # replayed lines come at once: every recorded call falls inside the call window
    return replay(CodexParser(parallel=parallel), stem)


def test_codex_500_is_an_overload() -> None:
    # codex replaces a 5xx body with a generic "high demand" text (internalServerError)
    assert [f.kind for f in failures_of(codex_replay("codex-as-500"))] == [FailureKind.OVERLOADED]


def test_codex_usage_limit_is_a_rate_limit() -> None:
    failures = failures_of(codex_replay("codex-as-usage-limit"))
    assert [f.kind for f in failures] == [FailureKind.RATE_LIMITED]
    assert "usage limit" in failures[0].message
    # codex drops the upstream Retry-After (7 s in codex-as-429, 120 s here): no wait to pass on
    assert failures[0].retry_after_s is None


def test_codex_stream_failure_is_a_cli_error_after_the_text_so_far() -> None:
    events = codex_replay("codex-as-stream-error")
    assert [f.kind for f in failures_of(events)] == [FailureKind.CLI_ERROR]
    assert text_of(events) == "partial"  # streamed before the failure (the call then fails)


def test_codex_reasoning_is_thinking_not_answer_text() -> None:
    events = codex_replay("codex-as-reasoning")
    assert text_of(events) == "After thinking: 42." and not failures_of(events)
    assert [e.text for e in events if isinstance(e, CliThinking)] == ["Let me think."]


def test_codex_usage_counts_cached_tokens() -> None:
    usage = [e for e in codex_replay("codex-as-text") if isinstance(e, UsageReport)]
    assert usage == [UsageReport(14, 5, 5, 0)]


def test_codex_text_streams_as_deltas() -> None:
    events = codex_replay("codex-as-stream8")
    assert [e.text for e in events if isinstance(e, CliText)] == [
        "one t",
        "wo th",
        "ree f",
        "our f",
        "ive s",
        "ix se",
        "ven e",
        "ight",
    ]


def test_codex_parallel_calls_are_collected() -> None:
    events = codex_replay("codex-as-toolcall-parallel")
    names = sorted(e.name for e in events if isinstance(e, CliToolCall))
    assert names == ["get_time", "get_weather"] and not failures_of(events)
    single = codex_replay("codex-as-toolcall-single", parallel=False)
    assert [e.name for e in single if isinstance(e, CliToolCall)] == ["get_weather"]


@pytest.mark.parametrize(
    ("stem", "name"), [("cli-tool", "exec_command"), ("toolcall-unknown", "no_such_tool")]
)
def test_codex_refused_call_ends_the_call_on_the_first_merged_stderr_line(
    stem: str, name: str
) -> None:
    """Codex answers the model "unsupported call" and asks again without end; it says so only
    on stderr, merged into stdout: the first such line ends the call."""
    parser = CodexParser()
    events: list[CliEvent] = []
    for line in (REAL / f"codex-as-{stem}.stdout.jsonl").read_bytes().splitlines():
        events += parser.feed(line)
        if parser.done:
            break
    assert parser.done and [f.kind for f in failures_of(events)] == [FailureKind.INVALID_ANSWER]
    assert name in failures_of(events)[0].message and text_of(events) == ""
    assert api_error(CliFailed(FailureKind.INVALID_ANSWER, "x")).status == 502


def test_codex_tool_item_ends_the_call() -> None:
    """Unsealed, a codex tool would run and show as a commandExecution item: never let it pass."""
    parser = CodexParser()
    item = {"type": "commandExecution", "id": "c", "command": "touch x", "status": "inProgress"}
    events = parser.feed(json.dumps({"method": "item/started", "params": {"item": item}}).encode())
    assert parser.done and [f.kind for f in failures_of(events)] == [FailureKind.INVALID_ANSWER]


def test_codex_approval_request_is_refused_and_fails_the_call() -> None:
    parser = CodexParser()
    request = {"id": 7, "method": "item/commandExecution/requestApproval", "params": {}}
    events = parser.feed(json.dumps(request).encode())
    assert [f.kind for f in failures_of(events)] == [FailureKind.INVALID_ANSWER]
    reply = json.loads(parser.replies())
    assert reply["id"] == 7 and "error" in reply


def test_codex_item_completed_fills_in_missing_deltas() -> None:
    parser = CodexParser()
    lines = [
        {"method": "item/agentMessage/delta", "params": {"itemId": "i", "delta": "Hel"}},
        {
            "method": "item/completed",
            "params": {"item": {"id": "i", "type": "agentMessage", "text": "Hello"}},
        },
        {
            "method": "item/completed",
            "params": {"item": {"id": "j", "type": "agentMessage", "text": "Bye"}},
        },
    ]
    deltas = [e for line in lines for e in parser.feed(json.dumps(line).encode())]
    assert deltas == [CliText("Hel"), CliText("lo"), CliText("\n\nBye")]


@pytest.mark.parametrize(
    ("model", "backend"),
    [
        ("gpt-5.5", "codex"),
        ("gpt-6.1-sol", "codex"),
        ("codex-mini-latest", "codex"),
        ("o3", "codex"),
        ("o4-mini", "codex"),
        ("o1-pro", "codex"),
        ("codex/gpt-4.1", "codex"),
        ("opus", "claude"),
        ("gemini-2.5-pro", "gemini"),
        ("gpt-4o", None),  # not a codex family on a ChatGPT plan: codex/gpt-4o reaches it
        ("gpt-9-ultra", None),
        ("o3x", None),
        ("omni", None),
    ],
)
def test_codex_routing(model: str, backend: str | None) -> None:
    classes = {n: backend_class(n) for n in names()}
    r = route(model, classes)
    assert (r.backend if r else None) == backend
    if r is not None and model.startswith("codex/"):
        assert r.cli_model == "gpt-4.1"


def _codex(tmp: Path, **options: str) -> CodexBackend:
    return CodexBackend(CodexOptions(bin=f"{FAKE_PY} {CODEX_FAKE_CLI}", **options))


def test_codex_private_home_holds_only_our_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "AGENTS.md").write_text("HOST SECRET")
    (tmp_path / ".codex" / "config.toml").write_text('model = "evil"')
    home = _codex(tmp_path).private_home(str(tmp_path))
    assert home.env == ("HOME", "CODEX_HOME")
    files = dict(home.files)
    assert set(files) == {"config.toml", "catalog.json", "instructions.md"}
    config = files["config.toml"].decode()
    for line in (
        'model_provider = "cli_proxy"',
        'model_catalog_json = "catalog.json"',
        'model_instructions_file = "instructions.md"',
        "requires_openai_auth = true",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        'base_url = "https://api.openai.com/v1"',  # no login: the API
    ):
        assert line in config.splitlines()
    assert home.login == ()  # no auth.json: nothing linked
    assert b"HOST SECRET" not in b"".join(files.values())


def test_codex_links_a_chatgpt_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    auth = tmp_path / ".codex" / "auth.json"
    auth.parent.mkdir()
    auth.write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"access_token": "a"}}))
    home = _codex(tmp_path).private_home(str(tmp_path))
    assert home.login == (("auth.json", str(auth)),)  # linked in place, never copied
    assert b"chatgpt.com/backend-api/codex" in dict(home.files)["config.toml"]
    monkeypatch.setenv("CODEX_API_KEY", "sk-test")  # a key wins over the login
    assert (
        b"api.openai.com" in dict(_codex(tmp_path).private_home(str(tmp_path)).files)["config.toml"]
    )
    custom = _codex(tmp_path, base_url="http://127.0.0.1:9/v1").private_home(str(tmp_path))
    assert b'base_url = "http://127.0.0.1:9/v1"' in dict(custom.files)["config.toml"]


def test_codex_api_key_is_named_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """app-server reads no CODEX_API_KEY of its own: the provider names it (``env_key``), the
    key itself is in none of the home's files, and a ChatGPT login beside it is not linked
    (codex would refresh it outside the gate; tests/data/real-cli/codex-0.169.0-api-key.md)."""
    auth = tmp_path / ".codex" / "auth.json"
    auth.parent.mkdir()
    auth.write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"access_token": "a"}}))
    monkeypatch.setenv("CODEX_API_KEY", "sk-secret-key-1234")
    home = _codex(tmp_path).private_home(str(tmp_path))
    config = dict(home.files)["config.toml"].decode().splitlines()
    assert 'env_key = "CODEX_API_KEY"' in config and "requires_openai_auth = true" in config
    assert home.login == ()
    assert b"sk-secret-key-1234" not in b"".join(dict(home.files).values())
    dropped = CodexBackend(
        CodexOptions(bin=f"{FAKE_PY} {CODEX_FAKE_CLI}"),
        drop_env=frozenset({"CODEX_API_KEY"}),
    ).private_home(str(tmp_path))
    assert home.login != dropped.login == (("auth.json", str(auth)),)
    assert b"env_key" not in dict(dropped.files)["config.toml"]
    monkeypatch.delenv("CODEX_API_KEY")
    assert b"env_key" not in dict(_codex(tmp_path).private_home(str(tmp_path)).files)["config.toml"]


def test_codex_catalog_is_sealed() -> None:
    catalog = {
        "models": [
            {
                "slug": "gpt-6.1-sol",
                "shell_type": "unified_exec",
                "tool_mode": "code_mode_only",
                "multi_agent_version": "v2",
                "apply_patch_tool_type": "freeform",
                "web_search_tool_type": "text",
                "experimental_supported_tools": ["x"],
                "base_instructions": "You are Codex" * 1000,
                "context_window": 272000,
            }
        ]
    }
    (model,) = seal_catalog(catalog)["models"]
    assert model["shell_type"] == "disabled" and model["experimental_supported_tools"] == []
    assert not {"tool_mode", "multi_agent_version", "apply_patch_tool_type"} & set(model)
    assert "web_search_tool_type" not in model and model["context_window"] == 272000
    assert "Codex" not in model["base_instructions"]


def test_codex_catalog_falls_back_for_a_non_codex_binary(tmp_path: Path) -> None:
    files = dict(_codex(tmp_path).private_home(str(tmp_path)).files)
    assert json.loads(files["catalog.json"]) == FALLBACK_CATALOG
    (model,) = FALLBACK_CATALOG["models"]
    assert model["shell_type"] == "disabled" and "tool_mode" not in model


def test_codex_effort_reaches_its_config() -> None:
    argv = make("codex").argv(LaunchOptions(model="gpt-5.5", effort="high"))
    assert argv[argv.index('model_reasoning_effort="high"') - 1] == "--config"
