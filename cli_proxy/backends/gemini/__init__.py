"""Gemini CLI over ACP: ``gemini --acp``, the Agent Client Protocol (JSON-RPC 2.0, one message
per line on stdin/stdout).

Why ACP and not ``--output-format stream-json``: the prompt goes in as content blocks, so
images reach the model in place (``inlineData`` between the text parts), and the answer comes
back with thoughts apart (``agent_thought_chunk``), a stop reason and usage. The sequence
(measured on 0.61.0, tests/data/real-cli/gemini-acp-*.md):

    -> initialize, session/new {cwd: "."}     (the warm prefix: a spare has done both)
    <- results: protocol, then {sessionId}
    -> session/prompt {sessionId, prompt: [text | image blocks]}   (sent by the parser)
    <- session/update notifications: agent_thought_chunk, agent_message_chunk ...
    <- the prompt's result {stopReason, _meta.quota.token_count} or a JSON-RPC error
       whose code is the upstream HTTP status (401, 429, 503; 500 for the rest)

Then stdin is closed and the CLI exits (~0.5 s). A "Login with Google" whose refresh is
refused never reaches the protocol: the CLI starts its interactive login instead, printing
the authorization URL on stdout before any JSON-RPC answer, then reads a code from stdin and
waits there (capture gemini-0.61.0-acp-refresh-invalid-grant): that line ends the call as
``login_expired``. A request from the CLI is never granted:
``session/request_permission`` is answered ``cancelled``, anything else with a JSON-RPC
error. The seal is the workspace settings (no core tools): with a tool enabled, 0.61.0 ran
``run_shell_command`` and ``write_file`` without asking permission at all, so a tool that
starts or completes ends the call as a failure.

Quota: 0.61.0 says nothing of it over ACP (the Code Assist quota it fetches with a Google
login stays inside the CLI, tests/data/real-cli/gemini-0.61.0-quota.md). What reaches stdout
is a model's answer or its 429 and that error's text: read into the model's quota state
(``RateLimit``, its window the model), the wait and the message (``quota_failure``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    StreamParser,
    as_int,
    classify_failure,
    empty_answer,
    exit_failure,
    kind_for_status,
    load_json_line,
    login_expired_message,
)
from cli_proxy.backends.gemini.login import RELOGIN, gemini_login
from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT, SystemPrompt
from cli_proxy.failures import FailureKind
from cli_proxy.plan.prompt import Prompt
from cli_proxy.plan.spec import PrivateHome
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.events import (
    CliEvent,
    CliText,
    CliThinking,
    Failure,
    RateLimit,
    Truncated,
    UsageReport,
)
from cli_proxy.run.logins import Login, read_json

# Workspace settings (they override the user's): no core tools, so the model cannot act on
# the host; one attempt, because a retried stream re-prints the text already streamed; no
# folder listing in the prompt (it would differ per call and defeat prompt caching); one
# model call per prompt and no loop detection: a model endpoint answers once, and the CLI's
# loop check sent a second request ("System: Potential loop detected ...") for an answer that
# quoted a repetitive prompt, then ended the call as max_turn_requests (docs/real-clis.md).
# No GEMINI.md of a parent dir: gemini sends every GEMINI.md from its work dir up to the
# nearest dir holding a boundary marker (default ``.git``), its @imports too, so a ``.git``
# in any parent of the work root let the files up to it reach the model
# (tests/data/real-cli/gemini-0.61.0-ancestor-instructions.md); no marker stops the walk at
# the work dir itself, which holds only our files.
CONTEXT_SETTINGS: dict[str, Any] = {"includeDirectoryTree": False, "memoryBoundaryMarkers": []}
WORKSPACE_SETTINGS = {
    "tools": {"core": [], "useRipgrep": False},
    "general": {"maxAttempts": 1},
    "context": CONTEXT_SETTINGS,
    "model": {"maxSessionTurns": 1, "disableLoopDetection": True},
}
# The user settings of the call's private GEMINI_CLI_HOME: the user's own are never read
# (they can run hooks, load .env, skills and memory into the prompt; see
# tests/data/real-cli/gemini-sealing.md); only the auth type is carried over.
USER_SETTINGS: dict[str, Any] = {
    "privacy": {"usageStatisticsEnabled": False},
    "skills": {"enabled": False},
    "hooksConfig": {"enabled": False},
    "general": {"maxAttempts": 1},
    "context": CONTEXT_SETTINGS,
}
# The login lives in these files of the user's ~/.gemini; they are linked, never copied.
LOGIN_FILES = ("oauth_creds.json", "google_accounts.json", "installation_id")
# ``@name`` in the prompt inlines a work-dir file; the work dir ignores every file.
GEMINIIGNORE = b"*\n"
# ``minimal``: the system instruction is this work-dir file's text (GEMINI_SYSTEM_MD, read
# relative to the CLI's cwd, which is the call's work dir with every launcher).
SYSTEM_MD = ".gemini/system.md"
# GEMINI_SYSTEM_MD from the gateway's environment or a .env file gemini finds would read a
# host file into the system prompt, GEMINI_WRITE_SYSTEM_MD writes the prompt to disk: both
# are always set here ("false": off), and a .env file never overrides a set variable.

# JSON-RPC ids of the three requests the gateway sends.
INITIALIZE, NEW_SESSION, PROMPT = 0, 1, 2
METHOD_NOT_FOUND = -32601


def rpc_line(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message as the single line ACP reads (Unicode line breaks escaped)."""
    text = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False)
    return text.translate(_LINE_BREAKS_ESCAPED).encode("utf-8") + b"\n"


_LINE_BREAKS_ESCAPED = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})

# What does not depend on the request, so a spare sends it at spawn and is ready for the
# prompt: the client declares no file system (the CLI cannot ask us for files) and opens
# the session in its own work dir ("." is the process's cwd, private to the call, holding
# our workspace settings; the same bytes for every call, warm or cold, bwrap or not).
ACP_PREFIX = rpc_line(
    {
        "id": INITIALIZE,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
        },
    }
) + rpc_line({"id": NEW_SESSION, "method": "session/new", "params": {"cwd": ".", "mcpServers": []}})


class GeminiOptions(BackendOptions):
    bin: str = "gemini"
    system_prompt: SystemPrompt = "minimal"
    """``minimal`` (default): the gateway's short neutral system instruction in place of
    gemini's ~21.5 kB agent prompt; ``cli``: gemini's own (``CLI_PROXY_GEMINI__SYSTEM_PROMPT``)."""


class GeminiBackend(Backend):
    name = "gemini"
    options_model = GeminiOptions
    model_prefixes = ("gemini-",)
    home_paths = (".gemini",)
    resident_mib = 400  # measured: 355 MiB at rest (bench/capacity.py)
    at_rest_mib = 350
    login_files = (".gemini/oauth_creds.json",)
    login_vars = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS")
    login_how = "run `gemini` once and log in, or set GEMINI_API_KEY"
    warm_prefix = ACP_PREFIX
    duplex = True
    accepts_images = True  # ACP image blocks, in place (inlineData upstream)
    known_models = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")
    env_allow = ("GEMINI_*", "GOOGLE_*", "CLOUDSDK_*")
    nesting_vars: ClassVar[frozenset[str]] = frozenset(
        {"GEMINI_CLI", "GEMINI_CLI_IDE_SERVER_PORT", "GEMINI_CLI_IDE_WORKSPACE_PATH"}
    )

    def argv(self, launch: LaunchOptions) -> list[str]:
        return [
            *self.command,
            "--acp",
            f"--model={launch.model}",  # one word: no model name can be read as an option
            # no extension or MCP server may add tools; core tools are off via settings
            "--extensions",
            "none",
            "--allowed-mcp-server-names",
            "none",
        ]

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = super().env(base)
        # the working directory is our own empty temp dir; trusting it loads our settings
        env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        env["TZ"] = "UTC"  # the date in its session context follows the time zone
        # a login that needs a new consent never opens a browser or a callback port on the
        # gateway host: it prints its URL on stdout, the sign the parser reads
        env["NO_BROWSER"] = "true"
        return self.system_prompt_env(env)

    def workdir_files(self, launch: LaunchOptions) -> tuple[tuple[str, bytes], ...]:
        settings = dict(WORKSPACE_SETTINGS)
        if launch.effort is not None:
            settings["modelConfigs"] = _thinking_override(launch.model, launch.effort)
        return (
            (".gemini/settings.json", json.dumps(settings).encode()),
            (".geminiignore", GEMINIIGNORE),
            *self.system_prompt_files(),
        )

    @property
    def minimal_system_prompt(self) -> bool:
        return getattr(self.options, "system_prompt", "minimal") == "minimal"

    def system_prompt_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the system-prompt variables set: our file (``minimal``) or off."""
        system_md = SYSTEM_MD if self.minimal_system_prompt else "false"
        return {**env, "GEMINI_SYSTEM_MD": system_md, "GEMINI_WRITE_SYSTEM_MD": "false"}

    def system_prompt_files(self) -> tuple[tuple[str, bytes], ...]:
        """The work-dir file GEMINI_SYSTEM_MD names (``minimal`` only)."""
        if not self.minimal_system_prompt:
            return ()
        return ((SYSTEM_MD, MINIMAL_SYSTEM_PROMPT.encode()),)

    def encode_prompt(self, prompt: Prompt, request: ChatCompletionRequest) -> bytes:
        """Only the session set-up: the prompt needs the session's id, so the parser sends it
        (``prompt_blocks``) once ``session/new`` has answered."""
        return self.warm_prefix

    def private_home(self, user_home: str) -> PrivateHome:
        """GEMINI_CLI_HOME relocates all of ~/.gemini (memory, settings, hooks, chats,
        projects.json): a fresh one per call holds our settings and links the login."""
        real = Path(user_home) / ".gemini"
        settings = dict(USER_SETTINGS)
        auth = _auth_type(real / "settings.json")
        if auth is not None:
            settings["security"] = {"auth": {"selectedType": auth}}
        login = tuple(
            (f".gemini/{name}", str(real / name)) for name in LOGIN_FILES if (real / name).is_file()
        )
        return PrivateHome(
            env=("HOME", "GEMINI_CLI_HOME"),
            files=((".gemini/settings.json", json.dumps(settings).encode()),),
            login=login,
        )

    def login(self, user_home: str, env: Mapping[str, str]) -> Login | None:
        real = Path(user_home) / ".gemini"
        return gemini_login(real / "oauth_creds.json", _auth_type(real / "settings.json"), env)

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> GeminiParser:
        return GeminiParser(prompt_blocks(prompt), request.model)

    @classmethod
    def cli_version(cls, stdout_lines: Sequence[str]) -> str | None:
        """The ``initialize`` result (the first line) names the agent's version."""
        for line in stdout_lines[:3]:
            obj = load_json_line(line.encode("utf-8"))
            result = obj.get("result") if obj is not None else None
            info = result.get("agentInfo") if isinstance(result, dict) else None
            if isinstance(info, dict) and isinstance(info.get("version"), str):
                return str(info["version"])
        return None


def prompt_blocks(prompt: Prompt) -> list[dict[str, Any]]:
    """The prompt's blocks as ACP content blocks, images in place (each right after the text
    that ends with its ``<image n sha256>`` tag). Block boundaries are kept: the CLI sends
    each block as its own part, so a conversation's next call repeats this one's parts
    byte for byte and the provider's implicit prefix cache can match them."""
    blocks: list[dict[str, Any]] = []
    for i in range(len(prompt.blocks)):
        for piece in prompt.pieces(i):
            if isinstance(piece, str):
                blocks.append({"type": "text", "text": piece})
            else:
                blocks.append({"type": "image", "mimeType": piece.media_type, "data": piece.base64})
    return blocks


class GeminiParser(StreamParser):
    """The client side of one ACP session: answers the CLI's requests, sends the prompt once
    the session is open, and reads the turn's updates and result."""

    def __init__(self, blocks: list[dict[str, Any]], model: str = "") -> None:
        self.done = False
        self._blocks = blocks
        self._model = model  # the quota's window (quotas are per model); "": not reported
        self._out: list[bytes] = []
        self._text_seen = False
        self._failed = False
        self._truncated = False
        self._prompted = False

    def replies(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if self.done:
            return []
        if obj is None:
            return self._login_prompt() if _LOGIN_PROMPT.search(line) else []
        method = obj.get("method")
        if isinstance(method, str):
            if "id" in obj:
                self._answer_request(obj["id"], method)
                return []
            return self._notification(method, obj.get("params"))
        if obj.get("id") == PROMPT:
            return self._prompt_result(obj)
        if obj.get("id") in (INITIALIZE, NEW_SESSION):
            return self._setup_result(obj)
        return []

    def _answer_request(self, rid: Any, method: str) -> None:
        """The CLI asks something of the client: nothing is ever granted."""
        if method == "session/request_permission":
            result: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
            self._out.append(rpc_line({"id": rid, "result": result}))
        else:
            error = {"code": METHOD_NOT_FOUND, "message": f"{method} is not offered by this client"}
            self._out.append(rpc_line({"id": rid, "error": error}))

    def _login_prompt(self) -> list[CliEvent]:
        """The CLI asks for an interactive Google login (its refresh was refused) on the
        protocol's stdout: it would wait on stdin for a code, and no code will come."""
        message = login_expired_message(
            "gemini's Google login could not be refreshed: it asked for a new interactive "
            "login (Please visit the following URL to authorize the application)",
            RELOGIN,
        )
        return self._fail(Failure(FailureKind.LOGIN_EXPIRED, message))

    def _setup_result(self, obj: dict[str, Any]) -> list[CliEvent]:
        if "error" in obj:
            return self._rpc_failure(obj["error"])
        result = obj.get("result")
        session = result.get("sessionId") if isinstance(result, dict) else None
        if obj.get("id") == NEW_SESSION and not self._prompted:
            if not isinstance(session, str) or not session:
                return self._fail(Failure(FailureKind.CLI_ERROR, "gemini opened no ACP session"))
            self._prompted = True
            params = {"sessionId": session, "prompt": self._blocks}
            self._out.append(rpc_line({"id": PROMPT, "method": "session/prompt", "params": params}))
        return []

    def _notification(self, method: str, params: Any) -> list[CliEvent]:
        if method != "session/update" or not isinstance(params, dict):
            return []
        update = params.get("update")
        if not isinstance(update, dict):
            return []
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            content = update.get("content")
            text = content.get("text") if isinstance(content, dict) else None
            if not isinstance(text, str) or not text:
                return []
            if kind == "agent_thought_chunk":
                # the CLI formats each thought "**subject**\ndescription"; no subject: "****"
                return [CliThinking(text.removeprefix("****\n"))]
            self._text_seen = True
            return [CliText(text)]
        if kind in ("tool_call", "tool_call_update") and update.get("status") != "failed":
            # one of the CLI's own tools is running: the seal (no core tools) did not hold
            title = update.get("title") or update.get("toolCallId") or "a tool"
            message = f"gemini ran one of its own tools ({title}); the gateway allows none"
            return self._fail(Failure(FailureKind.INVALID_ANSWER, message))
        return []

    def _prompt_result(self, obj: dict[str, Any]) -> list[CliEvent]:
        if "error" in obj:
            return self._rpc_failure(obj["error"])
        self.done = True
        result = obj.get("result")
        result = result if isinstance(result, dict) else {}
        events: list[CliEvent] = []
        usage = _usage(result)
        if usage is not None:
            events.append(usage)
        stop = result.get("stopReason")
        if stop == "max_tokens":
            if self._text_seen:
                self._truncated = True
                events.append(Truncated("gemini stopped at the token limit (max_tokens)"))
            else:
                # 0.61.0 sends max_tokens only when the prompt would overflow the model's
                # context window (no model call is made); an output cut by MAX_TOKENS
                # arrives as end_turn (docs/real-clis.md)
                events += self._fail(
                    Failure(
                        FailureKind.CONTEXT_LENGTH,
                        "gemini: the prompt does not fit the model's context window",
                    )
                )
        elif stop == "max_turn_requests":
            # the model called a tool; none is enabled, so the CLI refused it, and asking the
            # model again would pass the one-call limit (capture gemini-own-tool-call)
            message = (
                "gemini stopped at its turn limit (max_turn_requests): the model called one "
                "of the CLI's own tools, which the gateway does not offer"
            )
            events += self._fail(Failure(FailureKind.INVALID_ANSWER, message))
        elif stop not in (None, "end_turn"):  # refusal, cancelled
            events += self._fail(Failure(FailureKind.CLI_ERROR, f"gemini stopped: {stop}"))
        elif self._text_seen and _cut_stream(result):
            message = "gemini's model stream ended without a finish reason: the answer was cut off"
            events += self._fail(Failure(FailureKind.CLI_ERROR, message))
        if self._model and usage is not None:  # the model answered: its quota let it through
            events.append(RateLimit(self._model, "allowed"))
        return events

    def _rpc_failure(self, error: Any) -> list[CliEvent]:
        """A JSON-RPC error: its code is the upstream HTTP status when there was one."""
        error = error if isinstance(error, dict) else {}
        message = error.get("message")
        message = _upstream_message(message) if isinstance(message, str) and message else ""
        message = message or "gemini reported an error"
        failure = classify_failure(message, RELOGIN)
        code = error.get("code")
        if _NOT_FOUND.search(message):
            failure = Failure(FailureKind.BAD_REQUEST, message)
        elif isinstance(code, int) and 400 <= code < 600 and code != 500:
            failure = Failure(kind_for_status(code, failure.kind), message, failure.retry_after_s)
        if failure.kind is not FailureKind.RATE_LIMITED:
            return self._fail(failure)
        failure, window = quota_failure(failure, self._model)
        return ([window] if window is not None else []) + self._fail(failure)

    def _fail(self, failure: Failure) -> list[CliEvent]:
        self.done = True
        if self._failed:
            return []
        self._failed = True
        return [failure]

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        if self._failed:
            return []
        if not self.done:
            if exit_code != 0:
                return [exit_failure(exit_code, stderr, "gemini", RELOGIN)]
            message = "gemini exited without an answer (no result for the prompt)"
            return [Failure(FailureKind.CLI_ERROR, message)]
        if not self._text_seen and not self._truncated:
            return [empty_answer("gemini")]
        return []


def _usage(result: dict[str, Any]) -> UsageReport | None:
    meta = result.get("_meta")
    quota = meta.get("quota") if isinstance(meta, dict) else None
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(count, dict):
        return None
    return UsageReport(as_int(count.get("input_tokens")), as_int(count.get("output_tokens")))


# 0.61.0's own text for a per-day quota (``TerminalQuotaError``: the API's RetryInfo dropped)
_DAILY = re.compile(r"exhausted your daily quota", re.I)
# Code Assist's QUOTA_EXHAUSTED text: "Your quota will reset after 2h30m0s." (a Go duration)
_RESET_AFTER = re.compile(r"reset after ((?:\d+(?:\.\d+)?[hms])+)", re.I)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
PACIFIC = "America/Los_Angeles"
"""Daily (RPD) quotas of the Gemini API reset at midnight Pacific time
(https://ai.google.dev/gemini-api/docs/rate-limits)."""


def quota_failure(failure: Failure, model: str) -> tuple[Failure, RateLimit | None]:
    """A gemini 429, with what its text tells: the wait (the CLI's "Suggested retry after Ns",
    the API's "Please retry in Ns" or "Your quota will reset after 2h30m0s"; for the daily
    quota, whose wait the CLI drops, the next midnight Pacific time), a message naming a
    daily quota, and the model's quota state (``rejected``, until then when known)."""
    wait = failure.retry_after_s
    message = failure.message
    minutes = None
    m = _RESET_AFTER.search(message)
    if wait is None and m is not None:
        wait = sum(
            float(n) * {"h": 3600, "m": 60, "s": 1}[unit]
            for n, unit in _DURATION_PART.findall(m.group(1))
        )
    resets = float(round(time.time() + wait)) if wait is not None else None
    if _DAILY.search(message):
        minutes = 1440
        midnight = _next_midnight(PACIFIC)
        if wait is None and midnight is not None:
            resets, wait = midnight, max(1.0, midnight - time.time())
        what = f"gemini's daily quota of {model}" if model else "gemini's daily quota"
        message += f" ({what} is used up: it resets at midnight Pacific time"
        if midnight is not None:
            when = datetime.fromtimestamp(midnight).astimezone()
            message += ", " + when.isoformat(timespec="minutes")
        message += ")"
    window = RateLimit(model, "rejected", None, resets, minutes) if model else None
    return Failure(failure.kind, message, wait), window


def _next_midnight(zone: str) -> float | None:
    """The next midnight in ``zone`` as Unix time (None without the time zone database)."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    now = datetime.now(tz)
    return (now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)).timestamp()


def _cut_stream(result: dict[str, Any]) -> bool:
    """0.61.0 ends a turn whose model stream broke off (no finish reason) as ``end_turn``
    too, but without that turn's usage: ``model_usage`` is empty (capture gemini-stream-cut;
    a whole answer always lists its model)."""
    meta = result.get("_meta")
    quota = meta.get("quota") if isinstance(meta, dict) else None
    return isinstance(quota, dict) and quota.get("model_usage") == []


def _upstream_message(message: str) -> str:
    """The API's own message when the CLI passed its error body through as the text."""
    try:
        body = json.loads(message)
    except ValueError:
        return message
    err = body.get("error") if isinstance(body, dict) else None
    inner = err.get("message") if isinstance(err, dict) else None
    return inner if isinstance(inner, str) and inner else message


# What 0.61.0's interactive login (``authWithUserCode``) writes to stdout (after terminal
# escapes, not JSON): the URL, then the code question (no newline: seen at exit).
_LOGIN_PROMPT = re.compile(
    rb"Please visit the following URL to authorize the application|Enter the authorization code"
)
_NOT_FOUND = re.compile(r"\bmodels?/\S+ is not found|\bmodel\b.*\bnot found\b", re.I)


# OpenAI reasoning levels -> Gemini 2.5 thinking budgets (tokens; flash allows 0..24576);
# Gemini 3 models take a thinking level instead. No gemini flag exists: a workspace settings
# override matched on the model does it (tests/data/real-cli/gemini-sealing.md, Q5).
GEMINI_BUDGET = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
GEMINI_LEVEL = {"none": "low", "minimal": "low", "low": "low", "medium": "high", "high": "high"}


def _thinking_override(model: str, effort: str) -> dict[str, Any]:
    effort = "high" if effort == "xhigh" else effort
    if model.startswith("gemini-3"):
        thinking: dict[str, Any] = {"thinkingLevel": GEMINI_LEVEL[effort]}
    else:
        thinking = {"thinkingBudget": GEMINI_BUDGET[effort]}
    config = {"generateContentConfig": {"thinkingConfig": thinking}}
    return {"customOverrides": [{"match": {"model": model}, "modelConfig": config}]}


def _auth_type(path: Path) -> str | None:
    """The user's chosen auth type, the one thing taken from their settings (cached: one
    stat while the file is unchanged)."""
    try:
        auth = (read_json(path) or {})["security"]["auth"]["selectedType"]
    except (KeyError, TypeError):
        return None
    return auth if isinstance(auth, str) else None
